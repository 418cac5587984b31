"""Publishing into dist/: sidecars checked, another filesystem, kills between renames,
no temp in dist/'s listing, a full disk, withdrawal, the sweep of what a kill left."""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Callable

import pytest

from backends.steps import publish as publish_module
from backends.steps.archive import sha256_sidecar
from backends.steps.publish import PublishError, dist_debris, publish, sweep_dist, withdraw
from backends.util.files import sha256_file

NAME = "pkg-1.0-Linux-x86_64-shared.zip"
# "another mount": one filesystem (one st_dev) mounted twice, where a rename between the
# mounts fails all the same (a bind mount).
LAYOUTS = ("one filesystem", "dist on another filesystem", "dist on another mount")


class Killed(BaseException):
    """Stands in for a kill -9: raised where the process would die (nothing after it counts)."""


def _built(base: Path, data: bytes = b"PK archive bytes", name: str = NAME) -> Path:
    archive = base / "build" / name
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(data)
    sha256_sidecar(archive)
    archive.with_name(archive.name + ".json").write_text(json.dumps(
        {"archive": archive.name, "sha256": sha256_file(archive), "size": len(data), "files": [{}, {}]}))
    return archive


def _set_names(name: str = NAME) -> set[str]:
    return {name, name + ".sha256", name + ".json"}


def _visible(dist: Path) -> dict[str, bytes]:
    """What a consumer of dist/ sees: every entry but the hidden ones, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(dist.iterdir()) if not p.name.startswith(".")}


def _set_of(built: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in publish_module.published_files(built)}


def _layout(layout: str, monkeypatch: pytest.MonkeyPatch, dist: Path) -> None:
    """dist/ on another filesystem (or mount) than everything else: no hard link into it,
    no rename into or out of it (EXDEV), as the kernel answers."""
    if layout == "one filesystem":
        return

    def device(path: str | os.PathLike[str]) -> str:
        return "dist" if Path(path).is_relative_to(dist) else "build"

    if layout == "dist on another filesystem":
        monkeypatch.setattr(publish_module, "_same_filesystem", lambda one, other: device(one) == device(other))
    real_link, real_replace = os.link, os.replace

    def link(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        if device(source) != device(target):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(source, target)

    def replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        if device(source) != device(target):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_replace(source, target)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)


def _watch(monkeypatch: pytest.MonkeyPatch, look: Callable[[], None], *calls: str) -> None:
    """Call `look` before and after each of os's `calls`."""
    for call in calls:
        real = getattr(os, call)

        def watched(*args: object, _real: Callable[..., object] = real) -> object:
            look()
            result = _real(*args)
            look()
            return result

        monkeypatch.setattr(os, call, watched)


# -- publish ---------------------------------------------------------------------------------


def test_publish_places_the_archive_and_its_sidecars(tmp_path: Path) -> None:
    built = _built(tmp_path)
    dest = tmp_path / "dist" / built.name
    result = publish(built, dest, tmp_path / "dist/.stale")
    assert dest.read_bytes() == built.read_bytes() and result.files == 2
    assert sorted(os.listdir(dest.parent)) == sorted(_set_names())
    assert sorted(os.listdir(built.parent)) == sorted(_set_names()), "the staging beside the build is gone"


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_publish_across_filesystems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """build/ and dist/ on different filesystems: no hard link, and nothing may be renamed
    from one to the other; publish stages copies in a hidden directory of dist/."""
    built = _built(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    _layout(layout, monkeypatch, dist)
    publish(built, dist / built.name, dist / ".stale", {"leg_key": "k"})
    assert (dist / built.name).read_bytes() == built.read_bytes()
    assert not (dist / built.name).samefile(built)
    assert json.loads((dist / (built.name + ".json")).read_text())["leg_key"] == "k"
    assert sorted(os.listdir(dist)) == sorted(_set_names())


@pytest.fixture
def umask() -> Callable[[int], None]:
    """Set the process's umask for the test, restored after it."""
    before = os.umask(0o022)
    yield lambda mask: os.umask(mask) and None
    os.umask(before)


def _mode(path: Path) -> int:
    return os.lstat(path).st_mode & 0o7777


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mask", [0o000, 0o002, 0o077], ids=["umask 000", "umask 002", "umask 077"])
def test_published_files_have_fixed_modes_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             umask: Callable[[int], None], layout: str,
                                                             mask: int) -> None:
    umask(mask)  # the build's files are made under it too
    old, new = _built(tmp_path / "old", b"PK old bytes"), _built(tmp_path / "new", b"PK new bytes")
    dist = tmp_path / "out" / "dist"
    _layout(layout, monkeypatch, dist)
    publish(old, dist / NAME, dist / ".stale", {"leg_key": "k"})
    withdraw(dist / NAME, dist / ".stale")
    assert _mode(dist / ".stale") == 0o755
    assert {name: _mode(dist / ".stale" / name) for name in _set_names()} == dict.fromkeys(_set_names(), 0o644)
    publish(new, dist / NAME, dist / ".stale", {"leg_key": "k"})
    assert {name: _mode(dist / name) for name in os.listdir(dist)} == dict.fromkeys(_set_names(), 0o644)
    assert _mode(dist) == _mode(dist.parent) == 0o755, "the directories publish made"
    assert (dist / NAME).read_bytes() == b"PK new bytes" and sha256_file(dist / NAME) == sha256_file(new)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dist_never_lists_a_temp_while_publishing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  layout: str) -> None:
    """Listed before and after every write, link, fsync and rename: only final names
    (and hidden entries, which nothing takes for an archive)."""
    old, new = _built(tmp_path / "old", b"PK old bytes"), _built(tmp_path / "new", b"PK new, longer bytes")
    dist = tmp_path / "dist"
    publish(old, dist / NAME, dist / ".stale")
    _layout(layout, monkeypatch, dist)
    listings: list[set[str]] = []
    _watch(monkeypatch, lambda: listings.append({n for n in os.listdir(dist) if not n.startswith(".")}),
           "replace", "link", "fsync")
    publish(new, dist / NAME, dist / ".stale", {"leg_key": "k"})
    assert len(listings) > 10
    assert [names for names in listings if not names <= _set_names()] == []
    assert sorted(os.listdir(dist)) == sorted(_set_names())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("renames", range(7))
def test_a_kill_between_renames_leaves_the_old_set_or_the_new_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 renames: int, layout: str) -> None:
    """Killed after `renames` renames into or out of dist/ (the old set's three out, the new
    set's three in; 6 is a publish that finished): dist/ shows the old set, the new set, or
    no archive; sidecars without their archive mean "not published", and the next run's
    sweep removes them, leaving the old set, the new set or nothing."""
    old, new = _built(tmp_path / "old", b"PK old bytes"), _built(tmp_path / "new", b"PK new, longer bytes")
    dist, stale = tmp_path / "dist", tmp_path / "dist/.stale"
    publish(old, dist / NAME, stale)
    _layout(layout, monkeypatch, dist)
    real_replace, done, seen = os.replace, [0], {}  # renames done; dist/ as the kill left it

    def replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        into_or_out_of_dist = dist in (Path(source).parent, Path(target).parent)
        if into_or_out_of_dist and done[0] == renames:
            seen.update(_visible(dist))  # what the kill leaves: nothing after this line counts
            raise Killed
        real_replace(source, target)  # an EXDEV passes through: nothing was renamed
        done[0] += into_or_out_of_dist

    monkeypatch.setattr(os, "replace", replace)
    try:
        publish(new, dist / NAME, stale)
        seen.update(_visible(dist))
    except Killed:
        pass
    assert done[0] == renames
    assert set(seen) <= _set_names() and not any("tmp" in name for name in seen)
    if NAME in seen:
        assert seen in (_set_of(old), _set_of(new)), f"a mixed set after {renames} renames"
    monkeypatch.undo()

    lone = set() if NAME in seen else set(seen)
    assert len(sweep_dist(dist, stale)) == (1 if lone else 0)
    assert _visible(dist) in ({}, _set_of(old), _set_of(new))
    assert dist_debris(dist, hash_archives=True) == publish_module.DistDebris((), ())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_full_dist_names_the_dist_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """No space on dist/'s filesystem: the copy fails naming its source (as shutil's does);
    the error publish raises names the file of dist/ that could not be written."""
    built = _built(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    _layout(layout, monkeypatch, dist)
    monkeypatch.setattr(os, "link", _raise(errno.EXDEV))  # a copy, so that it can fill the disk

    real_copy = shutil.copy2

    def full_copy(source: str | os.PathLike[str], target: str | os.PathLike[str], **kwargs: object) -> object:
        if layout != "dist on another filesystem" or Path(target).is_relative_to(dist):
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(source))
        return real_copy(source, target, **kwargs)

    monkeypatch.setattr(shutil, "copy2", full_copy)
    with pytest.raises(OSError) as raised:
        publish(built, dist / NAME, dist / ".stale")
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(dist / (NAME + ".json")), "the first file staged is the .json"
    assert os.listdir(dist) == []


def test_a_full_dist_while_writing_the_manifest_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _built(tmp_path)
    dist = tmp_path / "dist"
    monkeypatch.setattr(publish_module, "atomic_write_bytes", _raise(errno.ENOSPC))
    with pytest.raises(OSError) as raised:
        publish(built, dist / NAME, dist / ".stale", {"leg_key": "k"})
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(dist / (NAME + ".json")))
    assert os.listdir(dist) == []


def _raise(code: int) -> Callable[..., None]:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize("sidecar", [".sha256", ".json"])
def test_sidecars_that_describe_another_archive_are_refused(tmp_path: Path, sidecar: str) -> None:
    built = _built(tmp_path)
    other = _built(tmp_path / "other", b"PK other bytes")
    built.with_name(built.name + sidecar).write_bytes(other.with_name(other.name + sidecar).read_bytes())
    with pytest.raises(PublishError, match="not this archive|but"):
        publish(built, tmp_path / "dist" / built.name, tmp_path / "dist/.stale")
    assert not (tmp_path / "dist" / built.name).exists()


def test_withdraw_then_republish_clears_the_stale_copy(tmp_path: Path) -> None:
    built = _built(tmp_path)
    dist = tmp_path / "dist"
    publish(built, dist / built.name, dist / ".stale")
    assert withdraw(dist / built.name, dist / ".stale") == [built.name, built.name + ".sha256", built.name + ".json"]
    assert not (dist / built.name).exists() and (dist / ".stale" / built.name).is_file()
    publish(built, dist / built.name, dist / ".stale")
    assert not (dist / ".stale").exists()


# -- what a kill left: the sweep at a run's start, gc=1 -------------------------------------------


def _published(dist: Path, base: Path, data: bytes, name: str = NAME) -> Path:
    built = _built(base, data, name)
    publish(built, dist / name, dist / ".stale")
    return dist / name


def test_the_sweep_removes_sidecars_without_their_archive(tmp_path: Path) -> None:
    """A kill during a tar.gz publish left its sidecars; the zip set and files that are
    no archive's sidecars stay."""
    dist = tmp_path / "dist"
    kept = _published(dist, tmp_path / "zip", b"PK zip bytes")
    lone = _published(dist, tmp_path / "tgz", b"tar.gz bytes", NAME.replace(".zip", ".tar.gz"))
    lone.unlink()
    (dist / "notes.json").write_text("{}")
    (dist / "SHA256SUMS").write_text("")
    assert sweep_dist(dist, dist / ".stale") == [f"dist/: removed {lone.name}.json, {lone.name}.sha256 "
                                                 "(their archive is missing): left by an interrupted publish"]
    assert sorted(os.listdir(dist)) == sorted(_set_names(kept.name) | {"notes.json", "SHA256SUMS"})
    assert sweep_dist(dist, dist / ".stale") == []


@pytest.mark.parametrize("damage", ["other sidecars", "no .json", "no .sha256"])
def test_the_sweep_withdraws_a_set_whose_sidecars_do_not_describe_it(tmp_path: Path, damage: str) -> None:
    dist = tmp_path / "dist"
    archive = _published(dist, tmp_path / "old", b"PK old bytes")
    if damage == "other sidecars":
        other = _built(tmp_path / "new", b"PK new, longer bytes")
        for suffix in (".json", ".sha256"):
            shutil.copyfile(other.with_name(other.name + suffix), archive.with_name(archive.name + suffix))
    else:
        archive.with_name(archive.name + damage.removeprefix("no ")).unlink()
    [line] = sweep_dist(dist, dist / ".stale")
    assert line.startswith(f"dist/: withdrew {NAME} (") and "into .stale/" in line, line
    assert _visible(dist) == {} and (dist / ".stale" / NAME).read_bytes() == b"PK old bytes"


def test_an_archive_without_any_sidecar_is_not_the_sweeps(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / NAME).write_bytes(b"someone's zip")
    assert sweep_dist(dist, dist / ".stale") == [] and os.listdir(dist) == [NAME]


def test_gc_hashes_archives_and_collects_what_the_sweep_cannot_see(tmp_path: Path) -> None:
    """Same-size other bytes under agreeing sidecars pass the sweep's name-and-size check;
    gc=1 hashes the archive and collects the set, and lone sidecars."""
    from backends.commands import gc

    dist = tmp_path / "dist"
    archive = _published(dist, tmp_path / "a", b"PK bytes one")
    lone = _published(dist, tmp_path / "b", b"PK other", NAME.replace(".zip", ".7z"))
    lone.unlink()
    archive.unlink()
    archive.write_bytes(b"PK bytes two")
    assert dist_debris(dist) == publish_module.DistDebris((lone.with_name(lone.name + ".json"),
                                                           lone.with_name(lone.name + ".sha256")), ())
    assert sorted(p.name for p in gc._dist_garbage(dist)) == sorted(_set_names() | _set_names(lone.name) - {lone.name})
