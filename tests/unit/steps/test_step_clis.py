"""The small command-line modules recipes call with `{python} -m backends...`:
bundle (--from-tree, --from-list, --check-self-contained), bazel_closure (against a fake
bazel), podspec (against a local HTTP server) and the glslc probe (against fake glslc
scripts; no test ever runs apt)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from backends.probes import glslc
from backends.steps import bazel_closure, bundle, podspec, upstream
from backends.util import toolchain

ROOT = Path(__file__).resolve().parents[3]


def write_script(path: Path, body: str) -> Path:
    """An executable Python script (the fakes for bazel and glslc)."""
    path.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
    path.chmod(0o755)
    return path


# --- bundle ----------------------------------------------------------------------------

C_SOURCES = {
    "util_a": "int util_a(void) { return 1; }\n",
    "util_b": "int util_b(void) { return 2; }\n",
    "junk": "int junk(void) { return 3; }\n",
}
CXX_SOURCES = {
    "user": "namespace eng { int missing(); }\nint eng_user() { return eng::missing(); }\n",
    "provider": "namespace eng { int missing() { return 7; } }\n",
}


def need(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def sh(*argv: str | Path, cwd: Path | None = None) -> str:
    completed = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, f"{argv}: {completed.stdout}{completed.stderr}"
    return completed.stdout


def archive(lib: Path, *sources: str) -> Path:
    """lib with one member per source, each named util.o: duplicate member names across
    archives must survive the merge."""
    lib.parent.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(sources):
        cxx = name in CXX_SOURCES
        src = lib.parent / f"{lib.stem}-{index}.{'cc' if cxx else 'c'}"
        src.write_text(CXX_SOURCES[name] if cxx else C_SOURCES[name])
        obj_dir = lib.parent / f"{lib.stem}-{index}.d"
        obj_dir.mkdir(exist_ok=True)
        sh(need("c++" if cxx else "cc"), "-c", "-fPIC", src, "-o", obj_dir / "util.o")
        sh(need("ar"), "q", lib, obj_dir / "util.o")
    return lib


def members(lib: Path) -> list[str]:
    return sh(need("ar"), "t", lib).split()


def defined(lib: Path) -> set[str]:
    nm = toolchain.find_tool("llvm-nm") or need("nm")
    return {line.split()[0] for line in sh(nm, "--defined-only", "--format=posix", lib).splitlines()
            if line and not line.endswith(":")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "build"
    archive(root / "lib" / "liba.a", "util_a")
    archive(root / "sub" / "libb.a", "util_b")
    archive(root / "_deps" / "foo-src" / "libjunk.a", "junk")
    (root / "ios" / "testdata" / "x").mkdir(parents=True)
    (root / "ios" / "testdata" / "x" / "input.a").write_bytes(b"not an archive")
    return root


def test_from_tree_merges_every_archive_but_the_default_exclusion(tree: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "libmerged.a"
    assert bundle.main(["--from-tree", str(tree), "--out", str(out)]) == 0
    assert members(out) == ["util.o", "util.o"]
    assert {"util_a", "util_b"} <= defined(out) and "junk" not in defined(out)
    printed = capsys.readouterr().out
    assert printed.index("lib/liba.a") < printed.index("sub/libb.a")  # sorted


def test_from_tree_exclusion_replaces_the_default_and_skips_its_own_output(tree: Path) -> None:
    out = tree / "libmerged.a"  # inside the tree, as a rerun would find it
    for _ in range(2):
        assert bundle.main(["--from-tree", str(tree), "--exclude", "(/sub/|/testdata/)", "--out", str(out)]) == 0
        assert {"util_a", "junk"} <= defined(out) and "util_b" not in defined(out)
        assert len(members(out)) == 2


def test_from_tree_without_archives_names_the_extension(tmp_path: Path, tree: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert bundle.main(["--from-tree", str(tmp_path / "empty"), "--out", str(tmp_path / "x.a")]) == 1
    assert f"ERROR: no *.a archives found under {tmp_path / 'empty'}" in capsys.readouterr().err
    assert bundle.main(["--from-tree", str(tree), "--out", str(tmp_path / "x.lib")]) == 1
    assert "ERROR: no *.lib archives found under" in capsys.readouterr().err


def test_from_list_ignores_blank_lines_and_duplicates(tree: Path, tmp_path: Path) -> None:
    liba, libb = tree / "lib" / "liba.a", tree / "sub" / "libb.a"
    listing = tmp_path / "closure.txt"
    listing.write_text(f"{liba}\n\n{libb}\n  \n{liba}\n")
    out = tmp_path / "libLiteRt.a"
    assert bundle.main(["--from-list", str(listing), "--out", str(out)]) == 0
    assert members(out) == ["util.o", "util.o"]


def test_from_list_rejects_relative_and_missing_paths(tree: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "closure.txt"
    listing.write_text("lib/liba.a\n")
    assert bundle.main(["--from-list", str(listing), "--out", str(tmp_path / "o.a")]) == 1
    assert "must be absolute" in capsys.readouterr().err
    listing.write_text(f"{tree / 'lib' / 'liba.a'}\n{tree / 'gone.a'}\n")
    assert bundle.main(["--from-list", str(listing), "--out", str(tmp_path / "o.a")]) == 1
    assert f"missing archives: {tree / 'gone.a'}" in capsys.readouterr().err


def test_check_self_contained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if toolchain.find_tool("llvm-nm") is None:
        pytest.skip("llvm-nm is not installed")
    whole = archive(tmp_path / "whole" / "libwhole.a", "user", "provider")
    assert bundle.main(["--check-self-contained", str(whole), "--prefixes", "_ZN3eng|_ZN6tflite"]) == 0
    assert "self-contained (2 defined symbols)" in capsys.readouterr().out

    broken = archive(tmp_path / "broken" / "libbroken.a", "user")
    # The LiteRT recipe writes its prefixes comma-separated.
    assert bundle.main(["--check-self-contained", str(broken), "--prefixes", "_ZN6tflite,_ZN3eng"]) == 1
    err = capsys.readouterr().err
    assert (f"{broken}: merged archive has internal undefined symbols with no in-archive definition "
            "(unlinkable)") in err
    assert "eng::missing()" in err and "_ZN3eng7missingEv" in err
    # Another prefix set does not see it.
    assert bundle.main(["--check-self-contained", str(broken), "--prefixes", "_ZN6tflite"]) == 0


def test_bundle_cli_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        bundle.main(["--from-tree", str(tmp_path)])  # no --out
    with pytest.raises(SystemExit):
        bundle.main(["--check-self-contained", str(tmp_path / "x.a")])  # no --prefixes


def test_bundle_runs_as_a_module(tree: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "site_scons")}
    out = tmp_path / "m.a"
    completed = subprocess.run([sys.executable, "-m", "backends.steps.bundle", "--from-tree", str(tree),
                                "--out", str(out)], env=env, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert out.is_file()


# --- bazel_closure ---------------------------------------------------------------------

FAKE_BAZEL = r"""
import json, os, sys
from pathlib import Path
startup, command, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
assert startup.startswith("--output_base="), startup
base = Path(startup.split("=", 1)[1])
base.mkdir(parents=True, exist_ok=True)
with open(base / "calls.jsonl", "a") as log:
    log.write(json.dumps([command, *rest]) + "\n")
print("Loading: 0 packages loaded", file=sys.stderr)
if os.environ.get("FAKE_BAZEL_FAIL") == command:
    print("ERROR: Skipping '//nope': no such package", file=sys.stderr)
    sys.exit(7)
if command == "info":
    assert rest[-1] == "execution_root", rest
    print(base / "execroot" / "_main")
elif command == "cquery" and "--output=label" in rest:
    print(os.environ.get("FAKE_LABELS", "//litert/c:b (4d5e6f)\n@absl//x:y (1a2b3c)\n\n"
                                        "//litert/c:a (1a2b3c)\n//litert/c:a (null)"))
elif command == "cquery" and "--output=starlark" in rest:
    star = next(a.split("=", 1)[1] for a in rest if a.startswith("--starlark:file="))
    (base / "seen.star").write_text(Path(star).read_text())
    print("bazel-out/k8-opt/bin/litert/c/liba.pic.a\n\nbazel-out/k8-opt/bin/missing/libm.a\n"
          "external/absl/libx.a\nbazel-out/k8-opt/bin/litert/c/liba.pic.a")
else:
    sys.exit(f"fake bazel: unexpected {sys.argv}")
"""
FLAGS = ["--config=bulk_test_cpu", "--define=litert_disable_gpu=true", "--symlink_prefix=/b/bazel-"]
TARGET = "//litert/c:litert_runtime_c_api_so_shim"


@pytest.fixture
def fake_bazel(tmp_path: Path) -> Path:
    return write_script(tmp_path / "bazel", FAKE_BAZEL)


def closure_cli(bazel: Path, base: Path, command: str, key: str, value: str, out: Path) -> int:
    return bazel_closure.main([command, key, value, "--out", str(out), "--bazel", str(bazel),
                               "--output-base", str(base), "--", *FLAGS])


def calls(base: Path) -> list[list[str]]:
    return [json.loads(line) for line in (base / "calls.jsonl").read_text().splitlines()]


def test_labels_strip_configuration_and_sort_unique(fake_bazel: Path, tmp_path: Path) -> None:
    base, out = tmp_path / "base", tmp_path / "scratch" / "labels.txt"
    query = f"kind('cc_library rule', deps({TARGET}))"
    assert closure_cli(fake_bazel, base, "labels", "--query", query, out) == 0
    assert out.read_text() == "//litert/c:a\n//litert/c:b\n@absl//x:y\n"
    assert calls(base) == [["cquery", *FLAGS, query, "--output=label"]]


def test_bazel_is_started_by_the_path_which_finds(fake_bazel: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`--bazel bazelisk` is a bare name: started through a PATH lookup (shutil.which), never
    handed to the OS as is; on Windows only that finds npm's bazelisk.cmd."""
    started: list[str] = []
    real_run = subprocess.run

    def recording_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        started.append(argv[0])
        return real_run(argv, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(bazel_closure.subprocess, "run", recording_run)
    monkeypatch.setenv("PATH", f"{fake_bazel.parent}{os.pathsep}{os.environ['PATH']}")
    base, out = tmp_path / "base", tmp_path / "labels.txt"
    assert closure_cli(Path(fake_bazel.name), base, "labels", "--query", "deps(//x)", out) == 0
    assert started == [str(fake_bazel)]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert closure_cli(Path("bazelisk"), base, "labels", "--query", "deps(//x)", out) == 1
    assert "bazelisk not found on PATH" in capsys.readouterr().err


def test_labels_fail_on_an_empty_answer_and_on_bazel_errors(fake_bazel: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_LABELS", "")
    assert closure_cli(fake_bazel, tmp_path / "base", "labels", "--query", "deps(//x)", tmp_path / "l.txt") == 1
    assert "matched no targets" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_BAZEL_FAIL", "cquery")
    assert closure_cli(fake_bazel, tmp_path / "base", "labels", "--query", "deps(//x)", tmp_path / "l.txt") == 1
    assert "failed with exit code 7" in capsys.readouterr().err
    assert not (tmp_path / "l.txt").exists()


def test_collect_keeps_materialised_archives(fake_bazel: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    base, out = tmp_path / "base", tmp_path / "closure.txt"
    execroot = base / "execroot" / "_main"
    for relative in ("bazel-out/k8-opt/bin/litert/c/liba.pic.a", "external/absl/libx.a"):
        (execroot / relative).parent.mkdir(parents=True, exist_ok=True)
        (execroot / relative).write_bytes(b"!<arch>\n")
    assert closure_cli(fake_bazel, base, "collect", "--target", TARGET, out) == 0
    assert out.read_text().splitlines() == [str(execroot / "bazel-out/k8-opt/bin/litert/c/liba.pic.a"),
                                            str(execroot / "external/absl/libx.a")]
    assert ("WARNING: closure archive not built, dropping from merge: bazel-out/k8-opt/bin/missing/libm.a"
            in capsys.readouterr().err)
    starlark = [c for c in calls(base) if c[0] == "cquery"][0]
    assert starlark[:len(FLAGS) + 3] == ["cquery", *FLAGS, TARGET, "--output=starlark"]
    assert starlark[-1].startswith("--starlark:file=")
    assert (base / "seen.star").read_text() == bazel_closure.COLLECT_STAR
    assert calls(base)[-1] == ["info", *FLAGS, "execution_root"]


def test_collect_fails_when_nothing_was_materialised(fake_bazel: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert closure_cli(fake_bazel, tmp_path / "base", "collect", "--target", TARGET, tmp_path / "c.txt") == 1
    assert f"ERROR: no static archives materialised for {TARGET}" in capsys.readouterr().err
    assert not (tmp_path / "c.txt").exists()


# --- podspec ---------------------------------------------------------------------------

TARBALL = "TensorFlowLiteC-2.17.0.tar.gz"
FRAMEWORK_BINARY = "TensorFlowLiteC.framework/TensorFlowLiteC"


@dataclass
class Server:
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    base: str = ""


@pytest.fixture
def server() -> Iterator[Server]:
    served = Server()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            served.requests.append(self.path)
            data = served.files.get(self.path.lstrip("/"))
            if data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    served.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield served
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def tarball(slices: tuple[str, ...] = ("ios-arm64", "ios-arm64_x86_64-simulator")) -> bytes:
    """Google's layout: <top>/Frameworks/<Name>.xcframework/<slice>/<Name>.framework/..."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        def add(name: str, data: bytes = b"", link: str | None = None) -> None:
            info = tarfile.TarInfo(f"TensorFlowLiteC-2.17.0/Frameworks/{name}")
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for framework in ("TensorFlowLiteC", "TensorFlowLiteCMetal"):
            add(f"{framework}.xcframework/Info.plist", b"<plist/>")
            for name in slices:
                add(f"{framework}.xcframework/{name}/{framework}.framework/{framework}", b"binary " + name.encode())
        add(f"TensorFlowLiteC.xcframework/{slices[0]}/TensorFlowLiteC.framework/Current", link="TensorFlowLiteC")
    return buffer.getvalue()


@dataclass
class PodspecCase:
    tmp: Path
    server: Server
    podspec: Path
    pins: Path
    out: Path
    data: bytes

    def pin(self, sha256: str | None) -> None:
        table = f'"{TARBALL}" = "{sha256}"\n' if sha256 is not None else ""
        self.pins.write_text(f'name = "tflite"\n\n[sha256]\n"other.tar.gz" = "{"0" * 64}"\n{table}')

    def env(self, lock: bool = False) -> dict[str, str]:
        return {"ANIRA_CACHE": str(self.tmp / "cache"), "ANIRA_MIRRORS": "", "ANIRA_OFFLINE": "0",
                "ANIRA_LOCK": "1" if lock else "0"}

    def run(self, *names: str, lock: bool = False) -> int:
        argv = [str(self.podspec), "--field", "source.http", "--pins", str(self.pins),
                "--xcframeworks", *(names or ("TensorFlowLiteC", "TensorFlowLiteCMetal")), "--out", str(self.out)]
        return podspec.main(argv, environ=self.env(lock))


@pytest.fixture
def case(tmp_path: Path, server: Server) -> PodspecCase:
    data = tarball()
    server.files[f"release/{TARBALL}"] = data
    spec = tmp_path / "TensorFlowLiteC.podspec.json"
    spec.write_text(json.dumps({"name": "TensorFlowLiteC", "version": "2.17.0",
                                "source": {"http": f"{server.base}/release/{TARBALL}"}}))
    made = PodspecCase(tmp_path, server, spec, tmp_path / "engine.toml", tmp_path / "build" / "xcframeworks", data)
    made.pin(hashlib.sha256(data).hexdigest())
    return made


def test_podspec_fetches_verifies_and_repackages(case: PodspecCase, capsys: pytest.CaptureFixture[str]) -> None:
    case.out.mkdir(parents=True)
    (case.out / "stale.txt").write_text("from an older run")
    assert case.run() == 0
    assert sorted(p.name for p in case.out.iterdir()) == ["TensorFlowLiteC.xcframework",
                                                        "TensorFlowLiteCMetal.xcframework"]
    core = case.out / "TensorFlowLiteC.xcframework"
    assert (core / "ios-arm64" / FRAMEWORK_BINARY).read_bytes() == b"binary ios-arm64"
    assert (core / "ios-arm64_x86_64-simulator" / FRAMEWORK_BINARY).is_file()
    link = core / "ios-arm64" / "TensorFlowLiteC.framework" / "Current"
    assert link.is_symlink() and os.readlink(link) == "TensorFlowLiteC"
    assert "TensorFlowLiteC.xcframework (ios-arm64, ios-arm64_x86_64-simulator)" in capsys.readouterr().out
    assert [p.name for p in case.out.parent.iterdir()] == ["xcframeworks"]  # no scratch left
    # The second run is a cache hit: no request.
    assert case.run("TensorFlowLiteC") == 0
    assert case.server.requests == [f"/release/{TARBALL}"]
    assert [p.name for p in case.out.iterdir()] == ["TensorFlowLiteC.xcframework"]


def test_podspec_sha256_mismatch_is_a_clear_error(case: PodspecCase, capsys: pytest.CaptureFixture[str]) -> None:
    case.pin("ab" * 32)
    case.out.mkdir(parents=True)
    (case.out / "kept.txt").write_text("untouched")
    assert case.run() == 1
    err = capsys.readouterr().err
    assert f"sha256 mismatch for {case.server.base}/release/{TARBALL}: expected {'ab' * 32}" in err
    assert hashlib.sha256(case.data).hexdigest() in err and str(case.pins) in err
    assert (case.out / "kept.txt").read_text() == "untouched"


def test_podspec_unpinned_needs_lock(case: PodspecCase, capsys: pytest.CaptureFixture[str]) -> None:
    case.pin(None)
    assert case.run() == 1
    err = capsys.readouterr().err
    assert f'has no sha256 pin: add "{TARBALL}" = "<sha256>" to [sha256] in {case.pins}' in err
    assert case.server.requests == []
    assert case.run(lock=True) == 0
    assert f'"{TARBALL}" = "{hashlib.sha256(case.data).hexdigest()}"' in case.pins.read_text()  # recorded
    assert (case.out / "TensorFlowLiteC.xcframework" / "Info.plist").is_file()


@pytest.mark.parametrize(("slices", "names", "message"), [
    (("ios-arm64", "ios-arm64_x86_64-simulator"), ("TensorFlowLiteC", "TensorFlowLiteCCoreML"),
     "TensorFlowLiteCCoreML.xcframework not found"),
    (("ios-arm64",), ("TensorFlowLiteC",), "TensorFlowLiteC.xcframework: no simulator slice (slices: ios-arm64)"),
    (("ios-arm64_x86_64-simulator",), ("TensorFlowLiteC",), "no device (ios-arm64) slice"),
])
def test_podspec_checks_the_archive(case: PodspecCase, capsys: pytest.CaptureFixture[str],
                                    slices: tuple[str, ...], names: tuple[str, ...], message: str) -> None:
    data = tarball(slices)
    case.server.files[f"release/{TARBALL}"] = data
    case.pin(hashlib.sha256(data).hexdigest())
    assert case.run(*names) == 1
    assert message in capsys.readouterr().err
    assert not case.out.exists()


def test_podspec_missing_field(case: PodspecCase, capsys: pytest.CaptureFixture[str]) -> None:
    case.podspec.write_text(json.dumps({"source": {"git": "https://example.invalid/x.git"}}))
    assert case.run() == 1
    assert "no field 'source.http' (source has: git)" in capsys.readouterr().err


def test_podspec_settings_from_env(tmp_path: Path) -> None:
    settings = podspec.settings_from_env({"ANIRA_CACHE": str(tmp_path), "ANIRA_MIRRORS": "/m1, http://m2/,",
                                          "ANIRA_OFFLINE": "1", "ANIRA_LOCK": "0"})
    assert (settings.cache_dir, settings.mirrors, settings.offline, settings.lock) == \
        (tmp_path, ("/m1", "http://m2/"), True, False)


# --- glslc probe -----------------------------------------------------------------------

FAKE_GLSLC_OK = r"""
import sys
from pathlib import Path
args = sys.argv[1:]
if args == ["--version"]:
    print("shaderc v2099.1 v2099.1-fake\nspirv-tools v2099.1\nglslang 99.0.0\n\nTarget: SPIR-V 1.0")
    sys.exit(0)
assert "-fshader-stage=compute" in args, args
out = Path(args[args.index("-o") + 1])
source = next(Path(a) for a in args if a.endswith(".glsl"))
text = source.read_text()
assert text.startswith("#version 450\n#extension GL_EXT_integer_dot_product : require\n"), text
assert "dotPacked4x8EXT(" in text, text
out.write_bytes((0x07230203).to_bytes(4, "little") + bytes(16))
"""
FAKE_GLSLC_OLD = r"""
import sys
args = sys.argv[1:]
if args == ["--version"]:
    print("shaderc v2023.8 v2023.8\nspirv-tools v2023.6\nglslang 11.1.0")
    sys.exit(0)
source = next(a for a in args if a.endswith(".glsl"))
print(f"{source}:2: error: '#extension' : extension not supported: GL_EXT_integer_dot_product", file=sys.stderr)
print("1 error generated.", file=sys.stderr)
sys.exit(1)
"""


@pytest.mark.parametrize(("path", "ok", "distro", "arch", "action"), [
    ("/usr/bin/glslc", True, "ubuntu:noble", "amd64", "ok"),
    ("/usr/bin/glslc", True, "darwin", "arm64", "ok"),
    (None, False, "ubuntu:noble", "amd64", "apt-glslc"),
    (None, False, "ubuntu:noble", "arm64", "apt-glslc"),  # Ubuntu builds glslc for arm64 too
    (None, False, "debian:bookworm", "amd64", "apt-glslc"),
    (None, False, "fedora", "amd64", "manual"),
    ("/usr/bin/glslc", False, "ubuntu:noble", "amd64", "vulkan-sdk"),
    ("/usr/bin/glslc", False, "ubuntu:noble", "arm64", "manual"),  # the Linux SDK: x86_64 only
    ("/usr/bin/glslc", False, "ubuntu:jammy", "amd64", "vulkan-sdk"),
    ("/usr/bin/glslc", False, "debian:bookworm", "amd64", "vulkan-sdk"),
    ("/usr/bin/glslc", False, "fedora", "amd64", "manual"),
    ("/usr/bin/glslc", False, "darwin", "arm64", "manual"),
])
def test_decide(path: str | None, ok: bool, distro: str, arch: str, action: str) -> None:
    assert glslc.decide(path, ok, distro, arch) == action


@pytest.mark.parametrize(("text", "distro"), [
    ('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\nUBUNTU_CODENAME=noble\n', "ubuntu:noble"),
    ('ID=debian\nVERSION_CODENAME=bookworm\n', "debian:bookworm"),
    ('ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_CODENAME=wilma\nUBUNTU_CODENAME=noble\n', "ubuntu:noble"),
    ('ID=fedora\nVERSION_ID=40\n', "fedora"),
])
def test_host_distro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, distro: str) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    (tmp_path / "os-release").write_text(text)
    assert glslc.host_distro(tmp_path / "os-release") == distro


def test_probe_against_fake_compilers(tmp_path: Path) -> None:
    good = glslc.probe(str(write_script(tmp_path / "glslc-ok", FAKE_GLSLC_OK)))
    assert good.ok and good.version == "shaderc v2099.1 v2099.1-fake"
    old = glslc.probe(str(write_script(tmp_path / "glslc-old", FAKE_GLSLC_OLD)))
    assert not old.ok and "extension not supported" in old.output and old.version.startswith("shaderc v2023.8")


def test_probe_cli_with_an_explicit_compiler_never_installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def no_remedies(step: glslc.Step) -> None:
        raise AssertionError(f"tried to run {step}")
    monkeypatch.setattr(glslc, "execute", no_remedies)
    monkeypatch.setattr(glslc, "detect_host", lambda installing: glslc.Host("ubuntu:noble", "amd64", ()))
    assert glslc.main(["--glslc", str(write_script(tmp_path / "ok", FAKE_GLSLC_OK))]) == 0
    assert "glslc OK: shaderc v2099.1 v2099.1-fake" in capsys.readouterr().out
    assert glslc.main(["--install", "--glslc", str(write_script(tmp_path / "old", FAKE_GLSLC_OLD))]) == 1
    captured = capsys.readouterr()
    assert "'#extension' : extension not supported: GL_EXT_integer_dot_product" in captured.out
    assert "install a newer shaderc" in captured.err
    assert glslc.main(["--install", "--glslc", str(tmp_path / "absent")]) == 1
    assert "install glslc" in capsys.readouterr().err


class FakeHost:
    """Records remedy steps instead of running them; `installs` maps what a remedy installs (an
    apt-get package, or the Vulkan SDK's glslc) to the fake compiler it puts on PATH."""

    def __init__(self, bin_dir: Path, installs: dict[str, str]) -> None:
        self.bin_dir, self.installs, self.steps = bin_dir, installs, []

    def __call__(self, step: glslc.Step) -> None:
        self.steps.append(str(step))
        if isinstance(step, glslc.Run) and "apt-get" in step.argv:
            command = step.argv[step.argv.index("apt-get") + 1:]
            if command[:2] == ("install", "-y") and (body := self.installs.get(command[2])) is not None:
                write_script(self.bin_dir / "glslc", body)
        if isinstance(step, glslc.Run) and str(glslc.INSTALLED_GLSLC) in step.argv:
            if (body := self.installs.get("vulkan-sdk")) is not None:
                write_script(self.bin_dir / "glslc", body)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path


ROOT_NOBLE = glslc.Host("ubuntu:noble", "amd64", ())
APT = "env DEBIAN_FRONTEND=noninteractive apt-get"


def sdk_steps(prefix: str) -> list[str]:
    scratch, tarball = "{scratch}", Path(glslc.VULKAN_SDK_TARBALL).name
    return [f"download {glslc.VULKAN_SDK_TARBALL} -> {scratch}/{tarball} (sha256 {glslc.VULKAN_SDK_SHA256})",
            f"unpack {glslc.VULKAN_SDK_GLSLC} from {scratch}/{tarball} -> {scratch}/glslc",
            f"{prefix}install -m 0755 {scratch}/glslc {glslc.INSTALLED_GLSLC}"]


def without_scratch(steps: list[str]) -> list[str]:
    return [re.sub(r"/\S*anira-glslc-remedy-[^/\s]+", "{scratch}", step) for step in steps]


def test_old_glslc_gets_the_vulkan_sdks(bin_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_script(bin_dir / "glslc", FAKE_GLSLC_OLD)
    host = FakeHost(bin_dir, {"vulkan-sdk": FAKE_GLSLC_OK})
    assert glslc.run_probe(None, ROOT_NOBLE, True, run_step=host) == 0
    assert without_scratch(host.steps) == sdk_steps("")
    out = capsys.readouterr().out
    assert "extension not supported" in out and "glslc OK: shaderc v2099.1" in out


def test_missing_glslc_is_apt_installed_then_the_sdks_if_too_old(bin_dir: Path) -> None:
    host = FakeHost(bin_dir, {"glslc": FAKE_GLSLC_OLD, "vulkan-sdk": FAKE_GLSLC_OK})
    assert glslc.run_probe(None, ROOT_NOBLE, True, run_step=host) == 0
    assert without_scratch(host.steps) == [f"{APT} update", f"{APT} install -y glslc", *sdk_steps("")]


def test_a_non_root_runner_installs_through_sudo(bin_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GitHub's ubuntu-24.04 runner: not root, passwordless sudo, no glslc, then Ubuntu's too old."""
    runner = glslc.Host("ubuntu:noble", "amd64", glslc.SUDO)
    host = FakeHost(bin_dir, {"glslc": FAKE_GLSLC_OLD, "vulkan-sdk": FAKE_GLSLC_OK})
    assert glslc.run_probe(None, runner, True, run_step=host) == 0
    assert without_scratch(host.steps) == [f"sudo -n {APT} update", f"sudo -n {APT} install -y glslc",
                                           *sdk_steps("sudo -n ")]
    assert "via sudo -n" in capsys.readouterr().out


def test_the_sdk_is_never_tried_on_arm64(bin_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_script(bin_dir / "glslc", FAKE_GLSLC_OLD)
    host = FakeHost(bin_dir, {})
    assert glslc.run_probe(None, glslc.Host("ubuntu:noble", "arm64", glslc.SUDO), True, run_step=host) == 1
    assert host.steps == []
    assert "LunarG's Linux Vulkan SDK has no arm64 build" in capsys.readouterr().err


def test_remedies_run_once_then_fail_clearly(bin_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_script(bin_dir / "glslc", FAKE_GLSLC_OLD)
    host = FakeHost(bin_dir, {})  # the SDK's glslc "installed", but the one on PATH still too old
    assert glslc.run_probe(None, ROOT_NOBLE, True, run_step=host) == 1
    assert len(host.steps) == len(sdk_steps(""))
    assert "still fails the probe after: vulkan-sdk" in capsys.readouterr().err


def _tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:xz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_sdk_download_is_checked_and_only_its_glslc_taken(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The real download and unpack steps against a local server: a tarball of other bytes is
    refused naming both hashes and leaves nothing; the right one yields the glslc member alone."""
    served = tmp_path / "served"
    served.mkdir()
    sdk = _tarball(served / "sdk.tar.xz", {glslc.VULKAN_SDK_GLSLC: b"#!glslc", "1/x86_64/bin/other": b"x"})
    monkeypatch.setattr(SimpleHTTPRequestHandler, "log_message", lambda *args: None)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/sdk.tar.xz"
    try:
        good = hashlib.sha256(sdk.read_bytes()).hexdigest()
        with pytest.raises(glslc.ProbeError, match=f"has sha256 {good}, not the pinned {'0' * 64}"):
            glslc.execute(glslc.Fetch(url, tmp_path / "bad.tar.xz", "0" * 64))
        assert not list(tmp_path.glob("bad.tar.xz*"))
        glslc.execute(glslc.Fetch(url, tmp_path / "sdk.tar.xz", good))
    finally:
        server.shutdown()
    glslc.execute(glslc.Unpack(tmp_path / "sdk.tar.xz", glslc.VULKAN_SDK_GLSLC, tmp_path / "glslc"))
    assert (tmp_path / "glslc").read_bytes() == b"#!glslc" and os.access(tmp_path / "glslc", os.X_OK)
    with pytest.raises(glslc.ProbeError, match="failed"):
        glslc.execute(glslc.Unpack(tmp_path / "sdk.tar.xz", "no/such/member", tmp_path / "none"))


@pytest.mark.parametrize(("host", "install", "shown", "why"), [
    (ROOT_NOBLE, False, f"  {APT} install -y glslc", "does not change the system without --install"),
    (glslc.Host("ubuntu:noble", "amd64", None), True, f"  sudo {APT} install -y glslc",
     "needs root, or sudo without a password"),
])
def test_nothing_is_installed_without_the_option_or_a_way_to_root(bin_dir: Path, capsys: pytest.CaptureFixture[str],
                                                                  host: glslc.Host, install: bool, shown: str,
                                                                  why: str) -> None:
    recorder = FakeHost(bin_dir, {})
    assert glslc.run_probe(None, host, install, run_step=recorder) == 1
    err = capsys.readouterr().err
    assert recorder.steps == [] and why in err and shown in err.splitlines()
    assert "python -m backends.probes.glslc --install" in err


def test_privilege(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert glslc.privilege() == ()
    monkeypatch.setattr(os, "geteuid", lambda: 1001)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert glslc.privilege() is None  # no sudo at all
    sudo = write_script(tmp_path / "sudo", "import sys\nsys.exit(0 if sys.argv[1:] == ['-n', 'true'] else 2)\n")
    assert glslc.privilege() == glslc.SUDO
    write_script(sudo, "import sys\nprint('sudo: a password is required', file=sys.stderr)\nsys.exit(1)\n")
    assert glslc.privilege() is None


# --- private copies of a second in-source tree (ExecuTorch's PyTorch) ---------------------

def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def test_private_copy_cli_copies_once_per_commit(tmp_path: Path) -> None:
    shared, private = tmp_path / "git" / "pytorch", tmp_path / "leg" / "work" / "pytorch"
    shared.mkdir(parents=True)
    (shared / "setup.py").write_text("v1\n")
    _git(shared, "init", "-q")
    _git(shared, "add", "-A")
    _git(shared, "commit", "-q", "-m", "one")
    assert upstream.main(["private-copy", str(shared), str(private)]) == 0
    # The in-source build writes into the copy; the shared checkout never sees it.
    (private / "build").mkdir()
    (private / "setup.py").write_text("edited by the build\n")
    assert (shared / "setup.py").read_text() == "v1\n" and not (shared / "build").exists()
    assert upstream.main(["private-copy", str(shared), str(private)]) == 0
    assert (private / "build").is_dir()  # same commit: the leg's copy (and its build) is kept
    (shared / "setup.py").write_text("v2\n")
    _git(shared, "commit", "-q", "-am", "two")
    assert upstream.main(["private-copy", str(shared), str(private)]) == 0
    assert (private / "setup.py").read_text() == "v2\n" and not (private / "build").exists()
    assert upstream.main(["private-copy", str(tmp_path / "missing"), str(private)]) == 1
