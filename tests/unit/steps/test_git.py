"""Git sources: refs resolved by ls-remote, one mirror per repository in the cache, checkouts
by commit from it (submodules too), with the upstream repositories as local bare repos."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from backends.steps import git
from backends.steps.git import GitError, Remotes

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text)
    _git(work, "add", name)
    _git(work, "commit", "-q", "-m", text)
    return _git(work, "rev-parse", "HEAD")


class Upstream:
    """Bare repositories under `root`: `app` (tags v1 annotated, v2 lightweight, branch main)
    with the submodule `deps/lib` -> `lib`, which has the submodule `inner` -> `leaf`, both
    by relative URL as upstream projects write them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        work = root / "work"
        self.leaf = self._repo(work / "leaf", "leaf.txt", "leaf 1\n")
        self.lib = self._repo(work / "lib", "lib.txt", "lib 1\n", submodule=("leaf", "inner"))
        app = work / "app"
        self.v1 = self._repo(app, "app.txt", "app 1\n", submodule=("lib", "deps/lib"))
        _git(app, "tag", "-a", "v1", "-m", "v1")
        self.v2 = _commit(app, "app.txt", "app 2\n")
        _git(app, "tag", "v2")
        for name in ("leaf", "lib", "app"):
            _git(work / name, "push", "-q", "--mirror", str(root / f"{name}.git"))

    def _repo(self, work: Path, name: str, text: str, submodule: tuple[str, str] | None = None) -> str:
        bare = self.root / f"{work.name}.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
        _git(work, "remote", "add", "origin", str(bare))
        _commit(work, name, text)
        if submodule:
            _git(work, "submodule", "add", "-q", f"../{submodule[0]}.git", submodule[1])
            _git(work, "commit", "-q", "-m", "submodule")
        _git(work, "push", "-q", "origin", "main")
        return _git(work, "rev-parse", "HEAD")

    def url(self, name: str) -> str:
        return f"file://{self.root / name}.git"

    def take_offline(self) -> None:
        """The network is gone: every upstream repository disappears."""
        for name in ("leaf", "lib", "app"):
            shutil.move(self.root / f"{name}.git", self.root / f"{name}.gone")


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


def _checkout(upstream: Upstream, tmp_path: Path, commit: str, dest: str = "src", remotes: Remotes | None = None,
              submodules: bool = True) -> Path:
    remotes = remotes or Remotes(tmp_path / "cache")
    url = upstream.url("app")
    log = tmp_path / "git.log"
    git.fetch(url, commit, remotes, log=log, label="git app")
    tree = tmp_path / dest
    git.checkout(url, commit, tree, remotes, submodules=submodules, log=log, label="git app")
    return tree


def test_resolve_peels_annotated_tags_and_names_branches(upstream: Upstream) -> None:
    url = upstream.url("app")
    annotated = git.resolve(url, "v1")
    assert (annotated.commit, annotated.ref, annotated.moving) == (upstream.v1, "refs/tags/v1", False)
    assert git.resolve(url, "v2").commit == upstream.v2
    branch = git.resolve(url, "main")
    assert (branch.commit, branch.moving) == (upstream.v2, True)
    assert git.resolve(url, upstream.v1) == git.Resolved(upstream.v1, "")  # a commit is its own answer
    with pytest.raises(GitError, match="has no tag or branch 'v3'"):
        git.resolve(url, "v3")
    assert git.tags_at(url, upstream.v1) == ["v1"] and git.tags_at(url, upstream.v2) == ["v2"]
    assert git.tags_at(url, "0" * 40) == []


def test_checkout_by_commit_with_nested_submodules(upstream: Upstream, tmp_path: Path) -> None:
    tree = _checkout(upstream, tmp_path, upstream.v1)
    assert (tree / "app.txt").read_text() == "app 1\n"
    assert (tree / "deps/lib/lib.txt").read_text() == "lib 1\n"
    assert (tree / "deps/lib/inner/leaf.txt").read_text() == "leaf 1\n"
    assert _git(tree, "rev-parse", "HEAD") == upstream.v1
    # The tree's scripts see upstream's URLs, never the cache's mirrors.
    assert _git(tree, "remote", "get-url", "origin") == upstream.url("app")
    assert _git(tree / "deps/lib", "remote", "get-url", "origin") == upstream.url("lib")


def test_one_mirror_per_repository_in_the_cache(upstream: Upstream, tmp_path: Path) -> None:
    _checkout(upstream, tmp_path, upstream.v1)
    mirrors = sorted(p.name for p in (tmp_path / "cache/git").glob("*.git"))
    assert [name.rsplit("-", 1)[0] for name in mirrors] == ["app", "leaf", "lib"]
    remotes = Remotes(tmp_path / "cache")
    assert remotes.mirror(upstream.url("app")) == remotes.mirror(upstream.url("app") + "/")
    assert _git(remotes.mirror(upstream.url("app")), "rev-parse", f"refs/pins/{upstream.v1}") == upstream.v1


def test_no_clone_again_once_the_cache_holds_the_commit(upstream: Upstream, tmp_path: Path) -> None:
    first = _checkout(upstream, tmp_path, upstream.v1)
    upstream.take_offline()
    shutil.rmtree(first)  # `rm -rf build`
    again = _checkout(upstream, tmp_path, upstream.v1, dest="again")
    assert (again / "deps/lib/inner/leaf.txt").read_text() == "leaf 1\n"
    with pytest.raises(GitError, match=f"{upstream.v2}: not in the cache's mirror"):
        _checkout(upstream, tmp_path, upstream.v2, dest="new")  # a commit the cache lacks needs upstream


def test_a_ref_is_fetched_only_while_no_commit_is_pinned(upstream: Upstream, tmp_path: Path) -> None:
    remotes = Remotes(tmp_path / "cache")
    commit = git.fetch(upstream.url("app"), "v1", remotes, log=tmp_path / "log", label="git")
    assert commit == upstream.v1  # lock=1 builds: the tag's commit, then recorded


def test_a_clean_checkout_at_the_commit_is_kept(upstream: Upstream, tmp_path: Path) -> None:
    tree = _checkout(upstream, tmp_path, upstream.v1)
    marker = tree / ".git" / "kept"
    marker.write_text("")
    _checkout(upstream, tmp_path, upstream.v1)
    assert marker.exists()  # not checked out again
    (tree / "deps/lib/lib.txt").write_text("edited\n")
    _checkout(upstream, tmp_path, upstream.v1)
    assert not marker.exists() and (tree / "deps/lib/lib.txt").read_text() == "lib 1\n"


def test_mirror_directories_and_offline(upstream: Upstream, tmp_path: Path) -> None:
    clones = tmp_path / "clones"
    clones.mkdir()
    for name in ("app", "lib", "leaf"):
        subprocess.run(["git", "clone", "-q", "--mirror", str(upstream.root / f"{name}.git"),
                        str(clones / f"{name}.git")], check=True)
    upstream.take_offline()
    remotes = Remotes(tmp_path / "cache", mirrors=(str(clones),), offline=True)
    assert remotes.of("https://example.invalid/org/app") == [str(clones / "app.git")]  # upstream never tried
    tree = _checkout(upstream, tmp_path, upstream.v1, remotes=remotes)
    assert (tree / "deps/lib/inner/leaf.txt").read_text() == "leaf 1\n"
    bare = Remotes(tmp_path / "other-cache", offline=True)
    with pytest.raises(GitError, match="offline, and no mirror= directory holds a clone"):
        git.fetch("https://example.invalid/org/app", upstream.v1, bare, log=tmp_path / "log", label="git")


# -- a selection of submodules ----------------------------------------------------------------

@pytest.fixture
def two_submodules(upstream: Upstream) -> str:
    """`app` at a commit with a second submodule `deps/other` -> `other`; returns the commit."""
    upstream._repo(upstream.root / "work" / "other", "other.txt", "other 1\n")
    app = upstream.root / "work" / "app"
    _git(app, "submodule", "add", "-q", "../other.git", "deps/other")
    _git(app, "commit", "-q", "-m", "a second submodule")
    _git(app, "push", "-q", "origin", "main")
    return _git(app, "rev-parse", "HEAD")


def _selected_checkout(upstream: Upstream, tmp_path: Path, commit: str, only: tuple[str, ...]) -> Path:
    remotes = Remotes(tmp_path / "cache")
    url, log = upstream.url("app"), tmp_path / "git.log"
    git.fetch(url, commit, remotes, log=log, label="git app")
    tree = tmp_path / "src"
    git.checkout(url, commit, tree, remotes, submodules=True, log=log, label="git app", only=only)
    return tree


def test_unselected_submodules_are_never_fetched(upstream: Upstream, two_submodules: str, tmp_path: Path) -> None:
    shutil.move(upstream.root / "other.git", upstream.root / "other.gone")  # fetching it would fail
    tree = _selected_checkout(upstream, tmp_path, two_submodules, ("deps/lib",))
    assert (tree / "deps/lib/inner/leaf.txt").read_text() == "leaf 1\n"  # with its own submodules
    assert not any((tree / "deps/other").iterdir())  # the directory git leaves for an uninitialised one
    mirrors = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "cache/git").glob("*.git"))
    assert mirrors == ["app", "leaf", "lib"]  # no mirror of `other`
    assert git.gitlinks(tree, two_submodules, ("deps/lib",)) == {"deps/lib": upstream.lib}
    assert git.submodule_urls(tree) == {"deps/lib": "../lib.git", "deps/other": "../other.git"}


def test_a_selected_checkout_is_kept_until_the_selection_changes(upstream: Upstream, two_submodules: str,
                                                                 tmp_path: Path) -> None:
    tree = _selected_checkout(upstream, tmp_path, two_submodules, ("deps/lib",))
    marker = tree / ".git" / "kept"
    marker.write_text("")
    _selected_checkout(upstream, tmp_path, two_submodules, ("deps/lib",))
    assert marker.exists()  # exactly the selection: kept
    _selected_checkout(upstream, tmp_path, two_submodules, ("deps/other",))
    assert not marker.exists()
    assert (tree / "deps/other/other.txt").read_text() == "other 1\n" and not any((tree / "deps/lib").iterdir())


def test_a_selected_path_that_is_no_submodule_is_an_error(upstream: Upstream, two_submodules: str,
                                                          tmp_path: Path) -> None:
    with pytest.raises(GitError, match=r"the checked-out commit records no submodule at deps/nosuch \(the selected "
                                       r"submodule paths\); the ones it records: deps/lib, deps/other"):
        _selected_checkout(upstream, tmp_path, two_submodules, ("deps/lib", "deps/nosuch"))
