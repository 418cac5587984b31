"""lock=1 records trust-on-first-use pins into engine.toml, leaving the rest untouched."""
import tomllib

from backends.pins import record_commit, record_pin

ENGINE = ('name = "x"\n\n[sources.source]\nkind = "git"\nurl = "u"\nref = "v1"\ncommit = ""\n\n'
          '[sources.acl]\nkind = "git"\ncommit = ""\n\n[sha256]\n"old.zip" = "' + "b" * 64 + '"\n')


def test_record_commit_fills_only_its_source_table(tmp_path):
    toml = tmp_path / "engine.toml"
    toml.write_text(ENGINE)
    record_commit(toml, "source", "a" * 40)
    data = tomllib.loads(toml.read_text())
    assert data["sources"]["source"]["commit"] == "a" * 40 and data["sources"]["acl"]["commit"] == ""


def test_record_pin_adds_and_replaces(tmp_path):
    toml = tmp_path / "engine.toml"
    toml.write_text(ENGINE)
    record_pin(toml, "new.tgz", "c" * 64)
    record_pin(toml, "old.zip", "d" * 64)
    data = tomllib.loads(toml.read_text())
    assert data["sha256"] == {"old.zip": "d" * 64, "new.tgz": "c" * 64}
    assert data["sources"]["source"]["url"] == "u"
