"""The quick start's choice of wheel (tools/quickstart_wheel.py), driven without the network:
PyTorch's CPU index is a local HTTP index that answers, hangs or refuses; pip's own
configuration is a pip.conf naming another local index; the wheels are tiny real ones in
torch's layout, a CPU build or a CUDA build. The real pip runs every download."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from binaries import torch_wheel
from scratch import REPO

sys.path.insert(0, str(REPO / "tests" / "integration"))
from fixtures import Server, sha256_of  # noqa: E402

VERSION = "2.13.0"
CPU_LEG, CUDA_LEG = "libtorch-linux-x86_64-shared", "libtorch-linux-x86_64-cuda-shared"
HANG = 1.0  # the probe's deadline where the index never answers (it always runs out)
GUARD = 60.0  # the probe's deadline elsewhere: only a hang guard, an answering index is never near it


def _load():
    spec = importlib.util.spec_from_file_location("quickstart_wheel", REPO / "tools" / "quickstart_wheel.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


qs = _load()


def index_of(root: Path, *wheels: Path) -> Path:
    """A PEP 503 simple index under `root` (served at /simple) listing `wheels` for torch."""
    files, page = root / "files", root / "simple" / "torch"
    files.mkdir(parents=True)
    page.mkdir(parents=True)
    links = []
    for wheel in wheels:
        shutil.copy2(wheel, files / wheel.name)
        links.append(f'<a href="../../files/{wheel.name.replace("+", "%2B")}#sha256={sha256_of(wheel)}">{wheel.name}</a>')
    (page / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return root


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    made = tmp_path_factory.mktemp("wheels")
    return {"cpu": torch_wheel(made / "cpu"),
            "cuda named cpu": torch_wheel(made / "cuda", cuda="soname"),  # a mirror's mislabelled file
            "pypi": torch_wheel(made / "pypi", version=VERSION, cuda="soname")}


@pytest.fixture
def pip_config(tmp_path, monkeypatch):
    """pip's own configuration: a pip.conf whose index is `serve(...)`'s; nothing else pip
    could reach (no user configuration, no PIP_* variables)."""
    def configure(index_url: str) -> None:
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {index_url}\n")
        for name in [n for n in os.environ if n.startswith("PIP_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return configure


@pytest.fixture
def serve(tmp_path) -> Iterator:
    servers: list[Server] = []

    def start(name: str, *wheels: Path) -> Server:
        servers.append(Server(index_of(tmp_path / name, *wheels)).start())
        return servers[-1]
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def refusing() -> str:
    """An index URL whose port refuses connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture
def hanging() -> Iterator[str]:
    """An index URL that accepts the connection and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(sock.accept()[0])
            except OSError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    sock.close()


def obtain(dest: Path, cpu_index: str, environ: dict[str, str] | None = None, probe: float = GUARD) -> Path:
    return qs.obtain(VERSION, dest, environ or {}, cpu_index=cpu_index, probe_seconds=probe)


def test_the_cpu_index_answers_and_its_wheel_is_taken(tmp_path, wheels, serve, pip_config, capsys):
    cpu, config = serve("cpu", wheels["cpu"]), serve("config", wheels["pypi"])
    pip_config(f"{config.base_url}/simple")
    wheel = obtain(tmp_path / "dest", f"{cpu.base_url}/simple")
    assert wheel == tmp_path / "dest" / wheels["cpu"].name and wheel.read_bytes() == wheels["cpu"].read_bytes()
    err = capsys.readouterr().err
    assert f"torch=={VERSION}+cpu from PyTorch's CPU index ({cpu.base_url}/simple)" in err
    assert not config.requests  # the fallback was not needed
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == [wheel.name, wheel.name + ".fits"]  # no temp left


@pytest.mark.parametrize("cpu_index, probe, why", [("refusing", GUARD, "its host refuses connections"),
                                                   ("hanging", HANG, f"no answer in {HANG:g} s")])
def test_an_unreachable_cpu_index_falls_back_to_pips_configuration(tmp_path, wheels, serve, pip_config, capsys,
                                                                   request, cpu_index, probe, why):
    url = request.getfixturevalue(cpu_index)
    config = serve("config", wheels["cpu"])
    pip_config(f"{config.base_url}/simple")
    started = time.monotonic()
    wheel = obtain(tmp_path / "dest", url, probe=probe)
    assert wheel.name == wheels["cpu"].name
    err = capsys.readouterr().err
    assert f"PyTorch's CPU index ({url}) cannot be reached: {why}; trying the next source" in err
    assert f"torch=={VERSION}+cpu from pip's own configuration" in err
    assert time.monotonic() - started < GUARD  # the probe gave up on the hanging index, not pip


def test_no_cpu_wheel_anywhere_stops_before_extracting_in_one_line(tmp_path, wheels, serve, pip_config, refusing,
                                                                   capsys, monkeypatch):
    """A plain PyPI machine: the CPU index out of reach, pip's index with only the CUDA build
    named torch-2.13.0 (no +cpu). Nothing is downloaded into the wheel directory."""
    config = serve("config", wheels["pypi"])
    pip_config(f"{config.base_url}/simple")
    monkeypatch.setattr(qs, "CPU_INDEX", refusing)
    monkeypatch.setattr(qs, "PROBE_SECONDS", GUARD)
    assert qs.main([VERSION, str(tmp_path / "dest")]) == 1
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert out == "" and last.startswith(f"tools/quickstart.sh: found no CPU build of torch {VERSION}: ")
    assert f"PyTorch's CPU index ({refusing}) cannot be reached: its host refuses connections" in last
    assert "pip's own configuration has none: " in last and f"torch=={VERSION}+cpu" in last
    assert last.endswith(f"name an index that has torch=={VERSION}+cpu: TORCH_INDEX_URL=<index> bash tools/quickstart.sh")
    assert not list((tmp_path / "dest").glob("*.whl"))


def test_a_wheel_that_is_a_cuda_build_is_refused_by_its_binaries_whatever_its_name(tmp_path, wheels, serve,
                                                                                    pip_config, capsys):
    cpu = serve("cpu", wheels["cuda named cpu"])
    config = serve("config", wheels["pypi"])
    pip_config(f"{config.base_url}/simple")
    with pytest.raises(qs.NoWheel) as refused:
        obtain(tmp_path / "dest", f"{cpu.base_url}/simple")
    assert (f"PyTorch's CPU index ({cpu.base_url}/simple) gave {wheels['cuda named cpu'].name}, which does not fit "
            f"{CPU_LEG}: it is a cuda build (torch/lib/libtorch_cuda.so is libtorch_cuda.so); it fits {CUDA_LEG}") \
        in str(refused.value)
    assert "pip's own configuration has none" in str(refused.value)
    assert not list((tmp_path / "dest").glob("*.whl"))


def test_torch_index_url_is_the_only_source_when_given(tmp_path, wheels, serve, pip_config, refusing):
    config = serve("config", wheels["cpu"])
    pip_config(f"{config.base_url}/simple")
    with pytest.raises(qs.NoWheel) as refused:
        obtain(tmp_path / "dest", f"{config.base_url}/simple", {"TORCH_INDEX_URL": refusing})
    assert f"TORCH_INDEX_URL ({refusing}) has none: " in str(refused.value)
    assert "pip's own configuration" not in str(refused.value) and not config.requests
    explicit = serve("explicit", wheels["cpu"])
    assert obtain(tmp_path / "dest", refusing, {"TORCH_INDEX_URL": f"{explicit.base_url}/simple"}).is_file()


def test_a_judged_wheel_is_taken_again_without_any_source(tmp_path, wheels, serve, pip_config, refusing, capsys):
    config = serve("config", wheels["cpu"])
    pip_config(f"{config.base_url}/simple")
    first = obtain(tmp_path / "dest", refusing)
    config.stop()
    assert obtain(tmp_path / "dest", refusing) == first
    assert "(from pip's own configuration)" in capsys.readouterr().err.splitlines()[-1]


def test_a_cuda_wheel_an_earlier_quick_start_left_is_removed_and_replaced(tmp_path, wheels, serve, pip_config,
                                                                          refusing, capsys):
    dest = tmp_path / "dest"
    dest.mkdir()
    shutil.copy2(wheels["pypi"], dest / wheels["pypi"].name)  # no .fits record: never judged
    config = serve("config", wheels["cpu"])
    pip_config(f"{config.base_url}/simple")
    assert obtain(dest, refusing).name == wheels["cpu"].name
    assert not (dest / wheels["pypi"].name).exists()
    assert f"removing {dest / wheels['pypi'].name}, which does not fit {CPU_LEG}: it is a cuda build" in \
        capsys.readouterr().err


def test_the_quick_start_passes_the_wheel_and_the_version_only_as_readme_and_docs_say():
    script = (REPO / "tools/quickstart.sh").read_text()
    (scons,) = [line for line in script.splitlines() if " -m SCons " in line]
    arguments = scons.split(" -m SCons ", 1)[1].split()
    assert arguments == ["-Q", "-j2", CPU_LEG, 'version="$TORCH_VERSION"', 'origin="$wheel"', '"$@"']
    assert re.search(rf"^TORCH_VERSION={re.escape(VERSION)}$", script, re.M)
    said = f"`version={VERSION} origin=<wheel>`"
    for doc in ("README.md", "docs/licenses-and-provenance.md"):
        assert said in " ".join((REPO / doc).read_text().split()), doc
