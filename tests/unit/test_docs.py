"""The documentation stands alone and tells the truth: the README fits a screen and its table
of what ships is the data's; every relative link (file and #anchor, by GitHub's rules) and
every `docs/<page>.md#<anchor>` cited anywhere resolves; no section was lost when the README's
reference moved to docs/; and no document points outside the repository."""
from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

import backends
from backends.model.matrix import engine_names, load_matrix

ROOT = Path(__file__).resolve().parents[2]
README_LINES = 150
# Pages whose sections code comments cite by explicit, stable anchors (`<a id="...">`).
CITED = ("upstream", "history")
# Made-up pages that tests write into scratch repositories, not citations.
FIXTURE_PAGES = {("tests/unit/ci/test_ci.py", "x.md")}
ANCHOR = re.compile(r'<a (?:id|name)="([^"]+)"></a>')
CITATION = re.compile(r"\b(upstream|history)\.md#([A-Za-z0-9_-]+)")
DOC_PATH = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)(?:#([A-Za-z0-9_-]+))?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
DOCUMENTS = ["README.md", "CONTRIBUTING.md", *sorted(f"docs/{p.name}" for p in ROOT.glob("docs/*.md"))]
# The planning folder beside the repository and its spec: spelled so this file does not match.
OUTSIDE = re.compile(r"\.\./shar[e]d|shar[e]d/spec|upstream-spec\.md|spec \u00a7")
# The README's column headings and the OS each stands for (a platform token's first word).
OS_COLUMNS = {"macOS": "macos", "Linux": "linux", "Windows": "windows", "Android": "android", "iOS": "ios",
              "WASM": "wasm"}
FLAVOR_ORDER = ("cpu", "gpu", "cuda")  # the order cells list flavors in; others follow by name
EXPERIMENTAL = " (experimental)"
# Where each section of the old, long README went (page, heading there): none is lost.
MOVED = {
    "Quick start (Debian 12, Ubuntu 24.04; Python 3.11 or newer)": ("README.md", None),
    "What builds before pins are recorded": ("docs/how-a-build-works.md", None),
    "Set-up": ("docs/setup.md", "Set-up, in short"),
    "Vocabulary (one spelling everywhere: options, data, manifests, CI)": ("README.md", None),
    "Commands": ("docs/commands.md", "Everyday commands"),
    "Binary cache: reuse a verified archive when nothing it depends on changed": ("docs/binary-cache.md", None),
    "What a build does": ("docs/how-a-build-works.md", None),
    "Downloads: cache, mirror, offline, pins, origin": ("docs/how-a-build-works.md", None),
    "Variants and their runtime requirements": ("docs/using-archives.md", None),
    "Using an archive from CMake": ("docs/using-archives.md", None),
    "When a leg fails": ("docs/how-a-build-works.md", None),
    "Where this differs from the original build scripts, and why": ("README.md", None),
    "Measured here": ("docs/benchmarks.md", "Measured here (dated)"),
    "Layout": ("docs/architecture.md", "The repository"),
    # decisions.md keeps decisions only; the trust page (binary-cache-trust.md) merged into binary-cache.md.
    "On the runners (paths that only run in CI)": ("docs/ci-and-release.md", None),
    "Known gaps": ("docs/history.md", None),
    "Who can write a store": ("docs/binary-cache.md", None),
    "Keys": ("docs/binary-cache.md", None),
    "What a reader checks, in order": ("docs/binary-cache.md", None),
    "Trust over time: revocation, the store's state": ("docs/binary-cache.md", None),
    "Rotating a key": ("docs/binary-cache.md", None),
}


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    suffixes = (".py", ".md", ".toml", ".txt", ".cmake", ".sh", ".yml", ".ps1", ".mjs")
    return [ROOT / name for name in listed.stdout.split() if Path(name).suffix in suffixes]


def prose(text: str) -> str:
    """The text without fenced code blocks: a `# comment` there is no heading, a `](x)` no link."""
    return FENCE.sub("", text)


def headings(text: str) -> list[str]:
    return [title for _, title in HEADING.findall(prose(text))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lowercased, every character but letters,
    digits, `_`, `-` and spaces dropped, each space a hyphen."""
    rendered = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return "".join(c for c in rendered.lower() if c.isalnum() or c in "_- ").replace(" ", "-")


def page_anchors(text: str) -> set[str]:
    """Every anchor a page defines: explicit `<a id>`s and its headings' slugs, a repeated
    slug numbered `-1`, `-2`, ... as GitHub numbers it."""
    found = set(ANCHOR.findall(text))
    seen: dict[str, int] = defaultdict(int)
    for title in headings(text):
        base = slug(title)
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def explicit_anchors(page: str) -> list[str]:
    return ANCHOR.findall((ROOT / f"docs/{page}.md").read_text())


def resolves(document: Path, target: str) -> str | None:
    """Why a relative link from `document` does not resolve, or None when it does."""
    path, _, anchor = target.partition("#")
    destination = (document.parent / path).resolve() if path else document
    name = destination.relative_to(ROOT).as_posix() if destination.is_relative_to(ROOT) else str(destination)
    if not destination.exists():
        return "no such file"
    if anchor and destination.is_file() and destination.suffix == ".md" and \
            anchor not in page_anchors(destination.read_text()):
        return f"no anchor #{anchor} in {name}"
    return None


def section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no section '## {title}'"
    return match.group(1)


def test_slug_follows_githubs_rules() -> None:
    assert slug("Trust in dist/ (kills, concurrent runs, altered inputs)") == \
        "trust-in-dist-kills-concurrent-runs-altered-inputs"
    assert slug("License texts: `share/licenses/<engine>/`") == "license-texts-sharelicensesengine"
    assert slug("Binary cache: reuse a verified archive — when") == "binary-cache-reuse-a-verified-archive--when"
    assert page_anchors("## A\n\n## A\n\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_the_readme_fits_a_screen() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines, at most {README_LINES}: move reference to docs/"


def test_anchors_are_unique() -> None:
    for page in CITED:
        found = explicit_anchors(page)
        assert found and len(found) == len(set(found)), page


def test_every_cited_anchor_exists() -> None:
    known = {page: set(explicit_anchors(page)) for page in CITED}
    missing = [f"{path.relative_to(ROOT)}: {page}.md#{anchor}" for path in tracked_text_files() if path.is_file()
               for page, anchor in CITATION.findall(path.read_text(errors="replace")) if anchor not in known[page]]
    assert not missing, "cited anchors their page does not define:\n" + "\n".join(missing)


def test_relative_links_resolve() -> None:
    broken = []
    for name in DOCUMENTS:
        document = ROOT / name
        for target in LINK.findall(prose(document.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            why = resolves(document, target)
            if why:
                broken.append(f"{name}: {target}: {why}")
    assert not broken, "\n".join(broken)


def test_docs_named_by_code_and_data_exist() -> None:
    """Messages, comments and workflows that name `docs/<page>.md[#anchor]` name a page (and
    section) that is there: a moved or merged page leaves no dangling path behind."""
    broken = []
    for path in tracked_text_files():
        if not path.is_file() or path.suffix == ".md" and path.is_relative_to(ROOT / "docs"):
            continue
        for page, anchor in DOC_PATH.findall(path.read_text(errors="replace")):
            target = ROOT / "docs" / page
            if (path.relative_to(ROOT).as_posix(), page) in FIXTURE_PAGES:
                continue
            if not target.is_file():
                broken.append(f"{path.relative_to(ROOT)}: docs/{page}: no such page")
            elif anchor and anchor not in page_anchors(target.read_text()):
                broken.append(f"{path.relative_to(ROOT)}: docs/{page}#{anchor}: no such anchor")
    assert not broken, "\n".join(broken)


def test_every_page_in_docs_is_on_the_readmes_map() -> None:
    mapped = set(re.findall(r"\]\((docs/[^)#\s]+)", section((ROOT / "README.md").read_text(), "Documentation")))
    pages = {f"docs/{p.name}" for p in ROOT.glob("docs/*.md")}
    assert pages <= mapped, f"pages the README's map does not list: {sorted(pages - mapped)}"


def shipped() -> dict[str, dict[str, str]]:
    """Per engine, per OS, the cell the README should show: the flavors its published legs
    have, each marked experimental when every such leg is."""
    flags: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for leg in load_matrix(ROOT).legs:
        if leg.publish:
            flags[(leg.engine, leg.platform.split("-")[0], leg.flavor)].append(leg.experimental)
    order = {flavor: index for index, flavor in enumerate(FLAVOR_ORDER)}
    cells: dict[str, dict[str, str]] = {engine: {} for engine in engine_names(ROOT)}
    for engine in cells:
        for os_name in {os_name for (e, os_name, _) in flags if e == engine}:
            flavors = sorted((f for (e, o, f) in flags if (e, o) == (engine, os_name)),
                             key=lambda f: (order.get(f, len(order)), f))
            cells[engine][os_name] = ", ".join(f + (EXPERIMENTAL if all(flags[(engine, os_name, f)]) else "")
                                               for f in flavors)
    return cells


def readme_ships_table() -> dict[str, dict[str, str]]:
    rows = [line for line in section((ROOT / "README.md").read_text(), "What ships").splitlines()
            if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    unknown = [column for column in header[1:] if column not in OS_COLUMNS]
    assert header[0] == "engine" and not unknown, f"columns: {header}"
    table: dict[str, dict[str, str]] = {}
    for row in rows[2:]:
        engine, *cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[engine.strip("`")] = {OS_COLUMNS[column]: cell for column, cell in zip(header[1:], cells)
                                    if cell != "—"}
    return table


def markdown_row(engine: str, cells: dict[str, str]) -> str:
    return "| " + " | ".join([f"`{engine}`", *(cells.get(os_name, "—") for os_name in OS_COLUMNS.values())]) + " |"


def test_the_readmes_ships_table_is_the_data() -> None:
    expected, table = shipped(), readme_ships_table()
    columns = {OS_COLUMNS[c] for c in OS_COLUMNS}
    missing_columns = {o for cells in expected.values() for o in cells} - columns
    assert not missing_columns, f"an OS ships that the table has no column for: {sorted(missing_columns)}"
    assert table == expected, "README's 'What ships' differs from variants/ and engines/; the data's rows:\n" + \
        "\n".join(markdown_row(engine, expected[engine]) for engine in expected)


@pytest.mark.parametrize("old, where", sorted(MOVED.items()))
def test_no_section_of_the_old_readme_was_lost(old: str, where: tuple[str, str | None]) -> None:
    page, title = where
    text = (ROOT / page).read_text()
    assert (title or old) in headings(text), f"'{old}' should be '{title or old}' in {page}"
    if page != "README.md":
        linked = {target.partition("#")[0] for target in LINK.findall((ROOT / "README.md").read_text())}
        assert page in linked, f"{page} holds a section of the README but the README does not link it"


def test_the_architecture_page_maps_every_layer() -> None:
    rows = section((ROOT / "docs/architecture.md").read_text(), "The packages, from the ground up")
    listed = tuple(re.findall(r"^\| `([a-z_]+)` \|", rows, re.M))
    assert listed == backends.LAYERS, f"docs/architecture.md lists {listed}, backends.LAYERS is {backends.LAYERS}"
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", (ROOT / "docs/architecture.md").read_text()))
    missing = [name for name in sorted(named)
               if not any((ROOT / base / name).is_file() for base in ("", "site_scons", "site_scons/backends"))]
    assert named and not missing, f"modules docs/architecture.md names that do not exist: {missing}"


def test_nothing_points_outside_the_repository() -> None:
    """A clone from GitHub has only the repository: every file cites docs/ instead."""
    outside = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in tracked_text_files() if path.is_file()
               for match in OUTSIDE.finditer(path.read_text(errors="replace"))]
    assert not outside, outside
