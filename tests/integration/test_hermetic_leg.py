"""A fixture leg whose upstream downloads a dependency at configure time (ONNX Runtime's way:
cmake/deps.txt of `name;URL;SHA1`, FetchContent, a `mirror/` preferred for each URL), built by
scons end to end: the dependency is a pinned input fetched through `mirror=`, laid in
upstream's mirror, the configure and build run with the network off, and the SBOM lists
exactly the inputs the build used. A tree declaring a download its leg does not serve fails
before the build, naming the URL."""
from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

import fixtures
from backends.runner.network import isolation_prefix
from fixtures import LegRow, fetchcontent_of_deps_txt, scons

LEG = "fixdeps-linux-x86_64-shared"
ARCHIVE = "fixdeps-1.0.0-Linux-x86_64-shared.zip"
DEP_URL = "https://deps.example.invalid/dep/archive/v1.0.tar.gz"  # unreachable: only mirror= has it
UPSTREAM_CMAKE = ("""\
cmake_minimum_required(VERSION 3.24)
project(fixdeps C)
""" + fetchcontent_of_deps_txt("cmake/deps.txt") + """\
add_library(fixdeps SHARED fixdeps.c)
target_link_libraries(fixdeps PRIVATE dep)
install(TARGETS fixdeps LIBRARY DESTINATION lib)
install(FILES fixdeps.h DESTINATION include)
""")
RECIPE = '''\
"""fixdeps (fixture): an upstream whose CMake downloads what cmake/deps.txt lists."""
from __future__ import annotations

from dataclasses import replace

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Command, Contract, CopyRule, Plan


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    deps = kit.build_downloads(engine, leg, "ort-deps")
    served = bool(deps)
    serve = [kit.check_build_downloads(engine, "ort-deps"),
             Command("mirror deps.txt", ("{python}", "-m", "backends.steps.build_downloads", "mirror", "--into",
                                         "{src}/mirror", *(f"--file={d.url}={{download:{d.name}}}" for d in deps)))]
    build = (*(serve if served else ()),
             Command("configure", ("cmake", "-S", "{src}", "-B", "{build}", "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=Release"), network=not served),
             Command("build", ("cmake", "--build", "{build}"), network=not served),
             Command("install", ("cmake", "--install", "{build}", "--prefix", "{install}")))
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(replace(kit.url_source(engine, "source"), roots=(f"fixdeps-{engine.version}",)), *deps),
        build=build,
        collect=(CopyRule("{install}/include/*.h", "include"), CopyRule("{install}/lib/libfixdeps.so*", "lib")),
        contract=Contract(required=("include/fixdeps.h", "lib/libfixdeps.so"), symbols=(("lib/libfixdeps.so", "fixdeps_value"),)),
    )
'''


def _dep_archive(out: Path) -> bytes:
    tree = out / "dep-tree"
    (tree).mkdir(parents=True, exist_ok=True)
    (tree / "CMakeLists.txt").write_text("add_library(dep STATIC dep.c)\nset_target_properties(dep PROPERTIES "
                                         "POSITION_INDEPENDENT_CODE ON)\n")
    (tree / "dep.c").write_text("int dep_value(void) { return 41; }\n")
    fixtures.write_tgz(out / "dep.tar.gz", tree, "dep-1.0")
    return (out / "dep.tar.gz").read_bytes()


def _project(tmp_path: Path, server: fixtures.Server, *, tree_url: str = DEP_URL) -> tuple[Path, Path]:
    served = server.root
    dep = _dep_archive(tmp_path)
    sha1 = hashlib.sha1(dep).hexdigest()
    upstream = tmp_path / "upstream"
    (upstream / "cmake").mkdir(parents=True)
    (upstream / "CMakeLists.txt").write_text(UPSTREAM_CMAKE)
    (upstream / "cmake/deps.txt").write_text(f"# name;URL;SHA1\ndep;{tree_url};{sha1}\n")
    (upstream / "fixdeps.h").write_text("int fixdeps_value(void);\n")
    (upstream / "fixdeps.c").write_text("int dep_value(void);\nint fixdeps_value(void) { return dep_value() + 1; }\n")
    source_sha = fixtures.write_tgz(served / "fixdeps-1.0.0.tar.gz", upstream, "fixdeps-1.0.0")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "dep-v1.0.tar.gz").write_bytes(dep)
    project = fixtures.new_project(tmp_path / "project")
    engine = project / "engines/fixdeps"
    engine.mkdir(parents=True)
    (engine / "engine.toml").write_text(f"""\
name = "fixdeps"
libname = "fixdeps"
version = "1.0.0"
license = "MIT"

[sources.source]
url = "{server.base_url}/fixdeps-{{version}}.tar.gz"

[[build_downloads]]
reader = "ort-deps"
name = "dep"
url = "{DEP_URL}"
upstream_hash = "sha1:{sha1}"
where = "cmake/deps.txt:2"
license = "MIT"

[sha256]
"fixdeps-1.0.0.tar.gz" = "{source_sha}"
"dep-v1.0.tar.gz" = "{hashlib.sha256(dep).hexdigest()}"
""")
    (engine / "recipe.py").write_text(RECIPE)
    (project / "variants/fixdeps.toml").write_text(fixtures.variants_toml((LegRow(kind="shared", can_run=False),),
                                                                          "fixdeps (fixture) leg"))
    return project, mirror


@pytest.fixture
def server(tmp_path: Path, tools: None):
    with fixtures.Server(tmp_path / "served") as running:
        yield running


@pytest.mark.skipif(not isolation_prefix(), reason="this host cannot make a network namespace")
def test_the_leg_builds_with_the_network_off_and_its_sbom_lists_exactly_its_inputs(tmp_path, server):
    project, mirror = _project(tmp_path, server)
    shutil.copy2(server.root / "fixdeps-1.0.0.tar.gz", mirror)  # every input in the mirror: offline=1 holds
    run = scons(project, LEG, f"mirror={mirror}", "offline=1")
    assert run.returncode == 0, str(run)
    assert server.requests == []  # nothing was asked of the upstream server
    build = json.loads((project / f"build/legs/{LEG}/steps/build.json").read_text())
    ran = {c["label"]: c for c in build["body"]["commands"]} if "body" in build else {
        c["label"]: c for c in build["commands"]}
    assert ran["configure"].get("network") == "off" and ran["build"].get("network") == "off"
    manifest = json.loads((project / "dist" / (ARCHIVE + ".json")).read_text())
    document = manifest["sbom"]["document"]
    inputs = {p["SPDXID"]: p for p in document["packages"]
              if p["SPDXID"].startswith(("SPDXRef-Input-", "SPDXRef-BuildDownload-"))}
    assert set(inputs) == {"SPDXRef-Input-source", "SPDXRef-BuildDownload-dep"}
    dep = inputs["SPDXRef-BuildDownload-dep"]
    assert dep["downloadLocation"] == DEP_URL and dep["licenseDeclared"] == "MIT"
    assert {c["algorithm"] for c in dep["checksums"]} == {"SHA256", "SHA1"}
    with zipfile.ZipFile(project / "dist" / ARCHIVE) as archive:
        assert "lib/libfixdeps.so" in archive.namelist()


def test_a_tree_declaring_a_download_its_leg_does_not_serve_fails_naming_it(tmp_path, server):
    moved = "https://deps.example.invalid/dep/archive/v2.0.tar.gz"
    project, mirror = _project(tmp_path, server, tree_url=moved)
    run = scons(project, LEG, f"mirror={mirror}")
    assert run.returncode != 0
    assert moved in run.output and "no override serves" in run.output
    assert not (project / "dist" / ARCHIVE).exists()
