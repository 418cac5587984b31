"""Git sources: resolved without cloning, cached like downloads, checked out by commit.

    <cache>/git/<repo>-<hash of its URL>.git   one bare, shallow mirror per repository URL
    <cache>/git/<repo>-<hash>.git.lock         serialises the writers of that mirror

`resolve` turns a tag or branch into a commit with `git ls-remote` (what `scons lock`
records). `fetch` makes the mirror hold a commit: once, `git fetch --depth 1` from the
first remote that has it (a clone named like the repository in a `mirror=` directory, an
`origin=`, then the upstream URL); `refs/pins/<commit>` keeps it reachable. `checkout`
makes a work tree at that commit from the mirror alone, submodules included (each from
its own mirror, at the commit the superproject records): every one, or only the selected
paths (each with all of its own), so an unselected submodule is never fetched and never
gets a mirror. So a newly recorded pin, `scons -c` or `rm -rf build` never clones again:
only a commit the cache lacks is fetched.
"""
from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from backends.runner.run import RunError, limited_env, run
from backends.util.errors import BackendsError
from backends.util.locations import local_path
from backends.util.locks import FileLock

_SHA = re.compile(r"[0-9a-f]{40}")
# PyTorch's and ExecuTorch's test paths exceed Windows' MAX_PATH (docs/upstream.md#libtorch-build); submodules are cloned from
# the local mirrors, which git refuses over the file transport unless told (CVE-2022-39253).
_CONFIG = ("-c", "core.longpaths=true", "-c", "protocol.file.allow=always")
_ENV = {"GIT_TERMINAL_PROMPT": "0"}  # a missing repository fails instead of asking for a password
Module = tuple[str, str, str]  # a submodule: (name, path, the commit the superproject records)


class GitError(BackendsError, RuntimeError):
    """A ref or commit no remote has, or a git command that failed; the message says which."""


def is_commit(ref: str) -> bool:
    return bool(_SHA.fullmatch(ref))


@dataclass(frozen=True)
class Resolved:
    commit: str
    ref: str  # the full name it came from (refs/tags/v1.26.0, refs/heads/main); "" for a commit

    @property
    def moving(self) -> bool:
        """A branch: its next commit is not this one."""
        return self.ref.startswith("refs/heads/")


@dataclass(frozen=True)
class Remotes:
    """Where git sources come from: the cache, `mirror=` directories, whether the network counts."""

    cache: Path
    mirrors: tuple[str, ...] = ()
    offline: bool = False

    def of(self, url: str, origin: str = "") -> list[str]:
        """The remotes to try for `url`, in order: the origin, mirror clones, then upstream."""
        found = [origin] if origin else []
        name = repository_name(url)
        for mirror in self.mirrors:
            base = Path(local_path(mirror))
            found += [str(p) for p in (base / name, base / f"{name}.git") if p.is_dir()]
        if not self.offline or Path(local_path(url)).exists():
            found.append(url)
        return found

    def mirror(self, url: str) -> Path:
        return self.cache / "git" / f"{repository_name(url)}-{_url_key(url)}.git"


def repository_name(url: str) -> str:
    """`https://github.com/pytorch/cpuinfo.git` -> `cpuinfo`: how mirror directories name clones."""
    return url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")


def _url_key(url: str) -> str:
    normalised = url.rstrip("/").removesuffix(".git").lower()
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


# -- resolving refs -------------------------------------------------------------------------

def resolve(remote: str, ref: str) -> Resolved:
    """The commit `ref` names on `remote` (a tag, peeled; else a branch), without cloning."""
    if is_commit(ref):
        return Resolved(ref, "")
    tag, head = f"refs/tags/{ref}", f"refs/heads/{ref}"
    listing = _output(["ls-remote", remote, tag, tag + "^{}", head], Path.cwd())
    found = {name: sha for sha, _, name in (line.partition("\t") for line in listing.splitlines())}
    for name in (tag + "^{}", tag, head):  # an annotated tag's commit is its peeled entry
        if name in found:
            return Resolved(found[name], name.removesuffix("^{}"))
    raise GitError(f"{remote} has no tag or branch {ref!r}")


def tags_at(remote: str, commit: str) -> list[str]:
    """The tags of `remote` whose commit is `commit` (annotated ones peeled)."""
    peeled: dict[str, str] = {}
    for line in _output(["ls-remote", "--tags", remote], Path.cwd()).splitlines():
        sha, _, name = line.partition("\t")
        tag = name.removeprefix("refs/tags/").removesuffix("^{}")
        if name.endswith("^{}") or tag not in peeled:
            peeled[tag] = sha
    return sorted(tag for tag, sha in peeled.items() if sha == commit)


def _output(args: Sequence[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *_CONFIG, *args], cwd=cwd, env=limited_env(_ENV), capture_output=True,
                              text=True, check=False)
    except OSError as error:
        raise GitError(f"cannot run git: {error}; install git") from None
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed: {done.stderr.strip() or f'exit code {done.returncode}'}")
    return done.stdout


# -- the cache's mirrors ----------------------------------------------------------------------

class _Log:
    """Runs the git commands of one step into the step's log; the terminal shows the step's
    own line only (a checkout with submodules runs hundreds of them)."""

    def __init__(self, log: Path, label: str) -> None:
        self.log = log
        self.label = label

    def run(self, cwd: Path, *args: str) -> None:
        run(["git", *_CONFIG, *args], env=limited_env(_ENV), cwd=cwd, log=self.log, label=self.label,
            status_stream=io.StringIO())


def fetch(url: str, wanted: str, remotes: Remotes, *, log: Path, label: str, origin: str = "") -> str:
    """Make the cache's mirror of `url` hold `wanted` (a commit, or a ref while none is pinned)
    and return the commit; the network is asked only when the mirror lacks it."""
    mirror = remotes.mirror(url)
    mirror.parent.mkdir(parents=True, exist_ok=True)
    git = _Log(log, label)
    with FileLock(mirror.with_name(mirror.name + ".lock"), record_holder=False):
        if not (mirror / "HEAD").is_file():
            shutil.rmtree(mirror, ignore_errors=True)  # an init a kill interrupted
            git.run(mirror.parent, "init", "--quiet", "--bare", mirror.name)
        if is_commit(wanted) and _has_commit(mirror, wanted):
            return wanted
        failures = []
        for remote in remotes.of(url, origin):
            try:
                git.run(mirror, "fetch", "--quiet", "--depth", "1", remote, wanted)
            except RunError as error:
                failures.append(f"{remote}: {error.tail[-1] if error.tail else error}")
                continue
            commit = wanted if is_commit(wanted) else _output(["rev-parse", "FETCH_HEAD^{commit}"], mirror).strip()
            git.run(mirror, "update-ref", f"refs/pins/{commit}", commit)
            return commit
    where = "; ".join(failures) if failures else "offline, and no mirror= directory holds a clone of it"
    raise GitError(f"{url} {wanted}: not in the cache's mirror {mirror} and no remote has it ({where}); "
                   f"put a clone named {repository_name(url)} in a mirror= directory, or run online")


def _has_commit(repository: Path, commit: str) -> bool:
    try:
        _output(["cat-file", "-e", f"{commit}^{{commit}}"], repository)
    except GitError:
        return False
    return True


# -- checkouts --------------------------------------------------------------------------------

def checkout(url: str, commit: str, dest: Path, remotes: Remotes, *, submodules: bool, log: Path,
             label: str, only: Sequence[str] = ()) -> None:
    """A work tree of `url` at `commit` in `dest`, made from the cache's mirror (which must hold
    the commit: `fetch`), with every submodule or `only` those paths; kept as it is when it
    already is exactly that."""
    if _is_checked_out(dest, commit, submodules, only):
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    git = _Log(log, label)
    git.run(dest, "init", "--quiet")
    git.run(dest, "remote", "add", "origin", url)  # what the tree's own scripts see; never fetched
    git.run(dest, "fetch", "--quiet", "--depth", "1", str(remotes.mirror(url)), commit)
    git.run(dest, "checkout", "--quiet", "--detach", commit)
    if submodules:
        _update_submodules(dest, remotes, git, only)


def _update_submodules(repository: Path, remotes: Remotes, git: _Log, only: Sequence[str] = ()) -> None:
    """Each submodule (or `only` those paths) from its own mirror at the commit `repository`
    records, with all of its own submodules."""
    modules = _selected(_submodules(repository), only, repository)
    if not modules:
        return
    git.run(repository, "submodule", "init", "--", *(path for _, path, _ in modules))
    for name, path, commit in modules:
        url = _output(["config", f"submodule.{name}.url"], repository).strip()  # resolved against origin
        fetch(url, commit, remotes, log=git.log, label=git.label)
        git.run(repository, "config", f"submodule.{name}.url", str(remotes.mirror(url)))
        git.run(repository, "submodule", "update", "--quiet", "--", path)
        git.run(repository / path, "remote", "set-url", "origin", url)  # its own submodules resolve upstream
        _update_submodules(repository / path, remotes, git)


def _selected(modules: list[Module], only: Sequence[str], repository: Path) -> list[Module]:
    """The `modules` at the paths `only` names (all when empty); a path the commit records no
    submodule at is an error: the selection is data that must name real submodules."""
    if not only:
        return modules
    recorded = {path for _, path, _ in modules}
    unknown = sorted(set(only) - recorded)
    if unknown:
        raise GitError(f"{repository}: the checked-out commit records no submodule at {', '.join(unknown)} (the "
                       f"selected submodule paths); the ones it records: {', '.join(sorted(recorded)) or 'none'}")
    return [module for module in modules if module[1] in only]


def gitlinks(repository: Path, commit: str, paths: Sequence[str]) -> dict[str, str]:
    """The commit each submodule path is pinned to by `commit`'s tree (`git ls-tree`)."""
    found = {}
    for line in _output(["ls-tree", commit, "--", *paths], repository).splitlines():
        meta, _, path = line.partition("\t")
        mode, kind, sha = meta.split(" ", 2)
        if mode == "160000" and kind == "commit":
            found[path] = sha
    return found


def submodule_urls(repository: Path) -> dict[str, str]:
    """Every submodule path `.gitmodules` declares, with its URL (as written there)."""
    if not (repository / ".gitmodules").is_file():
        return {}
    config = _output(["config", "--file", ".gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"], repository)
    fields: dict[str, dict[str, str]] = {}
    for line in config.splitlines():
        key, _, value = line.partition(" ")
        name, field = key[len("submodule."):].rsplit(".", 1)
        fields.setdefault(name, {})[field] = value
    return {entry["path"]: entry.get("url", "") for entry in fields.values() if "path" in entry}


def _submodules(repository: Path) -> list[Module]:
    """(name, path, recorded commit) of every submodule the checked-out commit records and
    whose `update` is not `none`."""
    if not (repository / ".gitmodules").is_file():
        return []
    config = _output(["config", "--file", ".gitmodules", "--get-regexp", r"^submodule\..*\.(path|update)$"],
                     repository)
    paths, skipped = {}, set()
    for line in config.splitlines():
        key, _, value = line.partition(" ")
        name, field = key[len("submodule."):].rsplit(".", 1)
        if field == "path":
            paths[value] = name
        elif value == "none":
            skipped.add(name)
    gitlinks = _output(["ls-files", "--stage"], repository)
    found = []
    for line in gitlinks.splitlines():
        meta, _, path = line.partition("\t")
        mode, sha, _ = meta.split(" ", 2)
        submodule = paths.get(path)
        if mode == "160000" and submodule and submodule not in skipped:
            found.append((submodule, path, sha))
    return found


def _is_checked_out(dest: Path, commit: str, submodules: bool, only: Sequence[str] = ()) -> bool:
    """`dest` is a clean work tree at `commit`, its submodules (or `only` those, and no
    other) at theirs."""
    if not (dest / ".git").exists():
        return False
    try:
        if _output(["rev-parse", "HEAD"], dest).strip() != commit or _output(["status", "--porcelain"], dest):
            return False
        if submodules and (dest / ".gitmodules").is_file():
            states = _output(["submodule", "status", "--recursive"], dest).splitlines()
            return all(line[:1] == (" " if _wanted(line[1:].split()[1], only) else "-") for line in states)
    except GitError:
        return False
    return True


def _wanted(path: str, only: Sequence[str]) -> bool:
    """Whether the submodule at `path` (nested ones as `outer/inner`) belongs in the checkout."""
    return not only or any(path == top or path.startswith(top + "/") for top in only)
