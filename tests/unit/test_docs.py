"""The documentation stands alone: every `docs/upstream.md#<anchor>` cited anywhere exists,
relative links resolve, and no document points outside the repository."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = re.compile(r'<a id="([a-z0-9-]+)"></a>')
CITATION = re.compile(r"upstream\.md#([A-Za-z0-9_-]+)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOCUMENTS = ["README.md", "CONTRIBUTING.md", *sorted(f"docs/{p.name}" for p in ROOT.glob("docs/*.md"))]
# The planning folder beside the repository and its spec: spelled so this file does not match.
OUTSIDE = re.compile(r"\.\./shar[e]d|shar[e]d/spec|upstream-spec\.md|spec \u00a7")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    suffixes = (".py", ".md", ".toml", ".txt", ".cmake", ".sh", ".yml")
    return [ROOT / name for name in listed.stdout.split() if Path(name).suffix in suffixes]


def anchors() -> list[str]:
    return ANCHOR.findall((ROOT / "docs/upstream.md").read_text())


def test_anchors_are_unique() -> None:
    found = anchors()
    assert found and len(found) == len(set(found))


def test_every_cited_anchor_exists() -> None:
    known = set(anchors())
    missing = [f"{path.relative_to(ROOT)}: #{anchor}" for path in tracked_text_files() if path.is_file()
               for anchor in CITATION.findall(path.read_text(errors="replace")) if anchor not in known]
    local = re.findall(r"\]\(#([a-z0-9-]+)\)", (ROOT / "docs/upstream.md").read_text())
    inside = [f"docs/upstream.md: #{anchor}" for anchor in local if anchor not in known]
    assert not missing + inside, "cited anchors that docs/upstream.md does not define:\n" + "\n".join(missing + inside)


def test_relative_links_resolve() -> None:
    broken = []
    for name in DOCUMENTS:
        document = ROOT / name
        for target in LINK.findall(document.read_text()):
            if "://" not in target and not (document.parent / target).exists():
                broken.append(f"{name}: {target}")
    assert not broken, "\n".join(broken)


def test_nothing_points_outside_the_repository() -> None:
    """A clone from GitHub has only the repository: every file cites docs/ instead."""
    outside = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in tracked_text_files() if path.is_file()
               for match in OUTSIDE.finditer(path.read_text(errors="replace"))]
    assert not outside, outside
