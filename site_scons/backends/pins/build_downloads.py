"""What upstream's own build downloads by itself, read from its pinned source tree.

Each reader takes the text of one of upstream's files, as it is after fetch and patch:

    ort-deps          ONNX Runtime's cmake/deps.txt: `name;URL;SHA1` lines, `#` comments
    tflite-cmake      TFLite's tensorflow/lite/tools/cmake/modules/*.cmake:
                      OverridableFetchContent_Declare(<name> GIT_REPOSITORY/GIT_TAG | URL/URL_HASH)
    xnnpack-kleidiai  XNNPACK's cmake/DownloadKleidiAI.cmake: ExternalProject_Add(kleidiai URL URL_HASH)
    bazel             a Bazel WORKSPACE / *.bzl: http_archive(name, sha256, urls | url); .bazelversion
    emsdk             ONNX Runtime's --emsdk_version default and emsdk's emscripten-releases-tags.json:
                      the Emscripten release `emsdk install` downloads
    nuget             a packages.config: the NuGet packages restored (ORT's DirectML)

A declaration by git repository and tag becomes the archive its forge serves for that tag
(what `OVERRIDABLE_FETCH_CONTENT_GIT_REPOSITORY_AND_TAG_TO_URL` does upstream), so every
entry is one file the project can fetch and pin by sha256. A declaration the reader cannot
turn into one URL (a CMake variable in it, a git server without archives) is refused with
where it is: a patch step has to make it fetchable.
"""
from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Mapping
from xml.etree import ElementTree

from backends.model.engine import BUILD_DOWNLOAD_READERS, BuildDownload, DataError, When

READERS = BUILD_DOWNLOAD_READERS
ORT_DEPS, TFLITE_CMAKE, XNNPACK_KLEIDIAI, BAZEL, EMSDK, NUGET = READERS
# Where each reader finds its files in the pinned tree (globs relative to the source root).
READER_FILES = {
    ORT_DEPS: ("cmake/deps.txt",),
    TFLITE_CMAKE: ("tensorflow/lite/tools/cmake/modules/*.cmake",),
    XNNPACK_KLEIDIAI: ("backends/xnnpack/third-party/XNNPACK/cmake/DownloadKleidiAI.cmake",),
    BAZEL: ("WORKSPACE", ".bazelversion"),
    EMSDK: ("tools/ci_build/build_args.py", "tools/ci_build/build.py",
            "cmake/external/emsdk/emscripten-releases-tags.json"),
    NUGET: ("packages.config",),
}
EMSCRIPTEN_RELEASE = "https://storage.googleapis.com/webassembly/emscripten-releases-builds/linux/{hash}/wasm-binaries.tar.xz"
NUGET_PACKAGE = "https://www.nuget.org/api/v2/package/{id}/{version}"
BAZEL_RELEASE = "https://github.com/bazelbuild/bazel/releases/download/{version}/bazel-{version}-linux-x86_64"


# -- ONNX Runtime: cmake/deps.txt -------------------------------------------------------------

def read_ort_deps(text: str, where: str = "cmake/deps.txt") -> list[BuildDownload]:
    """Every `name;URL;SHA1` line; a URL that is no https one (a local file) downloads nothing."""
    found = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(";")
        if len(fields) != 3 or not all(fields):
            raise DataError(f"{where}:{number}: not a `name;URL;SHA1` line: {line!r}")
        name, url, sha1 = fields[0], fields[1], fields[2].lower()  # upstream writes some in capitals
        if not re.fullmatch(r"[0-9a-f]{40}", sha1):
            raise DataError(f"{where}:{number}: {name}'s hash {sha1!r} is not a SHA1 (40 hex digits)")
        if url.startswith("https://"):
            found.append(BuildDownload(name, url, f"sha1:{sha1}", where=f"{where}:{number}"))
    return found


# -- CMake calls ------------------------------------------------------------------------------

def _without_comments(text: str) -> str:
    """CMake text without `#` line comments (a `#` inside a quoted argument stays)."""
    return "\n".join(re.sub(r'^((?:[^"#]|"[^"]*")*)#.*$', r"\1", line) for line in text.splitlines())


def cmake_calls(text: str, command: str) -> list[list[str]]:
    """The arguments of every call of `command` (case-insensitive), unquoted."""
    body = _without_comments(text)
    calls = []
    for match in re.finditer(rf"\b{re.escape(command)}\s*\(", body, re.IGNORECASE):
        depth, end = 1, match.end()
        while depth and end < len(body):
            depth += {"(": 1, ")": -1}.get(body[end], 0)
            end += 1
        calls.append(shlex.split(body[match.end():end - 1], posix=True))
    return calls


_KEYWORDS = ("GIT_REPOSITORY", "GIT_TAG", "URL", "URL_HASH", "URL_MD5")


def _keyed(args: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in zip(args, args[1:]):
        if key in _KEYWORDS and key not in values:
            values[key] = value
    return values


def _hash_of(url_hash: str) -> str:
    """`SHA256=<hex>` -> `sha256:<hex>`."""
    algorithm, _, digest = url_hash.partition("=")
    return f"{algorithm.lower()}:{digest.lower()}" if digest else ""


def archive_url(repository: str, ref: str) -> str:
    """The archive a forge serves for a tag or commit; "" for a server that serves none."""
    repo = repository.removesuffix("/").removesuffix(".git")
    if re.fullmatch(r"https://github\.com/[^/]+/[^/]+", repo):
        return f"{repo}/archive/{ref}.tar.gz"
    if re.fullmatch(r"https://gitlab\.com/[^/]+(/[^/]+)+", repo):
        return f"{repo}/-/archive/{ref}/{repo.rsplit('/', 1)[-1]}-{ref}.tar.gz"
    return ""


def _declared(name: str, values: Mapping[str, str], where: str) -> BuildDownload:
    unresolved = [f"{key} {value}" for key, value in values.items() if "${" in value]
    if unresolved:
        raise DataError(f"{where}: {name} is declared with a CMake variable ({'; '.join(unresolved)}): "
                        "the project cannot pin it; a patch step must write the value")
    if "URL" in values:
        upstream = _hash_of(values.get("URL_HASH", "")) or (f"md5:{values['URL_MD5']}" if "URL_MD5" in values else "")
        return BuildDownload(name, values["URL"], upstream, values.get("GIT_REPOSITORY", ""),
                             values.get("GIT_TAG", ""), where)
    if "GIT_REPOSITORY" in values and "GIT_TAG" in values:
        url = archive_url(values["GIT_REPOSITORY"], values["GIT_TAG"])
        if not url:
            raise DataError(f"{where}: {name} comes from git {values['GIT_REPOSITORY']}, which serves no archive "
                            "the project knows: a patch step must give it a URL")
        return BuildDownload(name, url, "", values["GIT_REPOSITORY"], values["GIT_TAG"], where)
    raise DataError(f"{where}: {name} has neither URL nor GIT_REPOSITORY with GIT_TAG")


# TFLite's CMakeLists sets TF_SOURCE_DIR to the tree's tensorflow/ directory.
TF_SOURCE_DIR = "tensorflow"
_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
_BZL_VALUE = re.compile(r'^[ ]*([A-Z0-9_]+)[ ]*=[ ]*"([^"]*)"[ ]*$', re.MULTILINE)


def _tree_path(path: str) -> str:
    return posixpath.normpath(path.replace("${TF_SOURCE_DIR}", TF_SOURCE_DIR))


def _bzl_values(bzl: str, read_file: Callable[[str], str], where: str) -> dict[str, str]:
    try:
        return dict(_BZL_VALUE.findall(read_file(_tree_path(bzl))))
    except OSError:
        raise DataError(f"{where}: reads {bzl}, which is not in the tree") from None


def _module_variables(text: str, where: str, read_file: Callable[[str], str] | None) -> dict[str, str]:
    """What utils.cmake's get_dependency_tag/get_dependency_archive calls set: a `<NAME>_COMMIT`,
    `<NAME>_URL` and `<NAME>_SHA256` read from a Bazel workspace file of the tree."""
    values: dict[str, str] = {}
    for command, fields in (("get_dependency_tag", ("_COMMIT",)), ("get_dependency_archive", ("_URL", "_SHA256"))):
        for args in cmake_calls(text, command):
            if read_file is None or len(args) != 2 + len(fields):
                raise DataError(f"{where}: {command}({' '.join(args)}) needs the tree's Bazel files to be read")
            name, bzl, outputs = args[0], args[1], args[2:]
            known = _bzl_values(bzl, read_file, where)
            for output, suffix in zip(outputs, fields):
                key = name.upper() + suffix
                if key not in known:
                    raise DataError(f"{where}: {bzl} sets no {key}")
                values[output] = known[key]
    return values


def _substituted(args: list[str], variables: Mapping[str, str]) -> list[str]:
    return [_VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), arg) for arg in args]


def read_tflite_module(text: str, where: str, read_file: Callable[[str], str] | None = None) -> list[BuildDownload]:
    """The OverridableFetchContent_Declare calls of one of TFLite's cmake modules, with the
    values a get_dependency_tag/_archive call reads from the tree's Bazel files filled in."""
    variables = _module_variables(text, where, read_file)
    return [_declared(args[0], _keyed(_substituted(args[1:], variables)), where)
            for args in cmake_calls(text, "OverridableFetchContent_Declare") if args]


def read_tflite_modules(files: Mapping[str, str],
                        read_file: Callable[[str], str] | None = None) -> list[BuildDownload]:
    """Every module's declarations, in file-name order."""
    return [item for path in sorted(files) for item in read_tflite_module(files[path], path, read_file)]


def read_kleidiai(text: str, where: str = "cmake/DownloadKleidiAI.cmake") -> list[BuildDownload]:
    """XNNPACK's KleidiAI download (ExternalProject_Add(kleidiai URL ... URL_HASH SHA256=...))."""
    calls = [args for args in cmake_calls(text, "ExternalProject_Add") if args and args[0].lower() == "kleidiai"]
    if not calls:
        raise DataError(f"{where}: no ExternalProject_Add(kleidiai ...): XNNPACK's KleidiAI download moved")
    return [_declared("kleidiai", _keyed(calls[0][1:]), where)]


# -- Bazel ------------------------------------------------------------------------------------

_STRING = r'"([^"]*)"'


def read_bazel_archives(text: str, where: str = "WORKSPACE") -> list[BuildDownload]:
    """Every http_archive (and tf_http_archive) with a literal name, sha256 and URL."""
    found = []
    body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for match in re.finditer(r"\b(?:tf_)?http_archive\s*\(", body):
        depth, end = 1, match.end()
        while depth and end < len(body):
            depth += {"(": 1, ")": -1}.get(body[end], 0)
            end += 1
        call = body[match.end():end - 1]
        name = re.search(rf"\bname\s*=\s*{_STRING}", call)
        sha256 = re.search(rf"\bsha256\s*=\s*{_STRING}", call)
        urls = re.search(r"\burls?\s*=\s*([^\n]*(?:\n[^=]*)?)", call)
        first = re.search(_STRING, urls.group(1)) if urls else None
        if not (name and first):
            raise DataError(f"{where}: an http_archive without a literal name and URL: {call.strip()[:80]!r}")
        found.append(BuildDownload(name.group(1), first.group(1), f"sha256:{sha256.group(1)}" if sha256 else "",
                                   where=where))
    return found


def read_bazel_version(text: str, where: str = ".bazelversion") -> list[BuildDownload]:
    """The Bazel release bazelisk would download for `.bazelversion`."""
    version = text.strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+(rc\d+)?", version):
        raise DataError(f"{where}: {version!r} is not a Bazel release version")
    return [BuildDownload("bazel", BAZEL_RELEASE.format(version=version), "", where=where)]


# -- ONNX Runtime's WASM and DirectML legs ------------------------------------------------------

_EMSDK_DEFAULT = re.compile(r'"--emsdk_version"[^)]*?default\s*=\s*"([^"]+)"', re.DOTALL)


def read_emsdk(files: Mapping[str, str]) -> list[BuildDownload]:
    """The Emscripten release `emsdk install <version>` downloads on Linux: the version is
    build.py's --emsdk_version default, its build hash emsdk's emscripten-releases-tags.json."""
    tags_path = READER_FILES[EMSDK][2]
    versions = [(path, m.group(1)) for path, text in sorted(files.items()) if path != tags_path
                for m in [_EMSDK_DEFAULT.search(text)] if m]
    if not versions or tags_path not in files:
        raise DataError(f"no --emsdk_version default in {', '.join(READER_FILES[EMSDK][:2])}, or no {tags_path}")
    where, version = versions[0]
    try:
        releases = json.loads(files[tags_path])["releases"]
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{tags_path}: not emsdk's tags file (a JSON object with releases)") from None
    if version not in releases:
        raise DataError(f"{tags_path}: no release {version} (the --emsdk_version of {where})")
    url = EMSCRIPTEN_RELEASE.format(hash=releases[version])
    return [BuildDownload("emscripten", url, "", ref=version, where=f"{where}, {tags_path}")]


def read_nuget(text: str, where: str = "packages.config") -> list[BuildDownload]:
    """The NuGet packages of a packages.config, each as nuget.org serves it."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise DataError(f"{where}: not XML: {error}") from None
    found = []
    for package in root.iter("package"):
        ident, version = package.get("id", ""), package.get("version", "")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", ident) or not re.fullmatch(r"[0-9A-Za-z.+-]+", version):
            raise DataError(f"{where}: a package without a plain id and version: {ElementTree.tostring(package)!r}")
        found.append(BuildDownload(ident, NUGET_PACKAGE.format(id=ident, version=version), "", ref=version,
                                   where=where))
    return found


# -- a tree -----------------------------------------------------------------------------------

def read(reader: str, files: Mapping[str, str],
         read_file: Callable[[str], str] | None = None) -> list[BuildDownload]:
    """What `reader` finds in `files` (path relative to the source root -> text), each once;
    `read_file` reads another file of the tree by that path (TFLite's Bazel values)."""
    return [replace(item, reader=reader) for item in unique(_read(reader, files, read_file))]


def _read(reader: str, files: Mapping[str, str], read_file: Callable[[str], str] | None) -> list[BuildDownload]:
    if reader == ORT_DEPS:
        return [item for path, text in sorted(files.items()) for item in read_ort_deps(text, path)]
    if reader == TFLITE_CMAKE:
        return read_tflite_modules(files, read_file)
    if reader == XNNPACK_KLEIDIAI:
        return [item for path, text in sorted(files.items()) for item in read_kleidiai(text, path)]
    if reader == BAZEL:
        return [item for path, text in sorted(files.items())
                for item in (read_bazel_version(text, path) if path.endswith(".bazelversion")
                             else read_bazel_archives(text, path))]
    if reader == EMSDK:
        return read_emsdk(files)
    if reader == NUGET:
        return [item for path, text in sorted(files.items()) for item in read_nuget(text, path)]
    raise DataError(f"no reader {reader!r}; readers: {', '.join(READERS)}")


def unique(items: Iterable[BuildDownload]) -> list[BuildDownload]:
    """One entry per name; one name declared twice with two URLs is refused."""
    by_name: dict[str, BuildDownload] = {}
    for item in items:
        known = by_name.setdefault(item.name, item)
        if known.url != item.url:
            raise DataError(f"{item.name} is declared twice with two URLs: {known.url} ({known.where}) and "
                            f"{item.url} ({item.where})")
    return list(by_name.values())


def tree_files(reader: str, root: Path) -> dict[str, str]:
    """The files `reader` reads in a source tree, by their path relative to it."""
    return {path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
            for pattern in READER_FILES[reader] for path in sorted(root.glob(pattern)) if path.is_file()}


def read_tree(reader: str, root: Path) -> list[BuildDownload]:
    files = tree_files(reader, root)
    if not files:
        raise DataError(f"{root}: none of {', '.join(READER_FILES[reader])} is there for the {reader} reader")
    return read(reader, files, lambda path: _inside(root, path).read_text(encoding="utf-8"))


def _inside(root: Path, path: str) -> Path:
    """`path` of the tree, never outside it."""
    full = (root / path).resolve()
    if root.resolve() not in full.parents:
        raise OSError(f"{path} is outside the tree")
    return full


def toml_entries(items: Iterable[BuildDownload]) -> str:
    """`[[build_downloads]]` tables for engine.toml (pins in `[sha256]`, recorded on first fetch)."""
    blocks = []
    for item in items:
        fields = {"reader": item.reader, "name": item.name, "url": item.url, "upstream_hash": item.upstream_hash,
                  "git": item.git, "ref": item.ref, "where": item.where, "license": item.license}
        body = "".join(f'{key} = "{value}"\n' for key, value in fields.items() if value)
        if item.when:
            body += f"when = {_when_value(item.when)}\n"
        blocks.append("[[build_downloads]]\n" + body)
    return "\n".join(blocks)


def _when_value(when: When) -> str:
    """A `when` as engine.toml writes it: one inline table, or a list of them."""
    tables = [_inline_table(table) for table in when]
    return tables[0] if len(tables) == 1 else f"[{', '.join(tables)}]"


def _inline_table(when: Mapping[str, tuple[str, ...]]) -> str:
    """`{ arch = "arm64" }`, a key with several values as a list."""
    def value(values: tuple[str, ...]) -> str:
        quoted = [f'"{one}"' for one in values]
        return quoted[0] if len(quoted) == 1 else f"[{', '.join(quoted)}]"
    return "{ " + ", ".join(f"{key} = {value(values)}" for key, values in when.items()) + " }"
