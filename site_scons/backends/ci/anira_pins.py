"""The commits anira's test suite runs from: anira itself and the model repositories its CMake
would otherwise clone at a branch (`.github/anira.toml`).

anira's `extras/CMakeLists.txt` clones each model repository with `--branch main --depth 1`
unless `extras/models/<path>` exists, and downloads the RAVE model from a branch: any push
there would change what the release gate tests, or turn it red. `checkout` puts every one in
place at its pinned commit before anira is configured, and git checks the objects against the
commit it names, so a pin is a content pin.
"""
from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from backends.util.errors import BackendsError

PINS = Path(".github") / "anira.toml"
MODELS_DIR = PurePosixPath("extras/models")  # where anira's CMake looks for them
COMMIT = re.compile(r"[0-9a-f]{40}")


class PinError(BackendsError, RuntimeError):
    """The pins are malformed, or a pinned checkout failed; the message names which."""


@dataclass(frozen=True)
class Checkout:
    url: str
    commit: str
    path: str  # under extras/models/
    member: str = ""  # a file of the commit, written to `path`; "" checks the whole tree out at `path`


@dataclass(frozen=True)
class AniraPins:
    repository: str  # owner/name on GitHub
    commit: str
    checkouts: tuple[Checkout, ...]


def load(root: Path) -> AniraPins:
    path = root / PINS
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PinError(f"{path}: {error}") from None
    anira = _table(data, "anira", path)
    checkouts = [_checkout(entry, "models", path, member=False) for entry in data.get("models", [])]
    checkouts += [_checkout(entry, "files", path, member=True) for entry in data.get("files", [])]
    repository = str(anira.get("repository", ""))
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise PinError(f"{path}: [anira] repository {repository!r} is not owner/name")
    return AniraPins(repository, _commit(anira, "[anira]", path), tuple(checkouts))


def _table(data: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any]:
    table = data.get(name)
    if not isinstance(table, dict):
        raise PinError(f"{path}: no [{name}] table")
    return table


def _commit(entry: Mapping[str, Any], where: str, path: Path) -> str:
    commit = str(entry.get("commit", ""))
    if not COMMIT.fullmatch(commit):
        raise PinError(f"{path}: {where} commit {commit!r} is not a full commit id (40 lowercase hex digits); a "
                       "branch or tag would let the gate test whatever it names today")
    return commit


def _checkout(entry: Mapping[str, Any], table: str, path: Path, member: bool) -> Checkout:
    where = f"[[{table}]] {entry.get('path', '?')}"
    fields = {"url", "commit", "path", *(("member",) if member else ())}
    unknown = set(entry) - fields
    if unknown or not fields <= set(entry):
        raise PinError(f"{path}: {where} needs exactly {', '.join(sorted(fields))} "
                       f"({'unknown: ' + ', '.join(sorted(unknown)) if unknown else 'some are missing'})")
    relative = PurePosixPath(str(entry["path"]))
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise PinError(f"{path}: {where} path must stay under {MODELS_DIR}")
    return Checkout(str(entry["url"]), _commit(entry, where, path), relative.as_posix(),
                    str(entry["member"]) if member else "")


def _git(cwd: Path, *args: str) -> bytes:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()
        raise PinError(f"git {' '.join(args)}: {error or f'exit code {done.returncode}'}")
    return done.stdout


def checkout(pins: AniraPins, anira: Path, say: Callable[[str], None] = print) -> list[Path]:
    """Every model repository and file at its pinned commit under anira's extras/models."""
    placed = []
    for item in pins.checkouts:
        target = anira / MODELS_DIR / item.path
        if target.exists():
            raise PinError(f"{target} exists already: anira's CMake would use it as it is; start from a fresh "
                           "checkout of anira")
        if item.member:
            scratch = anira.parent / f".anira-pin-{item.commit[:12]}"
            _fetch(item, scratch)
            try:
                data = _git(scratch, "cat-file", "blob", f"{item.commit}:{item.member}")
            except PinError:
                raise PinError(f"{item.url} at {item.commit} has no file {item.member}") from None
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        else:
            _fetch(item, target)
            _git(target, "-c", "advice.detachedHead=false", "checkout", "-q", item.commit)
            head = _git(target, "rev-parse", "HEAD").decode().strip()
            if head != item.commit:
                raise PinError(f"{item.url}: checked out {head}, not the pinned {item.commit}")
        say(f"{item.path}: {item.url} at {item.commit}")
        placed.append(target)
    return placed


def _fetch(item: Checkout, dest: Path) -> None:
    """The pinned commit's objects in the repository at `dest` (made when missing): one
    shallow fetch by commit id, which git checks against the id."""
    if not (dest / ".git").exists():
        dest.mkdir(parents=True, exist_ok=True)
        _git(dest, "init", "-q")
    _git(dest, "fetch", "-q", "--depth", "1", item.url, item.commit)
