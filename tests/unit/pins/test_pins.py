"""Pins are written into engine.toml in place: values replaced, keys appended to their table,
comments and every other line kept byte for byte."""
import tomllib

import pytest

from backends.pins.engine_toml import Changes, PinConflict, apply, record_commit, record_pin

ENGINE = '''name = "x"
version = "1.0.0"           # the pin
license = "MIT"

[pins]
commit = "0123456789012345678901234567890123456789"

[sources.source]
kind = "git"
url = "u"
ref = "v{version}"
commit = ""                 # the tag's commit

[sources.acl]
kind = "git"
commit = ""

[sources.podspec]
url = "https://example.invalid/x.podspec.json"

# sha256 of every downloaded file, by file name.
[sha256]
"old.zip" = "''' + "b" * 64 + '''"
"x+cpu.zip" = "''' + "e" * 64 + '''"
'''


def _write(tmp_path):
    toml = tmp_path / "engine.toml"
    toml.write_text(ENGINE)
    return toml


def test_record_commit_fills_only_its_source_table_and_keeps_the_comment(tmp_path):
    toml = _write(tmp_path)
    record_commit(toml, "source", "a" * 40)
    text = toml.read_text()
    data = tomllib.loads(text)
    assert data["sources"]["source"]["commit"] == "a" * 40 and data["sources"]["acl"]["commit"] == ""
    assert data["pins"]["commit"] == "0123456789012345678901234567890123456789"
    assert f'commit = "{"a" * 40}"                 # the tag\'s commit' in text
    assert text.replace("a" * 40, "") == ENGINE  # nothing else moved


def test_record_pin_adds_and_never_replaces(tmp_path):
    toml = _write(tmp_path)
    record_pin(toml, "new.tgz", "c" * 64)
    record_pin(toml, "old.zip", "b" * 64)  # the same pin: nothing to do
    with pytest.raises(PinConflict, match="sha256.old.zip was recorded as b+ meanwhile, and this run got d+"):
        record_pin(toml, "old.zip", "d" * 64)
    data = tomllib.loads(toml.read_text())
    assert data["sha256"] == {"old.zip": "b" * 64, "x+cpu.zip": "e" * 64, "new.tgz": "c" * 64}
    assert data["sources"]["source"]["url"] == "u"
    assert toml.read_text().startswith(ENGINE.split('"old.zip"')[0])


def test_a_bump_in_one_edit(tmp_path):
    toml = _write(tmp_path)
    apply(toml, Changes(version="1.1.0", drop_sha256={"old.zip", "x+cpu.zip"}, sha256={"new.zip": "f" * 64},
                        commits={"source": ""}, nested={"x-1.1.0.podspec.json": "https://example.invalid/x-1.1.0.tgz"}))
    text = toml.read_text()
    data = tomllib.loads(text)
    assert data["version"] == "1.1.0" and 'version = "1.1.0"           # the pin' in text
    assert data["sha256"] == {"new.zip": "f" * 64}
    assert data["nested"] == {"x-1.1.0.podspec.json": "https://example.invalid/x-1.1.0.tgz"}
    # The new table goes before [sha256] and the comment that introduces it.
    assert text.index("[nested]") < text.index("# sha256 of every") < text.index("[sha256]")
    apply(toml, Changes(drop_nested={"x-1.1.0.podspec.json"}))
    assert tomllib.loads(toml.read_text())["nested"] == {}


def test_a_missing_sha256_table_is_created(tmp_path):
    toml = tmp_path / "engine.toml"
    toml.write_text('name = "x"\n')
    record_pin(toml, "a.zip", "a" * 64)
    assert tomllib.loads(toml.read_text())["sha256"] == {"a.zip": "a" * 64}


def test_record_commit_never_replaces_a_recorded_commit(tmp_path):
    toml = _write(tmp_path)
    record_commit(toml, "source", "a" * 40)
    with pytest.raises(PinConflict, match="sources.source.commit was recorded as a+ meanwhile"):
        record_commit(toml, "source", "c" * 40)
    assert tomllib.loads(toml.read_text())["sources"]["source"]["commit"] == "a" * 40
