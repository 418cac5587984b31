"""Real upstream-layout release inputs, assembled from package-registry artifacts.

The end-to-end tests need the files the real recipes consume (an ONNX Runtime release
tarball, a LibTorch CPU tree, an ExecuTorch package), but the machines that run them
reach only PyPI, Debian's mirror and npm. This module builds those inputs from what the
registries carry (docs/upstream.md#offline-sources):

* ``torch_cpu_wheel``            the torch 2.13.0+cpu wheel, found as the quick start finds it
* ``ort_linux_x64_release``      ``onnxruntime-linux-x64-<pin>.tgz`` in upstream's release
                                 layout: library from the PyPI wheel, headers from Debian
                                 trixie ``libonnxruntime-dev`` (API 21 <= the library's)
* ``ort_linux_x64_cuda_release`` the ``gpu_cuda13`` asset's layout from ``onnxruntime-gpu``
                                 (slow, ~277 MB download; only built when called)
* ``ort_linux_aarch64_release``  ``onnxruntime-linux-aarch64-1.26.0.tgz``, the same from the
                                 aarch64 wheel
* ``ort_win_x64_release``        ``onnxruntime-win-x64-1.26.0.zip``: the ``win_amd64`` wheel's DLLs,
                                 import libraries made from their export tables, Debian's headers
* ``ort_macos_wheel``            the ``onnxruntime`` 1.23.2 wheel for macOS x86_64 or arm64
                                 (CoreML compiled in; the newest with both architectures)
* ``ort_source_include``         ``include/`` of ONNX Runtime's source tree (Debian trixie's
                                 1.21.0 orig tarball): the headers source legs stage, EP ones too
* ``executorch_wheel`` / ``executorch_wheel_aarch64``  the ExecuTorch wheels
* ``wheel_prefix`` / ``release_prefix``  unpack one of the above into a consumer prefix

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
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO, Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "site_scons"))
sys.path.insert(0, str(REPO_ROOT / "tools"))  # quickstart_wheel: how the quick start gets torch

from backends.steps.fixups import import_lib

def _toml(relative: str) -> dict:
    return tomllib.loads((REPO_ROOT / relative).read_text())


# The versions follow the data: the ONNX Runtime pin, and the version of the ExecuTorch
# wheel legs (the 1.3.1 wheel carries only the Python extension, its CMake config points
# at _portable_lib.so; the first wheels with a linkable C++ runtime are the 1.5 series).
ORT_VERSION = _toml("engines/onnxruntime/engine.toml")["version"]
TORCH_CPU_VERSION = "2.13.0+cpu"
EXECUTORCH_WHEEL_VERSION = next(row["version"] for row in _toml("variants/executorch.toml")["leg"]
                                if row.get("source") == "prebuilt")
# Debian trixie's libonnxruntime-dev is 1.21 (ORT_API_VERSION 21): headers must not be
# newer than the library (1.29 headers + the 1.26 library fail at OrtGetApiBase). ORT
# 1.x's C API version is its minor version.
ORT_HEADERS_SUITE = "trixie"
ORT_MAX_API_VERSION = int(ORT_VERSION.split(".")[1])

# The newest ONNX Runtime with PyPI wheels for both macOS architectures (x86_64 ended there).
ORT_MACOS_VERSION = "1.23.2"
# ONNX Runtime's source tree as Debian trixie ships it (only include/ is used): the one
# registry copy of the EP headers (coreml_provider_factory.h) no newer than the libraries.
# Debian's pool keeps a released orig tarball byte for byte; its sha256 is pinned here.
ORT_SOURCE_VERSION = "1.21.0"
ORT_SOURCE_TARBALL = "onnxruntime_1.21.0+dfsg.orig.tar.xz"
ORT_SOURCE_SHA256 = "32df1f82bd6b07b18372c0f387133214905cbde7a586b3ad83f0ed0075f80273"

PYTHON_TAG = "3.11"
LINUX_X64_PLATFORM = "manylinux_2_28_x86_64"
LINUX_AARCH64_PLATFORM = "manylinux_2_28_aarch64"
WINDOWS_X64_PLATFORM = "win_amd64"
MACOS_PLATFORMS = {"x86_64": "macosx_13_0_x86_64", "arm64": "macosx_13_0_arm64"}

# Fixed timestamp for deterministic archives (2020-01-01T00:00:00Z).
_EPOCH = 1577836800
# The ORT release stand-ins' layout; a cached one of an older layout is made again. 2: with
# upstream's LICENSE and ThirdPartyNotices.txt beside include/ and lib/ (the wheel's copies).
ORT_RELEASE_LAYOUT = 2
ORT_LICENSE_TEXTS = ("LICENSE", "ThirdPartyNotices.txt")


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


def _cached(path: Path, layout: int | None = None) -> bool:
    """True when ``path`` exists and still matches its recorded sha256 (and ``layout``, when given)."""
    record = _record_path(path)
    if not (path.is_file() and record.is_file()):
        return False
    try:
        recorded = json.loads(record.read_text())
        want = recorded["sha256"]
    except (ValueError, KeyError):
        return False
    if layout is not None and recorded.get("layout") != layout:
        return False
    return sha256_file(path) == want


def _ort_license_texts(wheel: Path, tree: Path) -> None:
    """Upstream's release archives carry LICENSE and ThirdPartyNotices.txt at their top: the
    same texts as the wheel's ``onnxruntime/`` copies."""
    for text in _wheel_files(wheel, "onnxruntime", set(ORT_LICENSE_TEXTS), tree):
        text.chmod(0o644)


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
    env: dict[str, str] | None = None,
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
    _run(cmd, f"pip download {requirement}", env=env)
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
    """The CPU torch wheel (``torch==2.13.0+cpu``), found as the quick start finds it
    (tools/quickstart_wheel.py: PyTorch's CPU index, else pip's own configuration; judged by
    its binaries), in a directory of its own: the quick start's judge removes a wheel that
    does not fit, and ``wheels/`` also holds PyPI's CUDA build."""
    import quickstart_wheel

    try:
        return quickstart_wheel.obtain(TORCH_CPU_VERSION.removesuffix("+cpu"), _cache(cache) / "torch-cpu",
                                       os.environ)
    except quickstart_wheel.NoWheel as error:
        raise InputError(f"the torch CPU wheel: {error}") from None


# Where pip's configuration (or the environment) may name a local CPU wheel or another index.
_PIP_SOURCES = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX")


def pypi_only_environment() -> dict[str, str]:
    """The environment of a pip that reaches PyPI alone: no configuration file, no source the
    environment names (a plain machine's pip, as `PIP_CONFIG_FILE=/dev/null` gives it)."""
    kept = {name: value for name, value in os.environ.items() if name not in _PIP_SOURCES}
    return {**kept, "PIP_CONFIG_FILE": os.devnull}


def torch_cuda_wheel(cache: Path | str | None = None) -> Path:
    """PyPI's own torch 2.13.0 Linux x86_64 wheel, a CUDA 13 build (~526 MB), from PyPI alone:
    what a plain machine's ``pip download torch==2.13.0`` gets."""
    version = TORCH_CPU_VERSION.split("+")[0]
    return _pip_download(f"torch=={version}", _cache(cache) / "wheels", f"torch-{version}-cp311-*_x86_64.whl",
                         LINUX_X64_PLATFORM, env=pypi_only_environment())


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


def debian_source_file(cache: Path | str | None, source: str, filename: str, sha256: str) -> Path:
    """One file of a Debian source package, straight from the mirror's pool, checked
    against ``sha256`` (``apt-get source`` would also want the .dsc, which the mirror
    does not always serve)."""
    sources = _cache(cache) / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    final = sources / filename
    if _cached(final):
        return final
    url = f"{debian_mirror()}/pool/main/{source[0]}/{source}/{filename}"
    part = sources / (filename + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise InputError(f"download {url} failed: {exc}") from exc
    got = sha256_file(part)
    if got != sha256:
        part.unlink()
        raise InputError(f"{url}: sha256 {got}, expected {sha256}")
    os.replace(part, final)
    _write_record(final, url=url)
    return final


# --------------------------------------------------------------------------- deterministic archives


def _sorted_entries(src_root: Path, top: str) -> list[Path]:
    entries = [src_root / top]
    for dirpath, dirnames, filenames in os.walk(src_root / top):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            entries.append(Path(dirpath) / name)
    return sorted(entries, key=lambda p: p.relative_to(src_root).as_posix())


def _file_mode(path: Path) -> int:
    return 0o755 if os.access(path, os.X_OK) else 0o644


def _deterministic_tgz(src_root: Path, top: str, out: Path) -> None:
    """tar.gz of ``src_root/top``: sorted, fixed mtime, root owner, normalised modes."""
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                for path in _sorted_entries(src_root, top):
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
                        info.mode = _file_mode(path)
                        with open(path, "rb") as fh:
                            tar.addfile(info, fh)
    os.replace(tmp, out)


def _deterministic_zip(src_root: Path, top: str, out: Path) -> None:
    """zip of ``src_root/top`` (no symlinks expected): sorted, fixed timestamps and modes."""
    tmp = out.with_name(out.name + ".part")
    stamp = time.gmtime(_EPOCH)[:6]
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in _sorted_entries(src_root, top):
            name = path.relative_to(src_root).as_posix()
            if path.is_dir():
                info = zipfile.ZipInfo(name + "/", stamp)
                info.external_attr = (0o040755 << 16) | 0x10
                archive.writestr(info, b"")
            else:
                info = zipfile.ZipInfo(name, stamp)
                info.external_attr = (0o100000 | _file_mode(path)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(path, "rb") as src, archive.open(info, "w") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, out)


# --------------------------------------------------------------------------- ORT release archives


def _wheel_glob(pip_name: str, version: str, platform: str) -> str:
    """The file name pattern of one wheel: ``onnxruntime-1.26.0-*win_amd64.whl``."""
    match = re.fullmatch(r"(manylinux|macosx|win)_(?:\d+_\d+_)?(.+)", platform)
    if not match:
        raise InputError(f"unknown wheel platform tag {platform!r}")
    family, arch = match.groups()
    return f"{pip_name.replace('-', '_')}-{version}-*{family}*{arch}.whl"


def _ort_wheel(root: Path, platform: str, pip_name: str = "onnxruntime", version: str = ORT_VERSION) -> Path:
    return _pip_download(f"{pip_name}=={version}", root / "wheels", _wheel_glob(pip_name, version, platform), platform)


def _wheel_files(wheel: Path, directory: str, names: set[str], dest: Path) -> list[Path]:
    """Copy ``directory/<name>`` for each of ``names`` out of a wheel into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set(names)
    copied = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            member = _safe_member_path(info.filename)
            if member.parent == PurePosixPath(directory) and member.name in wanted:
                target = dest / member.name
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                target.chmod(0o755)
                wanted.discard(member.name)
                copied.append(target)
    if wanted:
        raise InputError(f"{wheel.name} lacks {directory}/{', '.join(sorted(wanted))}")
    return sorted(copied)


def _ort_release_tree(root: Path, work: Path, asset: str) -> tuple[Path, dict[str, str], int]:
    """``work/stage/<asset>/`` with Debian's released headers as ``include/``, an empty
    ``lib/`` and ``VERSION_NUMBER``; returns it, the .deb's sha256 by name and the
    headers' ORT_API_VERSION."""
    deb = debian_package(root, "libonnxruntime-dev", ORT_HEADERS_SUITE)
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
    (tree / "VERSION_NUMBER").write_text(ORT_VERSION + "\n")
    return tree, {deb.name: sha256_file(deb)}, api


def _ort_release(
    cache: Path | str | None,
    *,
    pip_name: str,
    asset: str,
    platform: str,
    extra_libs: tuple[str, ...],
) -> Path:
    root = _cache(cache)
    out_dir = root / "releases"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{asset}.tgz"
    if _cached(out, ORT_RELEASE_LAYOUT):
        return out
    wheel = _ort_wheel(root, platform, pip_name)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        work = Path(tmp)
        tree, sources, api = _ort_release_tree(root, work, asset)
        _ort_license_texts(wheel, tree)
        lib = tree / "lib"
        _wheel_files(wheel, "onnxruntime/capi",
                     {f"libonnxruntime.so.{ORT_VERSION}", "libonnxruntime_providers_shared.so", *extra_libs}, lib)
        os.symlink(f"libonnxruntime.so.{ORT_VERSION}", lib / "libonnxruntime.so.1")
        os.symlink("libonnxruntime.so.1", lib / "libonnxruntime.so")
        _deterministic_tgz(work / "stage", asset, out)
    _write_record(out, sources={wheel.name: sha256_file(wheel), **sources}, ort_api_version_of_headers=api,
                  layout=ORT_RELEASE_LAYOUT)
    return out


def ort_linux_x64_release(cache: Path | str | None = None) -> Path:
    """``onnxruntime-linux-x64-<ORT_VERSION>.tgz`` in upstream's release layout.

    ``onnxruntime-linux-x64-1.26.0/{include/*.h, lib/libonnxruntime.so.1.26.0,
    lib/libonnxruntime.so.1 ->, lib/libonnxruntime.so ->,
    lib/libonnxruntime_providers_shared.so, VERSION_NUMBER}``; the library comes from
    PyPI ``onnxruntime==1.26.0`` and the headers from Debian trixie's
    ``libonnxruntime-dev`` (1.21, ORT_API_VERSION 21, safe against the 1.26 library).
    """
    return _ort_release(cache, pip_name="onnxruntime", asset=f"onnxruntime-linux-x64-{ORT_VERSION}",
                        platform=LINUX_X64_PLATFORM, extra_libs=())


def ort_linux_aarch64_release(cache: Path | str | None = None) -> Path:
    """``onnxruntime-linux-aarch64-1.26.0.tgz``: the layout of ``ort_linux_x64_release``
    from PyPI's ``manylinux_2_28_aarch64`` wheel (the same headers)."""
    return _ort_release(cache, pip_name="onnxruntime", asset=f"onnxruntime-linux-aarch64-{ORT_VERSION}",
                        platform=LINUX_AARCH64_PLATFORM, extra_libs=())


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
        platform=LINUX_X64_PLATFORM,
        extra_libs=("libonnxruntime_providers_cuda.so", "libonnxruntime_providers_tensorrt.so"),
    )


def ort_win_x64_release(cache: Path | str | None = None) -> Path:
    """``onnxruntime-win-x64-1.26.0.zip`` in upstream's release layout.

    ``onnxruntime-win-x64-1.26.0/{include/*.h, lib/onnxruntime.dll, lib/onnxruntime.lib,
    lib/onnxruntime_providers_shared.dll, lib/onnxruntime_providers_shared.lib,
    VERSION_NUMBER}``. The DLLs are PyPI's ``win_amd64`` wheel's (upstream's release build);
    the wheel has no import libraries, so they are made from the DLLs' export tables with
    llvm-dlltool (the project's ``import-lib`` fixup: the same exports as upstream's
    MSVC-linked ones, a different tool's bytes). Headers as for Linux. Upstream's zip also
    carries ``.pdb`` files and license texts, which the recipe does not take.
    """
    root = _cache(cache)
    asset = f"onnxruntime-win-x64-{ORT_VERSION}"
    out = root / "releases" / f"{asset}.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    if _cached(out, ORT_RELEASE_LAYOUT):
        return out
    wheel = _ort_wheel(root, WINDOWS_X64_PLATFORM)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        work = Path(tmp)
        tree, sources, api = _ort_release_tree(root, work, asset)
        _ort_license_texts(wheel, tree)
        for dll in _wheel_files(wheel, "onnxruntime/capi", {"onnxruntime.dll", "onnxruntime_providers_shared.dll"},
                                tree / "lib"):
            dll.chmod(0o644)
            import_lib(dll, "x64", dll.with_suffix(".lib"))
        _deterministic_zip(work / "stage", asset, out)
    _write_record(out, sources={wheel.name: sha256_file(wheel), **sources}, ort_api_version_of_headers=api,
                  layout=ORT_RELEASE_LAYOUT)
    return out


# --------------------------------------------------------------------------- ORT for macOS


def ort_macos_wheel(arch: str, cache: Path | str | None = None, version: str = ORT_MACOS_VERSION) -> Path:
    """PyPI's ``onnxruntime`` wheel for macOS ``arch`` (x86_64 or arm64): one
    ``onnxruntime/capi/libonnxruntime.<version>.dylib``, CoreML compiled in."""
    return _ort_wheel(_cache(cache), MACOS_PLATFORMS[arch], version=version)


def ort_macos_dylib(arch: str, dest: Path, cache: Path | str | None = None,
                    version: str = ORT_MACOS_VERSION) -> Path:
    """``dest/libonnxruntime.<version>.dylib`` from ``ort_macos_wheel``: where ORT's build
    leaves it (``<build>/Release/``) for the stage rules to find."""
    wheel = ort_macos_wheel(arch, cache, version)
    return _wheel_files(wheel, "onnxruntime/capi", {f"libonnxruntime.{version}.dylib"}, dest)[0]


def ort_source_include(cache: Path | str | None = None) -> Path:
    """A source tree root holding only ``include/`` of ONNX Runtime 1.21.0 (its session,
    provider and EP headers, e.g. ``include/onnxruntime/core/providers/coreml/``) and the
    license texts at its top (LICENSE, ThirdPartyNotices.txt)."""
    root = _cache(cache)
    tarball = debian_source_file(root, "onnxruntime", ORT_SOURCE_TARBALL, ORT_SOURCE_SHA256)
    top = f"onnxruntime-{ORT_SOURCE_VERSION}"

    def fill(tree: Path) -> None:
        with tarfile.open(tarball, "r:xz") as tar:
            for member in tar:
                path = _safe_member_path(member.name)
                wanted = path.parts[:2] == (top, "include") or path.parts in ((top, t) for t in ORT_LICENSE_TEXTS)
                if wanted and (member.isfile() or member.isdir()):
                    _write_member(tree.joinpath(*path.parts[1:]), member.isdir(), lambda: tar.extractfile(member))
        if not (tree / "include/onnxruntime/core/providers/coreml/coreml_provider_factory.h").is_file():
            raise InputError(f"{tarball.name} has no {top}/include/onnxruntime/core/providers/coreml/")

    return _unpacked(root / "sources" / f"{top}-include-licenses", tarball, fill)


# --------------------------------------------------------------------------- unpacking into prefixes


def _stamp_ok(dest: Path, source: Path) -> bool:
    stamp = dest / ".anira-e2e-source"
    return stamp.is_file() and stamp.read_text().strip() == sha256_file(source)


def _unpacked(dest: Path, source: Path, fill: Callable[[Path], None]) -> Path:
    """``dest`` as ``fill`` makes it from ``source`` (in a temporary directory renamed into
    place, stamped with the source's sha256); kept while it came from the same bytes."""
    dest = Path(dest)
    if _stamp_ok(dest, source):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        fill(tmp)
        (tmp / ".anira-e2e-source").write_text(sha256_file(source) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
        return dest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_member(target: Path, is_dir: bool, open_member: Callable[[], IO[bytes]]) -> None:
    if is_dir:
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open_member() as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def wheel_prefix(wheel: Path, package: str, dest: Path, subdirs=("include", "lib", "share")) -> Path:
    """Unpack ``<package>/{subdirs}`` of a wheel as a prefix ``dest/{subdirs}``.

    Idempotent: ``dest`` carries the sha256 of the wheel it came from.
    """
    def fill(tree: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                member = _safe_member_path(info.filename)
                if len(member.parts) < 3 or member.parts[0] != package or member.parts[1] not in subdirs:
                    continue
                target = tree.joinpath(*member.parts[1:])
                _write_member(target, info.is_dir(), lambda: zf.open(info))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    target.chmod(mode)
        missing = [d for d in subdirs if not (tree / d).is_dir()]
        if missing:
            raise InputError(f"{wheel.name} has no {package}/{{{','.join(missing)}}}")

    return _unpacked(dest, wheel, fill)


def _untar(tgz: Path, dest: Path) -> None:
    with tarfile.open(tgz) as tar:
        members = tar.getmembers()
        for m in members:
            _safe_member_path(m.name)
            if m.issym() and (m.linkname.startswith("/") or ".." in PurePosixPath(m.linkname).parts):
                raise InputError(f"{tgz.name}: link escapes the tree: {m.name} -> {m.linkname}")
            if not (m.isfile() or m.isdir() or m.issym()):
                raise InputError(f"{tgz.name}: unsupported member type: {m.name}")
        tar.extractall(dest, members=members)


def _unzip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            _safe_member_path(info.filename)
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise InputError(f"{archive.name}: unsupported symlink member: {info.filename}")
        zf.extractall(dest)


def release_prefix(archive: Path, dest: Path) -> Path:
    """Unpack a release archive's (.tgz or .zip) single top-level directory as the prefix ``dest``."""
    def fill(tree: Path) -> None:
        unpacked = tree / ".unpacked"
        (_unzip if archive.name.endswith(".zip") else _untar)(archive, unpacked)
        tops = sorted(unpacked.iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise InputError(f"{archive.name}: expected one top-level directory, got {[p.name for p in tops]}")
        for entry in tops[0].iterdir():
            os.replace(entry, tree / entry.name)
        shutil.rmtree(unpacked)

    return _unpacked(dest, archive, fill)


if __name__ == "__main__":  # pragma: no cover - manual use: python3 tests/e2e/inputs.py [what]
    targets = {
        "torch": torch_cpu_wheel,
        "ort": ort_linux_x64_release,
        "ort-aarch64": ort_linux_aarch64_release,
        "ort-win": ort_win_x64_release,
        "ort-source-include": ort_source_include,
        "ort-cuda": ort_linux_x64_cuda_release,
        "executorch": executorch_wheel,
        "executorch-aarch64": executorch_wheel_aarch64,
    }
    for name in sys.argv[1:] or ["torch", "ort", "executorch"]:
        print(name, targets[name]())
