"""`scons lock` on the real engine data (a copy), from a mirror directory holding stand-ins
for every upstream file: ONNX Runtime's inputs for every leg (macOS, Windows, iOS, Android,
WASM included) are pinned from this Linux host, and TFLite's two-stage iOS download pins
the tarball its podspec names too. The stand-ins' bytes are arbitrary: what is checked is
that every input the data names is reached and recorded."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import fixtures
from fixtures import scons

sys.path.insert(0, str(fixtures.REPO / "site_scons"))

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.pins.inputs import FILE, GIT, collect


def _copy_engine(project: Path, engine: str) -> None:
    shutil.copytree(fixtures.REPO / "engines" / engine, project / "engines" / engine)
    shutil.copy(fixtures.REPO / "variants" / f"{engine}.toml", project / "variants" / f"{engine}.toml")


def _inputs(project: Path, engine: str):
    matrix = load_matrix(project)
    legs = [leg for leg in matrix.legs if leg.engine == engine]
    return matrix, legs, collect(plan_all(matrix, legs), matrix)


def _bare_repository(path: Path, tag: str) -> str:
    """A bare repository at `path` whose annotated `tag` names one commit; returns the commit."""
    work = path.with_suffix(".work")
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "README").write_text(f"stand-in for {path.name}\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "stand-in"], check=True)
    subprocess.run([*git, "tag", "-a", tag, "-m", tag], check=True)
    subprocess.run(["git", "clone", "-q", "--mirror", str(work), str(path)], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def test_lock_pins_every_onnxruntime_input_from_a_mirror(tmp_path: Path) -> None:
    project = fixtures.new_project(tmp_path / "project")
    _copy_engine(project, "onnxruntime")
    _, legs, inputs = _inputs(project, "onnxruntime")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    expected = {}
    for item in inputs:
        if item.kind == FILE:
            (mirror / item.key).write_text(f"stand-in for {item.url}\n")
            expected[item.key] = fixtures.sha256_of(mirror / item.key)
    [source] = [item for item in inputs if item.kind == GIT]
    commit = _bare_repository(mirror / "onnxruntime.git", source.ref)

    assert scons(project, "pins", "engine=onnxruntime").returncode == 1
    locked = scons(project, "lock", "engine=onnxruntime", f"mirror={mirror}", "offline=1")
    assert locked.returncode == 0, str(locked)
    data = tomllib.loads((project / "engines/onnxruntime/engine.toml").read_text())
    assert data["sha256"] == expected and data["sources"]["source"]["commit"] == commit
    pins = scons(project, "pins", "engine=onnxruntime")
    assert pins.returncode == 0, str(pins)
    # Every OS the engine ships for had inputs to pin: none builds on this host alone.
    pinned_legs = {leg for item in inputs for leg in item.legs}
    assert {leg.os for leg in legs if leg.id in pinned_legs} == {leg.os for leg in legs if not leg.aggregate}


def test_lock_follows_the_podspec_to_the_tarball_it_names(tmp_path: Path) -> None:
    project = fixtures.new_project(tmp_path / "project")
    _copy_engine(project, "tflite")
    _, _, inputs = _inputs(project, "tflite")
    [podspec] = [item for item in inputs if item.names]
    [named] = [item for item in inputs if item.parent]
    assert (named.key, named.url) == ("", "")  # not known before the podspec is read
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    tarball_url = "https://dl.google.com/tflite-release/ios/prod/TensorFlowLiteC-2.17.0.tar.gz"
    (mirror / podspec.key).write_text(json.dumps({"name": "TensorFlowLiteC", "source": {"http": tarball_url}}))
    (mirror / "TensorFlowLiteC-2.17.0.tar.gz").write_bytes(b"stand-in tarball")
    (mirror / "tflite-2.17.0-LICENSE").write_text("stand-in license text\n")  # the texts Google's build lacks
    ios = ("engine=tflite", "platform=ios")
    offline = (f"mirror={mirror}", "offline=1")
    locked = scons(project, "lock", *ios, *offline)
    assert locked.returncode == 0, str(locked)
    data = tomllib.loads((project / "engines/tflite/engine.toml").read_text())
    assert data["nested"] == {podspec.key: tarball_url}
    assert data["sha256"] == {podspec.key: fixtures.sha256_of(mirror / podspec.key),
                              "TensorFlowLiteC-2.17.0.tar.gz": fixtures.sha256_of(mirror / "TensorFlowLiteC-2.17.0.tar.gz"),
                              "tflite-2.17.0-LICENSE": fixtures.sha256_of(mirror / "tflite-2.17.0-LICENSE")}
    pins = scons(project, "pins", *ios)
    assert pins.returncode == 0 and tarball_url in pins.stdout

    # The podspec is pinned, so what it names is fixed: a [nested] entry that says otherwise is refused.
    toml = project / "engines/tflite/engine.toml"
    toml.write_text(toml.read_text().replace(tarball_url, tarball_url.replace("prod", "edited")))
    refused = scons(project, "lock", *ios, *offline)
    assert refused.returncode != 0
    assert tarball_url in refused.stderr and tarball_url.replace("prod", "edited") in refused.stderr
