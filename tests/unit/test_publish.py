"""Publishing into dist/: sidecars checked, another filesystem, withdrawal."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from backends.steps import publish as publish_module
from backends.steps.archive import sha256_sidecar
from backends.steps.files import sha256_file
from backends.steps.publish import PublishError, publish, withdraw


def _built(tmp_path: Path, data: bytes = b"PK archive bytes") -> Path:
    archive = tmp_path / "build" / "pkg-1.0-Linux-x86_64-shared.zip"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    sha256_sidecar(archive)
    archive.with_name(archive.name + ".json").write_text(json.dumps(
        {"archive": archive.name, "sha256": sha256_file(archive), "size": len(data), "files": [{}, {}]}))
    return archive


def test_publish_places_the_archive_and_its_sidecars(tmp_path: Path) -> None:
    built = _built(tmp_path)
    dest = tmp_path / "dist" / built.name
    result = publish(built, dest, tmp_path / "dist/.stale")
    assert dest.read_bytes() == built.read_bytes() and result.files == 2
    assert sorted(os.listdir(dest.parent)) == sorted([built.name, built.name + ".sha256", built.name + ".json"])


def test_publish_across_filesystems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build/ and dist/ on different filesystems: no hard link, and nothing may be renamed
    from one to the other; publish copies into a temp inside dist/ and renames there."""
    built = _built(tmp_path)
    dist = tmp_path / "dist"

    def no_link(source: object, target: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    real_replace = os.replace

    def same_dir_only(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        if Path(source).parent != Path(target).parent:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_replace(source, target)

    monkeypatch.setattr(publish_module.os, "link", no_link)
    monkeypatch.setattr(publish_module.os, "replace", same_dir_only)
    publish(built, dist / built.name, dist / ".stale")
    assert (dist / built.name).read_bytes() == built.read_bytes()
    assert not (dist / built.name).samefile(built)
    assert [name for name in os.listdir(dist) if ".tmp-" in name] == []


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
    assert withdraw(dist / built.name, dist / ".stale") == [built.name + ".json", built.name + ".sha256", built.name]
    assert not (dist / built.name).exists() and (dist / ".stale" / built.name).is_file()
    publish(built, dist / built.name, dist / ".stale")
    assert not (dist / ".stale").exists()
