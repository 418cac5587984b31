"""The documentation stands alone: every `docs/upstream.md#<anchor>` cited anywhere exists,
relative links resolve, and no document points outside the repository."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = re.compile(r'<a id="([a-z0-9-]+)"></a>')
CITATION = re.compile(r"\b(upstream|history)\.md#([A-Za-z0-9_-]+)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# Pages other engineers are writing: linked from the README's map before they land.
PENDING = {"docs/extending.md", "docs/hermetic-sources.md"}
DOCUMENTS = ["README.md", "CONTRIBUTING.md", *sorted(f"docs/{p.name}" for p in ROOT.glob("docs/*.md"))]
# The planning folder beside the repository and its spec: spelled so this file does not match.
OUTSIDE = re.compile(r"\.\./shar[e]d|shar[e]d/spec|upstream-spec\.md|spec \u00a7")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    suffixes = (".py", ".md", ".toml", ".txt", ".cmake", ".sh", ".yml")
    return [ROOT / name for name in listed.stdout.split() if Path(name).suffix in suffixes]


def anchors(page: str) -> list[str]:
    return ANCHOR.findall((ROOT / f"docs/{page}.md").read_text())


def test_anchors_are_unique() -> None:
    for page in ("upstream", "history"):
        found = anchors(page)
        assert found and len(found) == len(set(found)), page


def test_every_cited_anchor_exists() -> None:
    known = {page: set(anchors(page)) for page in ("upstream", "history")}
    missing = [f"{path.relative_to(ROOT)}: {page}.md#{anchor}" for path in tracked_text_files() if path.is_file()
               for page, anchor in CITATION.findall(path.read_text(errors="replace")) if anchor not in known[page]]
    inside = [f"docs/{page}.md: #{anchor}" for page in known
              for anchor in re.findall(r"\]\(#([a-z0-9-]+)\)", (ROOT / f"docs/{page}.md").read_text())
              if anchor not in known[page]]
    assert not missing + inside, "cited anchors their page does not define:\n" + "\n".join(missing + inside)


def test_relative_links_resolve() -> None:
    broken = []
    for name in DOCUMENTS:
        document = ROOT / name
        for target in LINK.findall(document.read_text()):
            if "://" not in target and not (document.parent / target).exists() and \
                    (document.parent / target).resolve().relative_to(ROOT).as_posix() not in PENDING:
                broken.append(f"{name}: {target}")
    assert not broken, "\n".join(broken)


def test_nothing_points_outside_the_repository() -> None:
    """A clone from GitHub has only the repository: every file cites docs/ instead."""
    outside = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in tracked_text_files() if path.is_file()
               for match in OUTSIDE.finditer(path.read_text(errors="replace"))]
    assert not outside, outside
