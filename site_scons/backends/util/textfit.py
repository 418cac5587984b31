"""Text that fits a terminal: tables and plans within WIDTH columns.

A table's long value (a URL, a path, a list of inputs) is shortened in the middle, where it
says least (`https://github.com/...onnxruntime-linux-x64-1.26.0.tgz`; `plan=1 <leg>` shows it
whole); a long line of a plan is wrapped with a hanging indent (commands with ` \\`, so they
still paste into a shell).
"""
from __future__ import annotations

from typing import Sequence

WIDTH = 120
ELLIPSIS = "..."


def shorten(text: str, width: int) -> str:
    """`text` cut in the middle to `width` characters (its start and its end kept)."""
    if len(text) <= width or width <= len(ELLIPSIS) + 2:
        return text
    keep = width - len(ELLIPSIS)
    head = keep // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head):]


def fit_table(rows: Sequence[dict[str, str]], width: int = WIDTH, least: int = 11) -> list[dict[str, str]]:
    """The rows with their widest columns' long values shortened until a row fits `width`
    (two spaces between columns). The first column (what a row is: a leg id, an input) is
    kept whole, and no column is cut below `least` characters."""
    fitted = [dict(row) for row in rows]
    if not fitted:
        return fitted
    headers = list(fitted[0])

    def column_width(header: str) -> int:
        return max(len(header), *(len(row[header]) for row in fitted))

    while True:
        widths = {header: column_width(header) for header in headers}
        excess = sum(widths.values()) + 2 * (len(headers) - 1) - width
        cuttable = [h for h in headers[1:] if widths[h] > max(least, len(h))]
        if excess <= 0 or not cuttable:
            return fitted
        widest = max(cuttable, key=lambda h: widths[h])
        target = max(least, len(widest), widths[widest] - excess)
        for row in fitted:
            row[widest] = shorten(row[widest], target)


def wrap(line: str, width: int = WIDTH, *, command: bool = False) -> list[str]:
    """`line` as lines of at most `width`, the continuation indented four more than the line;
    `command` ends continued lines with ` \\`. Words stay whole (a URL longer than a line
    gets a line of its own): what plan=1 prints is meant to be copied."""
    if len(line) <= width:
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    lead, more = " " * indent, " " * (indent + 4)
    tail = " \\" if command else ""
    lines: list[str] = []
    current = lead
    for word in line.split():
        candidate = word if current.strip() == "" else f"{current} {word}"
        if current.strip() and len(candidate) + len(tail) > width:
            lines.append(current + tail)
            current = more + word
        else:
            current = candidate if current.strip() else lead + word if not lines else more + word
    lines.append(current)
    return lines


def format_table(rows: Sequence[dict[str, str]], fit: bool = True) -> str:
    """Rows of one shape as aligned columns under a header line; `fit` shortens long values."""
    if not rows:
        return "(no legs)"
    rows = fit_table(rows) if fit else rows
    headers = list(rows[0])
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in headers}
    lines = ["  ".join(h.ljust(widths[h]) for h in headers).rstrip()]
    lines.append("  ".join("-" * widths[h] for h in headers))
    lines += ["  ".join(r[h].ljust(widths[h]) for h in headers).rstrip() for r in rows]
    return "\n".join(lines)
