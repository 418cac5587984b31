"""Upstream's own build-time downloads: recording them from a tree, checking a tree against
what a leg serves, and laying out ONNX Runtime's mirror directory.

    record  read a pinned tree with one reader and write its `[[build_downloads]]` into
            engine.toml (their sha256 pins are recorded on first fetch, as every input's)
    check   fail, naming each URL, when the tree declares a download no override serves
            (the plan is older than the tree: run `record`)
    mirror  put each fetched file where ORT's cmake/deps.txt loop looks first,
            `<into>/<URL without https://>`
    repository-cache  put each fetched archive where Bazel's --repository_cache finds it by
            the sha256 its http_archive declares

Run by a plan's build commands as `{python} -m backends.steps.build_downloads ...`.
"""
from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from backends.model.engine import BuildDownload, DataError, parse_when
from backends.pins import build_downloads as readers
from backends.pins import engine_toml
from backends.util.files import atomic_write_text, link_into_place, sha256_file

_BLOCK = re.compile(r"^\[\[build_downloads\]\]\n(?:(?!\[)[^\n]*\n?)*", re.MULTILINE)


def missing(declared: Sequence[BuildDownload], given: Sequence[str]) -> list[BuildDownload]:
    """What the tree declares that no given URL serves."""
    served = set(given)
    return [item for item in declared if item.url not in served]


def missing_message(absent: Sequence[BuildDownload], reader: str) -> str:
    listed = "; ".join(f"{item.url} ({item.name}, {item.where})" for item in absent)
    return (f"upstream's build would download {len(absent)} file{'s' if len(absent) > 1 else ''} no override "
            f"serves: {listed}. The engine's [[build_downloads]] are older than the pinned tree: run "
            f"`python -m backends.steps.build_downloads record --reader {reader} ...` on it and `scons lock`")


def mirror_path(into: Path, url: str) -> Path:
    """Where ORT looks for `url` in its mirror directory (cmake/CMakeLists.txt's deps.txt loop)."""
    if not url.startswith("https://"):
        raise DataError(f"{url}: ORT's mirror serves https:// URLs only")
    relative = url.removeprefix("https://")
    if ".." in relative.split("/"):
        raise DataError(f"{url}: a URL with .. has no place in a mirror")
    return into / relative


def lay_mirror(into: Path, files: Sequence[tuple[str, Path]]) -> list[Path]:
    """Each (url, fetched file) at its mirror path: a hard link to the cache's file, a copy across devices."""
    return [_link(source, mirror_path(into, url)) for url, source in files]


def lay_repository_cache(into: Path, files: Sequence[tuple[str, Path]]) -> list[Path]:
    """Each (sha256, fetched file) where Bazel's `--repository_cache` looks it up by that hash;
    a file with other bytes is refused (Bazel would take it for the archive it names)."""
    laid = []
    for digest, source in files:
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise DataError(f"{digest!r} is not a sha256")
        actual = sha256_file(source)
        if actual != digest:
            raise DataError(f"{source} is not the archive Bazel pins as sha256 {digest} (it is {actual})")
        dest = into / "content_addressable" / "sha256" / digest / "file"
        laid.append(_link(source, dest))
    return laid


def _link(source: Path, dest: Path) -> Path:
    """`dest` as `source`, replaced in one step: two legs sharing a source tree may lay the same mirror at once."""
    link_into_place(source, dest)
    return dest


def recorded_text(text: str, reader: str, items: Sequence[BuildDownload]) -> str:
    """engine.toml with the `[[build_downloads]]` of `reader` replaced by `items`; others stay.
    What a maintainer wrote on an entry of the same name (its `when`, its license) stays on it,
    and a sha256 upstream gives becomes the entry's pin where none is recorded; the pins of
    entries the tree no longer declares go with them."""
    items = _with_maintainers_fields(text, reader, items)
    kept = [block for block in _BLOCK.findall(text) if f'reader = "{reader}"' not in block]
    rest = _BLOCK.sub("", text).rstrip("\n") + "\n"
    changes = engine_toml.Changes(sha256=_upstream_pins(text, items), drop_sha256=_stale_pins(text, reader, items))
    rest = engine_toml.edited(rest, changes, Path("engine.toml"))
    entries = [block.rstrip("\n") + "\n" for block in kept] + [readers.toml_entries([item]) for item in items]
    return rest + "".join("\n" + entry for entry in entries)


def _with_maintainers_fields(text: str, reader: str, items: Sequence[BuildDownload]) -> list[BuildDownload]:
    """`items` with the `when` and license of the recorded entries of `reader` by the same name."""
    recorded = {entry.get("name"): entry for entry in tomllib.loads(text).get("build_downloads", [])
                if entry.get("reader") == reader}
    kept = []
    for item in items:
        entry = recorded.get(item.name, {})
        when = parse_when(entry["when"], "when", "engine.toml") if "when" in entry else item.when
        kept.append(replace(item, when=when,
                            license=item.license or entry.get("license", "")))
    return kept


def _stale_pins(text: str, reader: str, items: Sequence[BuildDownload]) -> set[str]:
    """The pinned file names of `reader`'s recorded entries that neither `items` nor another
    reader's entries still name (a new tree moved on from them)."""
    values = tomllib.loads(text)
    def filenames(entries: Sequence[dict]) -> set[str]:
        return {BuildDownload(entry["name"], entry["url"]).filename for entry in entries}
    recorded = values.get("build_downloads", [])
    old = filenames([entry for entry in recorded if entry.get("reader") == reader])
    others = filenames([entry for entry in recorded if entry.get("reader") != reader])
    return (old - {item.filename for item in items} - others) & set(values.get("sha256", {}))


def _upstream_pins(text: str, items: Sequence[BuildDownload]) -> dict[str, str]:
    """`<name>-<file>` -> the sha256 upstream declares for it (CMake's URL_HASH, Bazel's sha256:
    the very bytes its build would check), for those not pinned yet. A recorded pin that
    differs is refused: one of the two is not the file at that URL."""
    pinned = tomllib.loads(text).get("sha256", {})
    pins = {}
    for item in items:
        algorithm, _, digest = item.upstream_hash.partition(":")
        if algorithm != "sha256":
            continue
        if pinned.get(item.filename, digest) != digest:
            raise DataError(f"{item.filename} is pinned as sha256 {pinned[item.filename]}, but {item.where} "
                            f"declares sha256 {digest} for {item.url}: check which is upstream's file")
        if item.filename not in pinned:
            pins[item.filename] = digest
    return pins


def _pairs(values: Sequence[str]) -> list[tuple[str, Path]]:
    pairs = []
    for value in values:
        url, sep, path = value.rpartition("=")
        if not sep:
            raise DataError(f"--file {value!r} is not URL=PATH")
        pairs.append((url, Path(path)))
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backends.steps.build_downloads", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record")
    record.add_argument("--engine-toml", type=Path, required=True)
    for one in (record, check := sub.add_parser("check")):
        one.add_argument("--reader", choices=readers.READERS, required=True)
        one.add_argument("--tree", type=Path, required=True)
    check.add_argument("--given", nargs="*", default=[])
    mirror = sub.add_parser("mirror")
    cache = sub.add_parser("repository-cache")
    for one, value in ((mirror, "URL=PATH"), (cache, "SHA256=PATH")):
        one.add_argument("--into", type=Path, required=True)
        one.add_argument("--file", action="append", default=[], help=value)
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            items = readers.read_tree(args.reader, args.tree)
            atomic_write_text(args.engine_toml, recorded_text(args.engine_toml.read_text(), args.reader, items))
            upstream = sum(item.upstream_hash.startswith("sha256:") for item in items)
            print(f"[build_downloads] {len(items)} {args.reader} entries recorded in {args.engine_toml}, "
                  f"{upstream} with upstream's sha256 as their pin; `scons lock` pins the others")
        elif args.command == "check":
            absent = missing(readers.read_tree(args.reader, args.tree), args.given)
            if absent:
                print(missing_message(absent, args.reader), file=sys.stderr)
                return 1
            print(f"[build_downloads] every {args.reader} download of {args.tree} is served by the project")
        elif args.command == "repository-cache":
            laid = lay_repository_cache(args.into, _pairs(args.file))
            print(f"[build_downloads] {len(laid)} archives in Bazel's repository cache {args.into}")
        else:
            laid = lay_mirror(args.into, _pairs(args.file))
            print(f"[build_downloads] {len(laid)} files in the mirror {args.into}")
    except (DataError, OSError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
