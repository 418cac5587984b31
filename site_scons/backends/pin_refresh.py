"""The pin-refresh workflow's last step: a pull request with the pins `scons lock` recorded.

    python -m backends.pin_refresh --repo owner/name --base main [--remote origin]
                                   [--branch pins/<engines>] [--api URL] [--token-env GITHUB_TOKEN]

Run in a checkout where `scons lock` changed `engines/*/engine.toml`. The command commits
those files on `--branch` (by default `pins/<engines>`, so a re-run for the same engines
refreshes its own pull request), force-pushes the branch to `--remote`, and opens a pull
request into `--base`, or updates the open one. Its body lists every new pin with the URL
it was taken from and the legs that use it, each version bump, and the pins a bump
dropped. Nothing changed: no commit, no pull request, exit 0.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .github import GitHub, GitHubError, add_api_arguments, redacting_printer
from .inputs import FILE, GIT, Input, collect
from .model.engine import DataError
from .model.matrix import load_matrix
from .model.recipes import plan_all

ENGINE_FILES = "engines/*/engine.toml"
AUTHOR = ("-c", "user.name=github-actions[bot]",
          "-c", "user.email=41898282+github-actions[bot]@users.noreply.github.com")


class RefreshError(RuntimeError):
    """The pull request cannot be made; the message says why."""


@dataclass
class EngineChange:
    """What `scons lock` changed in one engine.toml, against the committed file."""

    engine: str
    old_version: str
    new_version: str
    pins: list[tuple[Input | None, str, str]] = field(default_factory=list)  # (input, what, value)
    dropped: list[str] = field(default_factory=list)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RefreshError(f"git {' '.join(args)}: {done.stderr.strip() or f'exit code {done.returncode}'}")
    return done.stdout


def changed_files(root: Path) -> list[str]:
    return _git(root, "diff", "--name-only", "HEAD", "--", ENGINE_FILES).split()


def describe(root: Path, files: Sequence[str]) -> list[EngineChange]:
    """Each changed engine's new pins (with the input they pin), version and dropped pins."""
    matrix = load_matrix(root)
    changes = []
    for path in files:
        engine = Path(path).parent.name
        old = tomllib.loads(_git(root, "show", f"HEAD:{path}"))
        new = tomllib.loads((root / path).read_text())
        legs = [leg for leg in matrix.legs if leg.engine == engine]
        inputs = {(item.kind, item.key): item for item in collect(plan_all(matrix, legs), matrix)}
        change = EngineChange(engine, str(old.get("version", "")), str(new.get("version", "")))
        old_sha256, new_sha256 = old.get("sha256", {}), new.get("sha256", {})
        for name, digest in new_sha256.items():
            if old_sha256.get(name) != digest:
                change.pins.append((inputs.get((FILE, name)), f"`{name}`", f"sha256 `{digest}`"))
        for source, spec in new.get("sources", {}).items():
            commit, before = spec.get("commit", ""), old.get("sources", {}).get(source, {}).get("commit", "")
            if commit != before and commit:
                change.pins.append((inputs.get((GIT, source)), f"`{source}`", f"commit `{commit}`"))
            elif before and not commit:
                change.dropped.append(f"`{source}` commit")
        change.dropped += [f"`{name}`" for name in old_sha256 if name not in new_sha256]
        changes.append(change)
    return changes


def title(changes: Sequence[EngineChange]) -> str:
    parts = [f"{c.engine} {c.new_version}" if c.new_version != c.old_version else c.engine for c in changes]
    return "pins: " + ", ".join(parts)


def body(changes: Sequence[EngineChange]) -> str:
    lines = ["Pins recorded by `scons lock` (trust on first use) in the pins workflow. Check that every URL is "
             "upstream's own and every commit the tag upstream published, then merge.", ""]
    for change in changes:
        bumped = f" {change.old_version} → {change.new_version}" if change.new_version != change.old_version else ""
        lines += [f"## {change.engine}{bumped}", ""]
        if change.pins:
            lines += ["| input | pin | from | legs |", "|---|---|---|---|"]
            for item, what, value in change.pins:
                where = "(no selected leg uses it)" if item is None else _where(item)
                lines.append(f"| {what} | {value} | {where} | {len(item.legs) if item else 0} |")
            lines.append("")
        if change.dropped:
            lines += ["Dropped, used only by the previous version: " + ", ".join(change.dropped) + ".", ""]
    return "\n".join(lines)


def _where(item: Input) -> str:
    if item.kind == GIT:
        return f"{item.url} at `{item.ref}`"
    return item.url + (f" (named in `{item.parent}`)" if item.parent else "")


def default_branch(changes: Sequence[EngineChange]) -> str:
    return "pins/" + "-".join(change.engine for change in changes)


def push(root: Path, files: Sequence[str], branch: str, remote: str, message: str) -> None:
    _git(root, "checkout", "-q", "-B", branch)
    _git(root, "add", "--", *files)
    _git(root, *AUTHOR, "commit", "-q", "-m", message)
    _git(root, "push", "-q", "--force", remote, f"HEAD:refs/heads/{branch}")


def refresh(github: GitHub, root: Path, base: str, remote: str, branch: str, say: Any) -> int:
    files = changed_files(root)
    if not files:
        say("every selected input was already pinned: no pull request")
        return 0
    changes = describe(root, files)
    branch = branch or default_branch(changes)
    text, heading = body(changes), title(changes)
    push(root, files, branch, remote, f"{heading}\n\n{text}")
    existing = github.find_pull(branch, base)
    if existing is not None:
        pull = github.update_pull(existing, title=heading, body=text)
        say(f"updated pull request #{pull['number']}: {pull.get('html_url', '')}")
    else:
        pull = github.open_pull(branch, base, heading, text)
        say(f"opened pull request #{pull['number']}: {pull.get('html_url', '')}")
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="python -m backends.pin_refresh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", required=True, help="owner/name")
    parser.add_argument("--base", required=True, help="the branch the pull request goes into")
    parser.add_argument("--remote", default="origin", help="where the branch is pushed (default origin)")
    parser.add_argument("--branch", default="", help="the pull request's branch (default pins/<engines>)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (default .)")
    add_api_arguments(parser)
    args = parser.parse_args(argv)
    token = environ.get(args.token_env, "")
    say = redacting_printer(token)

    try:
        if not token:
            raise RefreshError(f"${args.token_env} is empty; it must hold a token with contents: write and "
                               "pull-requests: write")
        return refresh(GitHub(args.api, args.repo, token), args.root, args.base, args.remote, args.branch, say)
    except (RefreshError, GitHubError, DataError) as error:
        say(f"error: {error}", sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
