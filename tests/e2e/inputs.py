"""Real upstream-layout release inputs, assembled from package-registry artifacts.

The end-to-end tests need the files the real recipes consume (an ONNX Runtime release
tarball, a LibTorch CPU tree, an ExecuTorch package), but the machines that run them
reach only PyPI, Debian's mirror and npm. This module builds those inputs from what the
registries carry (see spec/offline-sources.md):

* ``torch_cpu_wheel``            the local torch 2.13.0+cpu wheel (``pip download``)
* ``ort_linux_x64_release``      ``onnxruntime-linux-x64-1.26.0.tgz`` in upstream's release
                                 layout: library from the PyPI wheel, headers from Debian
                                 trixie ``libonnxruntime-dev`` (API 21 <= 26)
* ``ort_linux_x64_cuda_release`` the ``gpu_cuda13`` asset's layout from ``onnxruntime-gpu``
                                 (slow, ~277 MB download; only built when called)
* ``executorch_wheel`` / ``executorch_wheel_aarch64``  the ExecuTorch wheels
* ``wheel_prefix`` / ``tgz_prefix``  unpack one of the above into a consumer prefix

Every function is idempotent: it returns the cached file when the file is there and its
recorded sha256 still matches, and otherwise rebuilds it (written to a temporary name and
renamed, so an interrupted run never leaves a half-written input behind). Next to every
produced file lies ``<file>.sha256.json`` with its sha256, size and the sha256 of the
artifacts it was made from.

The cache defaults to ``<repo>/.cache/e2e``; ``ANIRA_E2E_CACHE`` or the ``cache`` argument
overrides it. ``DEBIAN_MIRROR`` overrides the Debian mirror read from the system's apt
sources (which are only read, never edited: apt runs on a private configuration).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parents[2]

ORT_VERSION = "1.26.0"
TORCH_CPU_VERSION = "2.13.0+cpu"
# The ExecuTorch pin is 1.3.1, but the 1.3.1 wheel carries only the Python extension
# (its CMake config points at _portable_lib.so); the first wheels with a linkable C++
# runtime (lib/libexecutorch.so + share/cmake) are the 1.5 series.
EXECUTORCH_WHEEL_VERSION = "1.5.1"
# Debian trixie's libonnxruntime-dev is 1.21 (ORT_API_VERSION 21): headers must not be
# newer than the library (1.29 headers + the 1.26 library fail at OrtGetApiBase).
ORT_HEADERS_SUITE = "trixie"
ORT_MAX_API_VERSION = 26

PYTHON_TAG = "3.11"
LINUX_X64_PLATFORM = "manylinux_2_28_x86_64"
LINUX_AARCH64_PLATFORM = "manylinux_2_28_aarch64"

# Fixed timestamp for deterministic archives (2020-01-01T00:00:00Z).
_EPOCH = 1577836800


class InputError(RuntimeError):
    """An input could not be assembled; the message says which step and why."""


# --------------------------------------------------------------------------- helpers


def default_cache() -> Path:
    env = os.environ.get("ANIRA_E2E_CACHE")
    return Path(env) if env else REPO_ROOT / ".cache" / "e2e"


def _cache(cache: Path | str | None) -> Path:
    path = Path(cache) if cache is not None else default_cache()
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def _write_record(path: Path, sources: dict[str, str] | None = None, **extra) -> None:
    record = {"file": path.name, "sha256": sha256_file(path), "size": path.stat().st_size}
    if sources:
        record["sources"] = dict(sorted(sources.items()))
    record.update(extra)
    tmp = _record_path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, _record_path(path))


def _cached(path: Path) -> bool:
    """True when ``path`` exists and still matches its recorded sha256."""
    record = _record_path(path)
    if not (path.is_file() and record.is_file()):
        return False
    try:
        want = json.loads(record.read_text())["sha256"]
    except (ValueError, KeyError):
        return False
    return sha256_file(path) == want


def _run(cmd: list[str], what: str, cwd: Path | None = None, env: dict | None = None) -> str:
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except FileNotFoundError as exc:
        raise InputError(f"{what}: {cmd[0]} not found ({exc})") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise InputError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def _pip_download(
    requirement: str,
    dest: Path,
    pattern: str,
    platform: str | None = None,
    extra: list[str] | None = None,
) -> Path:
    """``pip download --no-deps`` one wheel into ``dest``; return the file matching ``pattern``."""
    dest.mkdir(parents=True, exist_ok=True)
    for candidate in sorted(dest.glob(pattern)):
        if _cached(candidate):
            return candidate
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(dest), requirement]
    if platform:
        cmd += ["--platform", platform, "--python-version", PYTHON_TAG,
                "--implementation", "cp"]
    cmd += extra or []
    _run(cmd, f"pip download {requirement}")
    found = sorted(dest.glob(pattern))
    if len(found) != 1:
        names = ", ".join(p.name for p in sorted(dest.iterdir())) or "nothing"
        raise InputError(f"pip download {requirement}: expected one {pattern} in {dest}, got: {names}")
    _write_record(found[0], requirement=requirement)
    return found[0]


def _safe_member_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise InputError(f"refusing archive member outside the tree: {name!r}")
    return path


# --------------------------------------------------------------------------- torch


def torch_cpu_wheel(cache: Path | str | None = None) -> Path:
    """The local CPU torch wheel (``torch==2.13.0+cpu``).

    The requirement names the ``+cpu`` local version exactly, so a machine without the
    local wheel fails here instead of pulling PyPI's multi-GB CUDA build.
    """
    dest = _cache(cache) / "wheels"
    return _pip_download(f"torch=={TORCH_CPU_VERSION}", dest, "torch-2.13.0+cpu-*.whl")


# --------------------------------------------------------------------------- executorch


def executorch_wheel(cache: Path | str | None = None, version: str = EXECUTORCH_WHEEL_VERSION) -> Path:
    """The ExecuTorch wheel for linux x86_64 / CPython 3.11."""
    dest = _cache(cache) / "wheels"
    return _pip_download(
        f"executorch=={version}", dest, f"executorch-{version}-*x86_64.whl", LINUX_X64_PLATFORM
    )


def executorch_wheel_aarch64(cache: Path | str | None = None, version: str = EXECUTORCH_WHEEL_VERSION) -> Path:
    """The ExecuTorch wheel for linux aarch64 / CPython 3.11 (runs under qemu-user)."""
    dest = _cache(cache) / "wheels"
    return _pip_download(
        f"executorch=={version}", dest, f"executorch-{version}-*aarch64.whl", LINUX_AARCH64_PLATFORM
    )


def platform_wheel(requirement: str, platform: str, pattern: str, cache: Path | str | None = None) -> Path:
    """One PyPI wheel built for another platform (``macosx_14_0_arm64``, ``win_amd64``),
    for tests that read its binaries without running them."""
    return _pip_download(requirement, _cache(cache) / "wheels", pattern, platform)


# --------------------------------------------------------------------------- ORT headers (Debian)


def debian_mirror() -> str:
    """The Debian mirror URL the system's apt sources already use (read-only)."""
    env = os.environ.get("DEBIAN_MIRROR")
    if env:
        return env.rstrip("/")
    uris: list[str] = []
    sources_d = Path("/etc/apt/sources.list.d")
    for deb822 in sorted(sources_d.glob("*.sources")) if sources_d.is_dir() else []:
        for stanza in re.split(r"\n\s*\n", deb822.read_text()):
            fields = dict(
                (m.group(1).lower(), m.group(2).strip())
                for m in re.finditer(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M)
            )
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                uris += fields.get("uris", "").split()
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            m = re.match(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)", line)
            if m:
                uris.append(m.group(1))
    for uri in uris:
        if re.search(r"/debian/?$", uri):
            return uri.rstrip("/")
    raise InputError(
        "no Debian mirror found in /etc/apt/sources.list{,.d/*.sources}; set DEBIAN_MIRROR"
    )


def _apt_options(aptdir: Path) -> list[str]:
    return [
        "-o", f"Dir::Etc::SourceList={aptdir / 'etc' / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/nonexistent",
        "-o", f"Dir::State::Lists={aptdir / 'lists'}",
        "-o", f"Dir::Cache::Archives={aptdir / 'archives'}",
        "-o", f"Dir::Cache={aptdir / 'cache'}",
        "-o", "Debug::NoLocking=1",
    ]


def debian_package(cache: Path | str | None, package: str, suite: str) -> Path:
    """``apt-get download <package>/<suite>`` through a private apt configuration."""
    root = _cache(cache)
    aptdir = root / "apt" / suite
    debs = root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    for candidate in sorted(debs.glob(f"{package}_*.deb")):
        if _cached(candidate):
            return candidate
    for sub in ("lists/partial", "archives/partial", "cache", "etc"):
        (aptdir / sub).mkdir(parents=True, exist_ok=True)
    (aptdir / "etc" / "sources.list").write_text(f"deb {debian_mirror()} {suite} main\n")
    opts = _apt_options(aptdir)
    _run(["apt-get", *opts, "update"], f"apt-get update ({suite}, private config)")
    with tempfile.TemporaryDirectory(dir=debs) as tmp:
        _run(["apt-get", *opts, "download", f"{package}/{suite}"],
             f"apt-get download {package}/{suite}", cwd=Path(tmp))
        got = sorted(Path(tmp).glob(f"{package}_*.deb"))
        if len(got) != 1:
            raise InputError(f"apt-get download {package}/{suite} produced {got}")
        final = debs / got[0].name
        os.replace(got[0], final)
    _write_record(final, package=package, suite=suite)
    return final


def _deb_extract(deb: Path, dest: Path) -> None:
    _run(["dpkg-deb", "-x", str(deb), str(dest)], f"dpkg-deb -x {deb.name}")


def _ort_api_version(header: Path) -> int:
    m = re.search(r"#define\s+ORT_API_VERSION\s+(\d+)", header.read_text(errors="replace"))
    if not m:
        raise InputError(f"no ORT_API_VERSION in {header}")
    return int(m.group(1))


# --------------------------------------------------------------------------- deterministic tar


def _deterministic_tgz(src_root: Path, top: str, out: Path) -> None:
    """tar.gz of ``src_root/top``: sorted, fixed mtime, root owner, normalised modes."""
    entries = [src_root / top]
    for dirpath, dirnames, filenames in os.walk(src_root / top):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            entries.append(Path(dirpath) / name)
    entries.sort(key=lambda p: p.relative_to(src_root).as_posix())
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                for path in entries:
                    info = tar.gettarinfo(str(path), arcname=path.relative_to(src_root).as_posix())
                    info.mtime = _EPOCH
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    if info.issym():
                        info.mode = 0o777
                        tar.addfile(info)
                    elif info.isdir():
                        info.mode = 0o755
                        tar.addfile(info)
                    else:
                        info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
                        with open(path, "rb") as fh:
                            tar.addfile(info, fh)
    os.replace(tmp, out)


# --------------------------------------------------------------------------- ORT release tarballs


def _ort_release(
    cache: Path | str | None,
    *,
    pip_name: str,
    asset: str,
    extra_libs: tuple[str, ...],
) -> Path:
    root = _cache(cache)
    out_dir = root / "releases"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{asset}.tgz"
    if _cached(out):
        return out

    wheel = _pip_download(
        f"{pip_name}=={ORT_VERSION}",
        root / "wheels",
        f"{pip_name.replace('-', '_')}-{ORT_VERSION}-*x86_64.whl",
        LINUX_X64_PLATFORM,
    )
    deb = debian_package(root, "libonnxruntime-dev", ORT_HEADERS_SUITE)

    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        work = Path(tmp)
        debx = work / "deb"
        _deb_extract(deb, debx)
        headers = debx / "usr" / "include" / "onnxruntime"
        if not (headers / "onnxruntime_cxx_api.h").is_file():
            raise InputError(f"{deb.name} has no usr/include/onnxruntime/onnxruntime_cxx_api.h")
        api = _ort_api_version(headers / "onnxruntime_c_api.h")
        if api > ORT_MAX_API_VERSION:
            raise InputError(
                f"{deb.name} headers are ORT_API_VERSION {api}, newer than the "
                f"{ORT_VERSION} library ({ORT_MAX_API_VERSION}); they would fail at OrtGetApiBase"
            )

        tree = work / "stage" / asset
        (tree / "lib").mkdir(parents=True)
        shutil.copytree(headers, tree / "include")

        wanted = {f"libonnxruntime.so.{ORT_VERSION}", "libonnxruntime_providers_shared.so", *extra_libs}
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                member = _safe_member_path(info.filename)
                if member.parent == PurePosixPath("onnxruntime/capi") and member.name in wanted:
                    target = tree / "lib" / member.name
                    with zf.open(info) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    target.chmod(0o755)
                    wanted.discard(member.name)
        if wanted:
            raise InputError(f"{wheel.name} lacks onnxruntime/capi/{', '.join(sorted(wanted))}")

        lib = tree / "lib"
        os.symlink(f"libonnxruntime.so.{ORT_VERSION}", lib / "libonnxruntime.so.1")
        os.symlink("libonnxruntime.so.1", lib / "libonnxruntime.so")
        (tree / "VERSION_NUMBER").write_text(ORT_VERSION + "\n")

        _deterministic_tgz(work / "stage", asset, out)

    _write_record(
        out,
        sources={wheel.name: sha256_file(wheel), deb.name: sha256_file(deb)},
        ort_api_version_of_headers=api,
    )
    return out


def ort_linux_x64_release(cache: Path | str | None = None) -> Path:
    """``onnxruntime-linux-x64-1.26.0.tgz`` in upstream's release layout.

    ``onnxruntime-linux-x64-1.26.0/{include/*.h, lib/libonnxruntime.so.1.26.0,
    lib/libonnxruntime.so.1 ->, lib/libonnxruntime.so ->,
    lib/libonnxruntime_providers_shared.so, VERSION_NUMBER}``; the library comes from
    PyPI ``onnxruntime==1.26.0`` and the headers from Debian trixie's
    ``libonnxruntime-dev`` (1.21, ORT_API_VERSION 21, safe against the 1.26 library).
    """
    return _ort_release(
        cache, pip_name="onnxruntime", asset=f"onnxruntime-linux-x64-{ORT_VERSION}", extra_libs=()
    )


def ort_linux_x64_cuda_release(cache: Path | str | None = None) -> Path:
    """``onnxruntime-linux-x64-gpu_cuda13-1.26.0.tgz`` (slow: ~277 MB download, ~400 MB lib).

    The same layout as ``ort_linux_x64_release`` plus ``libonnxruntime_providers_cuda.so``
    and ``libonnxruntime_providers_tensorrt.so``, from PyPI ``onnxruntime-gpu==1.26.0``.
    PyPI's build is linked against CUDA 12 / cuDNN 9; it stands in for the upstream
    ``gpu_cuda13`` asset's *layout* (file names, providers next to the core library), not
    for its CUDA major version. It cannot run a CUDA session here (no GPU, no NVIDIA libs),
    but the CPU forward pass works because ORT loads the CUDA provider lazily.
    """
    return _ort_release(
        cache,
        pip_name="onnxruntime-gpu",
        asset=f"onnxruntime-linux-x64-gpu_cuda13-{ORT_VERSION}",
        extra_libs=("libonnxruntime_providers_cuda.so", "libonnxruntime_providers_tensorrt.so"),
    )


# --------------------------------------------------------------------------- unpacking into prefixes


def _stamp_ok(dest: Path, source: Path) -> bool:
    stamp = dest / ".anira-e2e-source"
    return stamp.is_file() and stamp.read_text().strip() == sha256_file(source)


def _finish(dest_tmp: Path, dest: Path, source: Path) -> Path:
    (dest_tmp / ".anira-e2e-source").write_text(sha256_file(source) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(dest_tmp, dest)
    return dest


def wheel_prefix(wheel: Path, package: str, dest: Path, subdirs=("include", "lib", "share")) -> Path:
    """Unpack ``<package>/{subdirs}`` of a wheel as a prefix ``dest/{subdirs}``.

    Idempotent: ``dest`` carries the sha256 of the wheel it came from.
    """
    dest = Path(dest)
    if _stamp_ok(dest, wheel):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                member = _safe_member_path(info.filename)
                if len(member.parts) < 3 or member.parts[0] != package or member.parts[1] not in subdirs:
                    continue
                target = tmp.joinpath(*member.parts[1:])
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    target.chmod(mode)
        missing = [d for d in subdirs if not (tmp / d).is_dir()]
        if missing:
            raise InputError(f"{wheel.name} has no {package}/{{{','.join(missing)}}}")
        return _finish(tmp, dest, wheel)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def tgz_prefix(tgz: Path, dest: Path) -> Path:
    """Unpack a release tarball's single top-level directory as the prefix ``dest``."""
    dest = Path(dest)
    if _stamp_ok(dest, tgz):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        with tarfile.open(tgz) as tar:
            members = tar.getmembers()
            tops = {_safe_member_path(m.name).parts[0] for m in members}
            if len(tops) != 1:
                raise InputError(f"{tgz.name}: expected one top-level directory, got {sorted(tops)}")
            for m in members:
                if m.issym() and (m.linkname.startswith("/") or ".." in PurePosixPath(m.linkname).parts):
                    raise InputError(f"{tgz.name}: link escapes the tree: {m.name} -> {m.linkname}")
                if not (m.isfile() or m.isdir() or m.issym()):
                    raise InputError(f"{tgz.name}: unsupported member type: {m.name}")
            tar.extractall(tmp, members=members)
        inner = tmp / tops.pop()
        final_tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
        final_tmp.rmdir()
        os.replace(inner, final_tmp)
        shutil.rmtree(tmp)
        return _finish(final_tmp, dest, tgz)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


if __name__ == "__main__":  # pragma: no cover - manual use: python3 tests/e2e/inputs.py [what]
    targets = {
        "torch": torch_cpu_wheel,
        "ort": ort_linux_x64_release,
        "ort-cuda": ort_linux_x64_cuda_release,
        "executorch": executorch_wheel,
        "executorch-aarch64": executorch_wheel_aarch64,
    }
    for name in sys.argv[1:] or ["torch", "ort", "executorch"]:
        print(name, targets[name]())
