"""The readers of upstream's build-time downloads, on small files written here in upstream's
formats (ORT's cmake/deps.txt, TFLite's cmake modules, XNNPACK's DownloadKleidiAI.cmake, a
Bazel WORKSPACE and .bazelversion): what each finds, and what it refuses."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.model.engine import DataError
from backends.pins import build_downloads as readers
from backends.steps import build_downloads as step

SHA1 = "36ee53eb1466fb6e593fc5c286680de31f8a494a"
SHA256 = "9097cfe882ae8c865fce4dfe14889ef65e9f9cd3cfebedba0df43a55ae10a6cb"
DEPS_TXT = f"""\
# Format: name;URL;SHA1
# (comments and blank lines are skipped)

abseil_cpp;https://github.com/abseil/abseil-cpp/archive/refs/tags/20240722.0.zip;{SHA1}
local_thing;/opt/deps/thing.zip;{SHA1}
eigen;https://gitlab.com/libeigen/eigen/-/archive/1d8b82b0740839c0de7f1242a3585e3390ff5f33/eigen-1d8b82b0740839c0de7f1242a3585e3390ff5f33.zip;{'0' * 40}
kleidiai;https://gitlab.arm.com/kleidi/kleidiai/-/archive/v0.2.0/kleidiai-v0.2.0.zip;{'B1E3' * 10}
"""
ABSEIL_CMAKE = """\
include(OverridableFetchContent)
OverridableFetchContent_Declare(
  abseil-cpp
  GIT_REPOSITORY https://github.com/abseil/abseil-cpp
  # Sync with tensorflow/third_party/absl/workspace.bzl (a comment with (parens))
  GIT_TAG 273292d1cfc0a94a65082ee350509af1d113344d
  GIT_SHALLOW TRUE
  PREFIX "${CMAKE_BINARY_DIR}"
  SOURCE_DIR "${CMAKE_BINARY_DIR}/abseil-cpp"
)
OverridableFetchContent_GetProperties(abseil-cpp)
"""
FFT2D_CMAKE = f"""\
OverridableFetchContent_Declare(
  fft2d
  URL https://storage.googleapis.com/mirror.tensorflow.org/github.com/petewarden/OouraFFT/archive/v1.0.tar.gz
  URL_HASH SHA256={SHA256.upper()}
  SOURCE_DIR "${{CMAKE_BINARY_DIR}}/fft2d"
)
"""
KLEIDIAI_CMAKE = f"""\
PROJECT(kleidiai-download NONE)
INCLUDE(ExternalProject)
ExternalProject_Add(kleidiai
  URL https://gitlab.arm.com/kleidi/kleidiai/-/archive/a082c1dbd13848e5d00a86786c6fd83919c2b81f/kleidiai-a082c1dbd13848e5d00a86786c6fd83919c2b81f.zip
  URL_HASH SHA256={SHA256}
  SOURCE_DIR "${{CMAKE_BINARY_DIR}}/kleidiai-source"
  CONFIGURE_COMMAND ""
)
"""
WORKSPACE = f"""\
load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")
http_archive(
    name = "cpuinfo",  # the one XNNPACK pins
    sha256 = "{SHA256}",
    strip_prefix = "cpuinfo-ea6b9f1bb6e1001d8b21574d5bc78ddef62e499d",
    urls = [
        "https://github.com/pytorch/cpuinfo/archive/ea6b9f1bb6e1001d8b21574d5bc78ddef62e499d.zip",
        "https://mirror.example/cpuinfo.zip",
    ],
)
tf_http_archive(
    name = "KleidiAI",
    sha256 = "{SHA256}",
    urls = tf_mirror_urls("https://gitlab.arm.com/kleidi/kleidiai/-/archive/dce8/kleidiai-dce8.zip"),
)
"""


def test_ort_deps_lines_with_their_sha1_and_no_local_files() -> None:
    found = readers.read_ort_deps(DEPS_TXT)
    assert [(d.name, d.upstream_hash, d.where) for d in found] == [
        ("abseil_cpp", f"sha1:{SHA1}", "cmake/deps.txt:4"), ("eigen", f"sha1:{'0' * 40}", "cmake/deps.txt:6"),
        ("kleidiai", f"sha1:{'b1e3' * 10}", "cmake/deps.txt:7")]  # some SHA1s upstream are in capitals
    assert found[0].filename == "abseil_cpp-20240722.0.zip" and found[0].version == "20240722.0"


@pytest.mark.parametrize("line, said", [("abseil_cpp;https://x/a.zip", "not a `name;URL;SHA1` line"),
                                        ("abseil_cpp;https://x/a.zip;notasha1", "is not a SHA1")])
def test_ort_deps_refuses_malformed_lines(line: str, said: str) -> None:
    with pytest.raises(DataError, match=said):
        readers.read_ort_deps(f"# ok\n{line}\n")


def test_tflite_modules_git_declarations_become_their_tags_archive() -> None:
    found = readers.read("tflite-cmake", {"modules/fft2d.cmake": FFT2D_CMAKE, "modules/abseil-cpp.cmake": ABSEIL_CMAKE})
    assert [d.name for d in found] == ["abseil-cpp", "fft2d"]  # by file name
    abseil, fft2d = found
    assert abseil.url == ("https://github.com/abseil/abseil-cpp/archive/"
                          "273292d1cfc0a94a65082ee350509af1d113344d.tar.gz")
    assert (abseil.git, abseil.ref, abseil.upstream_hash, abseil.reader) == (
        "https://github.com/abseil/abseil-cpp", "273292d1cfc0a94a65082ee350509af1d113344d", "", "tflite-cmake")
    assert fft2d.upstream_hash == f"sha256:{SHA256}" and fft2d.url.endswith("/v1.0.tar.gz")


FARMHASH_CMAKE = """\
include(utils)
get_dependency_tag("farmhash" "${TF_SOURCE_DIR}/../third_party/farmhash/workspace.bzl" FARMHASH_TAG)
# get_dependency_archive("old" "${TF_SOURCE_DIR}/x.bzl" A B)   (commented out: not read)
OverridableFetchContent_Declare(farmhash GIT_REPOSITORY https://github.com/google/farmhash GIT_TAG ${FARMHASH_TAG})
"""
GEMMLOWP_CMAKE = """\
get_dependency_archive("gemmlowp" "${TF_SOURCE_DIR}/workspace2.bzl" GEMMLOWP_URL GEMMLOWP_CHECKSUM)
OverridableFetchContent_Declare(gemmlowp URL ${GEMMLOWP_URL} URL_HASH SHA256=${GEMMLOWP_CHECKSUM})
"""


def test_tflite_values_read_from_the_trees_bazel_files(tmp_path: Path) -> None:
    modules = tmp_path / "tensorflow/lite/tools/cmake/modules"
    modules.mkdir(parents=True)
    (modules / "farmhash.cmake").write_text(FARMHASH_CMAKE)
    (modules / "gemmlowp.cmake").write_text(GEMMLOWP_CMAKE)
    (tmp_path / "third_party/farmhash").mkdir(parents=True)
    (tmp_path / "third_party/farmhash/workspace.bzl").write_text('    FARMHASH_COMMIT = "0d859a811870d10f53a594927d0d0b97573ad06d"\n')
    (tmp_path / "tensorflow/workspace2.bzl").write_text(
        f'GEMMLOWP_URL = "https://github.com/google/gemmlowp/archive/16e8662.zip"\nGEMMLOWP_SHA256 = "{SHA256}"\n')
    farmhash, gemmlowp = readers.read_tree("tflite-cmake", tmp_path)
    assert farmhash.url == "https://github.com/google/farmhash/archive/0d859a811870d10f53a594927d0d0b97573ad06d.tar.gz"
    assert (gemmlowp.url, gemmlowp.upstream_hash) == ("https://github.com/google/gemmlowp/archive/16e8662.zip",
                                                      f"sha256:{SHA256}")
    (tmp_path / "tensorflow/workspace2.bzl").write_text("GEMMLOWP_URL = \"https://x/y.zip\"\n")
    with pytest.raises(DataError, match="sets no GEMMLOWP_SHA256"):
        readers.read_tree("tflite-cmake", tmp_path)
    (modules / "gemmlowp.cmake").write_text(GEMMLOWP_CMAKE.replace("${TF_SOURCE_DIR}/workspace2", "../../../x"))
    with pytest.raises(DataError, match="not in the tree"):
        readers.read_tree("tflite-cmake", tmp_path)


def test_gitlab_archive_url() -> None:
    assert readers.archive_url("https://gitlab.com/libeigen/eigen.git", "3147391d") == (
        "https://gitlab.com/libeigen/eigen/-/archive/3147391d/eigen-3147391d.tar.gz")
    assert readers.archive_url("https://git.example.org/x/y", "v1") == ""


@pytest.mark.parametrize("declaration, said", [
    ("OverridableFetchContent_Declare(ruy GIT_REPOSITORY https://github.com/google/ruy GIT_TAG ${RUY_TAG})",
     "CMake variable"),
    ("OverridableFetchContent_Declare(x GIT_REPOSITORY https://git.example.org/x GIT_TAG v1)", "serves no archive"),
    ("OverridableFetchContent_Declare(x SOURCE_DIR here)", "neither URL nor GIT_REPOSITORY"),
])
def test_tflite_declarations_the_project_cannot_pin_are_refused(declaration: str, said: str) -> None:
    with pytest.raises(DataError, match=said):
        readers.read_tflite_module(declaration, "modules/x.cmake")


def test_kleidiai_from_xnnpack_with_its_sha256() -> None:
    [kleidiai] = readers.read_kleidiai(KLEIDIAI_CMAKE)
    assert kleidiai.name == "kleidiai" and kleidiai.upstream_hash == f"sha256:{SHA256}"
    assert kleidiai.url.endswith("kleidiai-a082c1dbd13848e5d00a86786c6fd83919c2b81f.zip")
    with pytest.raises(DataError, match="KleidiAI download moved"):
        readers.read_kleidiai(KLEIDIAI_CMAKE.replace("ExternalProject_Add(kleidiai", "ExternalProject_Add(other"))


def test_bazel_archives_first_url_and_version() -> None:
    found = readers.read("bazel", {"WORKSPACE": WORKSPACE, ".bazelversion": "7.4.1\n"})
    assert [(d.name, d.upstream_hash[:7]) for d in found] == [("bazel", ""), ("cpuinfo", "sha256:"),
                                                              ("KleidiAI", "sha256:")]
    assert found[0].url == "https://github.com/bazelbuild/bazel/releases/download/7.4.1/bazel-7.4.1-linux-x86_64"
    assert found[1].url.startswith("https://github.com/pytorch/cpuinfo/archive/")
    with pytest.raises(DataError, match="not a Bazel release"):
        readers.read_bazel_version("latest")


def test_one_name_with_two_urls_is_refused() -> None:
    twice = DEPS_TXT + f"abseil_cpp;https://github.com/abseil/abseil-cpp/archive/other.zip;{SHA1}\n"
    with pytest.raises(DataError, match="declared twice"):
        readers.read("ort-deps", {"cmake/deps.txt": twice})


def test_record_writes_entries_engine_toml_reads(tmp_path: Path) -> None:
    from backends.model.engine import load_engine
    root = tmp_path / "demo"
    (root / "tree" / "cmake").mkdir(parents=True)
    (root / "tree" / "cmake" / "deps.txt").write_text(DEPS_TXT)
    toml = root / "engine.toml"
    toml.write_text('name = "demo"\nlibname = "demo"\nversion = "1.0.0"\nlicense = "MIT"\n\n[sha256]\n')
    assert step.main(["record", "--engine-toml", str(toml), "--reader", "ort-deps", "--tree", str(root / "tree")]) == 0
    assert step.main(["record", "--engine-toml", str(toml), "--reader", "ort-deps", "--tree", str(root / "tree")]) == 0
    engine = load_engine(root)
    assert [(d.name, d.reader, d.upstream_hash) for d in engine.build_downloads] == [
        ("abseil_cpp", "ort-deps", f"sha1:{SHA1}"), ("eigen", "ort-deps", f"sha1:{'0' * 40}"),
        ("kleidiai", "ort-deps", f"sha1:{'b1e3' * 10}")]  # once each, not twice


def _recorded_kleidiai(tmp_path: Path, sha256_table: str = "") -> Path:
    root = tmp_path / "demo"
    cmake = root / "tree" / readers.READER_FILES["xnnpack-kleidiai"][0]
    cmake.parent.mkdir(parents=True)
    cmake.write_text(KLEIDIAI_CMAKE)
    toml = root / "engine.toml"
    toml.write_text(f'name = "demo"\nlibname = "demo"\nversion = "1.0.0"\nlicense = "MIT"\n\n[sha256]\n{sha256_table}')
    return toml


def _record_kleidiai(toml: Path) -> int:
    return step.main(["record", "--engine-toml", str(toml), "--reader", "xnnpack-kleidiai",
                      "--tree", str(toml.parent / "tree")])


def test_record_pins_upstreams_sha256_and_keeps_the_maintainers_when(tmp_path: Path) -> None:
    from backends.model.engine import load_engine
    toml = _recorded_kleidiai(tmp_path)
    assert _record_kleidiai(toml) == 0
    [entry] = load_engine(toml.parent).build_downloads
    assert load_engine(toml.parent).sha256 == {entry.filename: SHA256} and not entry.when
    toml.write_text(toml.read_text() + 'when = { arch = "arm64", os = ["linux", "macos"] }\nlicense = "Apache-2.0"\n')
    assert _record_kleidiai(toml) == 0  # again: the when and license stay, the pin is not written twice
    engine = load_engine(toml.parent)
    [entry] = engine.build_downloads
    assert [dict(t) for t in entry.when] == [{"arch": ("arm64",), "os": ("linux", "macos")}]
    assert entry.license == "Apache-2.0"
    assert engine.sha256 == {entry.filename: SHA256} and toml.read_text().count(SHA256) == 2


def test_record_keeps_a_when_that_lists_tables(tmp_path: Path) -> None:
    from backends.model.engine import load_engine
    toml = _recorded_kleidiai(tmp_path)
    assert _record_kleidiai(toml) == 0
    toml.write_text(toml.read_text() + 'when = [{ arch = "arm64" }, { platform = "ios" }]\n')
    assert _record_kleidiai(toml) == 0
    [entry] = load_engine(toml.parent).build_downloads
    assert [dict(t) for t in entry.when] == [{"arch": ("arm64",)}, {"platform": ("ios",)}]
    assert 'when = [{ arch = "arm64" }, { platform = "ios" }]' in toml.read_text()


def test_record_drops_the_pins_of_downloads_the_tree_no_longer_declares(tmp_path: Path) -> None:
    from backends.model.engine import load_engine
    toml = _recorded_kleidiai(tmp_path)
    assert _record_kleidiai(toml) == 0
    [old] = load_engine(toml.parent).build_downloads
    cmake = toml.parent / "tree" / readers.READER_FILES["xnnpack-kleidiai"][0]
    cmake.write_text(KLEIDIAI_CMAKE.replace("a082c1db", "b193d2ec").replace(SHA256, "f" * 64))
    assert _record_kleidiai(toml) == 0
    engine = load_engine(toml.parent)
    [new] = engine.build_downloads
    assert new.filename != old.filename and engine.sha256 == {new.filename: "f" * 64}


def test_record_refuses_a_pin_that_is_not_upstreams_sha256(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    filename = "kleidiai-kleidiai-a082c1dbd13848e5d00a86786c6fd83919c2b81f.zip"
    toml = _recorded_kleidiai(tmp_path, f'"{filename}" = "{"0" * 64}"\n')
    before = toml.read_text()
    assert _record_kleidiai(toml) == 1
    assert f"declares sha256 {SHA256}" in capsys.readouterr().err and toml.read_text() == before


def test_check_names_each_url_no_override_serves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake" / "deps.txt").write_text(DEPS_TXT)
    [abseil, eigen, kleidiai] = readers.read_ort_deps(DEPS_TXT)
    given = ["check", "--reader", "ort-deps", "--tree", str(tmp_path), "--given", abseil.url, kleidiai.url]
    assert step.main([*given, eigen.url]) == 0
    assert step.main(given) == 1
    said = capsys.readouterr().err
    assert eigen.url in said and abseil.url not in said and kleidiai.url not in said and "cmake/deps.txt:6" in said


def test_mirror_lays_files_where_ort_looks(tmp_path: Path) -> None:
    fetched = tmp_path / "cache" / "a.zip"
    fetched.parent.mkdir()
    fetched.write_bytes(b"zip")
    url = "https://github.com/abseil/abseil-cpp/archive/refs/tags/20240722.0.zip"
    assert step.main(["mirror", "--into", str(tmp_path / "mirror"), f"--file={url}={fetched}"]) == 0
    assert (tmp_path / "mirror/github.com/abseil/abseil-cpp/archive/refs/tags/20240722.0.zip").read_bytes() == b"zip"
    with pytest.raises(DataError, match=r"\.\."):
        step.mirror_path(tmp_path, "https://x/../../etc/passwd")


def test_repository_cache_by_bazels_sha256_refusing_other_bytes(tmp_path: Path) -> None:
    import hashlib
    archive = tmp_path / "cpuinfo.zip"
    archive.write_bytes(b"cpuinfo archive")
    digest = hashlib.sha256(b"cpuinfo archive").hexdigest()
    assert step.main(["repository-cache", "--into", str(tmp_path / "rc"), f"--file={digest}={archive}"]) == 0
    assert (tmp_path / "rc/content_addressable/sha256" / digest / "file").read_bytes() == b"cpuinfo archive"
    assert step.main(["repository-cache", "--into", str(tmp_path / "rc"), f"--file={'0' * 64}={archive}"]) == 1
    assert not (tmp_path / "rc/content_addressable/sha256" / ("0" * 64)).exists()


BUILD_ARGS = '''
    parser.add_argument(
        "--emsdk_version", default="4.0.23", help="Specify version of emsdk"
    )
'''
TAGS = '{"aliases": {"latest": "4.0.23"}, "releases": {"4.0.23": "9d70dbe8860ccdd3595f6e6065d94bfb5ec8a3c8"}}'


def test_emsdk_the_emscripten_release_of_the_pinned_version() -> None:
    files = {"tools/ci_build/build_args.py": BUILD_ARGS, "cmake/external/emsdk/emscripten-releases-tags.json": TAGS}
    [release] = readers.read("emsdk", files)
    assert release.url == ("https://storage.googleapis.com/webassembly/emscripten-releases-builds/linux/"
                           "9d70dbe8860ccdd3595f6e6065d94bfb5ec8a3c8/wasm-binaries.tar.xz")
    assert (release.ref, release.reader) == ("4.0.23", "emsdk")
    with pytest.raises(DataError, match="no release 4.0.23"):
        readers.read("emsdk", {**files, "cmake/external/emsdk/emscripten-releases-tags.json": '{"releases": {}}'})
    with pytest.raises(DataError, match="no --emsdk_version default"):
        readers.read("emsdk", {"cmake/external/emsdk/emscripten-releases-tags.json": TAGS})


def test_nuget_packages_config() -> None:
    config = ('<?xml version="1.0" encoding="utf-8"?>\n<packages>\n'
              '  <package id="Microsoft.AI.DirectML" version="1.15.4" targetFramework="native" />\n</packages>\n')
    [dml] = readers.read("nuget", {"packages.config": config})
    assert (dml.name, dml.url, dml.ref) == ("Microsoft.AI.DirectML",
                                            "https://www.nuget.org/api/v2/package/Microsoft.AI.DirectML/1.15.4",
                                            "1.15.4")
    with pytest.raises(DataError, match="plain id and version"):
        readers.read_nuget('<packages><package id="x" version="$(V)" /></packages>')
