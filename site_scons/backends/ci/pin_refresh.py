"""The pin-refresh workflow's last step: a pull request with the pins `scons lock` recorded.

    python -m backends.ci.pin_refresh --repo owner/name --base main [--remote origin] [--engine all]
                                   [--branch pins/<engines>] [--token-secret PINS_TOKEN]
                                   [--api URL] [--token-env GITHUB_TOKEN]

Run in a checkout where `scons lock` changed `engines/*/engine.toml`. The command looks up
the open pull request of `--branch` (by default `pins/<engines>`, so a re-run for the same
engines refreshes its own pull request), commits those files on that branch, force-pushes it
to `--remote`, and opens a pull request into `--base`, or updates the open one. Its body
lists every new pin with the URL it was taken from and the legs that use it, each version
bump, the pins a bump dropped, and the inputs of the `--engine` selection still unpinned (a
lock that could not fetch them records the rest). Nothing changed: no commit, no pull
request, exit 0.

GitHub refuses a pull request from the workflow's own token unless the repository allows
it (off by default). Then the branch stays pushed, the job summary holds it, a link that
opens the pull request from it and the diff, a warning names the setting and the
`PINS_TOKEN` secret (`--token-secret`: which secret the token came from, if any), and the
exit code is 0: the change is there to review.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

from backends.ci.main import annotation, write_summary
from backends.model.engine import DataError
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.pins.inputs import FILE, GIT, Input, collect, unpinned
from backends.util.errors import BackendsError
from backends.util.github import GitHub, GitHubError, add_api_arguments, redacting_printer

ENGINE_FILES = "engines/*/engine.toml"
AUTHOR = ("-c", "user.name=github-actions[bot]",
          "-c", "user.email=41898282+github-actions[bot]@users.noreply.github.com")
WORKFLOW_PERMISSIONS = "Settings > Actions > General > Workflow permissions"
PULLS_SETTING = f'{WORKFLOW_PERMISSIONS} > "Allow GitHub Actions to create and approve pull requests"'
PINS_TOKEN = "PINS_TOKEN"
TOKEN_RIGHTS = "Contents: Read and write and Pull requests: Read and write on this repository"
SUMMARY_DIFF_LIMIT = 200_000  # characters; a job summary holds at most 1 MiB per step


class RefreshError(BackendsError, RuntimeError):
    """The pull request cannot be made; the message says why."""


@dataclass(frozen=True)
class Where:
    """Where the run and its branch are seen: the repository, the pull request's base, links."""

    repo: str
    base: str
    server: str = "https://github.com"
    run_url: str = ""  # this workflow run's page, "" outside Actions

    def compare(self, branch: str) -> str:
        """The page that opens a pull request from `branch` (a one-commit branch: GitHub fills
        the title and body in from its commit message)."""
        return f"{self.server}/{self.repo}/compare/{quote(self.base, safe='/')}...{quote(branch, safe='/')}?expand=1"

    @classmethod
    def of(cls, repo: str, base: str, environ: Mapping[str, str]) -> "Where":
        server = environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        run = environ.get("GITHUB_RUN_ID", "")
        return cls(repo, base, server, f"{server}/{repo}/actions/runs/{run}" if run else "")


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


def still_unpinned(root: Path, engines: str) -> list[Input]:
    """The inputs of the `engines` selection (a comma list or `all`) that are still unpinned."""
    matrix = load_matrix(root)
    wanted = None if engines in ("", "all") else set(engines.split(","))
    legs = [leg for leg in matrix.legs if wanted is None or leg.engine in wanted]
    return unpinned(collect(plan_all(matrix, legs), matrix))


def body(changes: Sequence[EngineChange], missing: Sequence[Input] = (), run_url: str = "") -> str:
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
    if missing:
        why = f"[the workflow run]({run_url})" if run_url else "the workflow run's `scons lock` step"
        lines += ["## Not pinned yet", "",
                  f"`scons lock` could not pin these ({why} says why); their legs do not run until a later run of "
                  "the pins workflow pins them. Merging this pull request is still progress.", "",
                  "| input | from | legs |", "|---|---|---|"]
        lines += [f"| {item.label} | {_where(item) if item.url else f'named in `{item.parent}`'} | {len(item.legs)} |"
                  for item in missing]
        lines.append("")
    return "\n".join(lines)


def _where(item: Input) -> str:
    if item.kind == GIT:
        return f"{item.url} at `{item.ref}`"
    return item.url + (f" (named in `{item.parent}`)" if item.parent else "")


def default_branch(changes: Sequence[EngineChange]) -> str:
    return "pins/" + "-".join(change.engine for change in changes)


def commit(root: Path, files: Sequence[str], branch: str, message: str) -> None:
    _git(root, "checkout", "-q", "-B", branch)
    _git(root, "add", "--", *files)
    _git(root, *AUTHOR, "commit", "-q", "-m", message)


def push(root: Path, branch: str, remote: str) -> None:
    try:
        _git(root, "push", "-q", "--force", remote, f"HEAD:refs/heads/{branch}")
    except RefreshError as error:
        raise RefreshError(f"{error}. Pushing the branch {branch} needs a token with Contents: Read and write: "
                           "pins.yml grants it to the workflow's own token (an organization may cap workflow tokens "
                           f"at read: {WORKFLOW_PERMISSIONS}), or store a token with {TOKEN_RIGHTS} as "
                           f"the secret {PINS_TOKEN}") from None


def forbidden(error: GitHubError, token_secret: str) -> str:
    """What to change when GitHub answers 403 to opening the pull request: the setting, or the
    secret (`token_secret`: where the token came from, "" for the workflow's own)."""
    said = f"GitHub refused the pull request ({error})"
    if token_secret:
        return (f"{said}, made with the secret {token_secret}: that token needs {TOKEN_RIGHTS}; store one that has "
                f"them as {token_secret}")
    return (f"{said}. The workflow's own token may open pull requests only when the repository allows it, which it "
            f"does not by default: turn on {PULLS_SETTING}, or store a fine-grained personal access token with "
            f"{TOKEN_RIGHTS} as the secret {PINS_TOKEN} (then CI also runs on the pull request)")


def refused_summary(message: str, branch: str, where: Where, heading: str, diff: str) -> str:
    """The job summary when the pull request was refused: everything needed to review the change."""
    if len(diff) > SUMMARY_DIFF_LIMIT:
        diff = diff[:SUMMARY_DIFF_LIMIT] + f"\n... (cut at {SUMMARY_DIFF_LIMIT} characters: the branch has it all)\n"
    return "\n".join([
        f"## {heading}: pull request not opened", "", message, "",
        f"- the change is on the branch `{branch}` (pushed)",
        f"- open the pull request from it: {where.compare(branch)} (title and body come from its commit)", "",
        "```diff", diff.rstrip("\n"), "```", ""])


def refresh(github: GitHub, root: Path, where: Where, remote: str, branch: str, say: Any, *, engines: str = "all",
            token_secret: str = "", summarize: Callable[[str], None] = lambda markdown: None) -> int:
    """Commit and push the engine.toml changes, then open or update their pull request;
    `summarize` takes the job summary's Markdown."""
    files = changed_files(root)
    if not files:
        say("scons lock changed no engine.toml: nothing to commit, no pull request")
        return 0
    changes = describe(root, files)
    branch = branch or default_branch(changes)
    text, heading = body(changes, still_unpinned(root, engines), where.run_url), title(changes)
    # Read before anything is written: a token that cannot even list pull requests fails here,
    # with the branch untouched.
    existing = github.find_pull(branch, where.base)
    commit(root, files, branch, f"{heading}\n\n{text}")
    push(root, branch, remote)
    say(f"pushed {branch} (replacing what a previous run pushed there)")
    try:
        if existing is not None:
            pull = github.update_pull(existing, title=heading, body=text)
        else:
            pull = github.open_pull(branch, where.base, heading, text)
    except GitHubError as error:
        if error.status != 403 or type(error) is not GitHubError:  # a subclass (a rate limit) is no refusal
            raise
        message = forbidden(error, token_secret)
        say(annotation("warning", "pull request not opened", f"{message}. Open it from {where.compare(branch)}"))
        summarize(refused_summary(message, branch, where, heading,
                                  _git(root, "diff", "HEAD~1", "HEAD", "--", ENGINE_FILES)))
        return 0
    done = "updated" if existing is not None else "opened"
    say(f"{done} pull request #{pull['number']}: {pull.get('html_url', '')}")
    summarize(f"{heading}: {done} pull request #{pull['number']}: {pull.get('html_url', '')}")
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="python -m backends.ci.pin_refresh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", required=True, help="owner/name")
    parser.add_argument("--base", required=True, help="the branch the pull request goes into")
    parser.add_argument("--remote", default="origin", help="where the branch is pushed (default origin)")
    parser.add_argument("--branch", default="", help="the pull request's branch (default pins/<engines>)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (default .)")
    parser.add_argument("--engine", default="all", help="the engine= selection `scons lock` ran on (default all): "
                                                        "its inputs still unpinned are listed in the pull request")
    parser.add_argument("--token-secret", default="",
                        help=f"the repository secret the token came from (e.g. {PINS_TOKEN}); empty for the "
                             "workflow's own token. Names what to fix when GitHub refuses the pull request")
    add_api_arguments(parser)
    args = parser.parse_args(argv)
    token = environ.get(args.token_env, "")
    say = redacting_printer(token)

    try:
        if not token:
            raise RefreshError(f"${args.token_env} is empty; it must hold a token with contents: write and "
                               "pull-requests: write")
        return refresh(GitHub(args.api, args.repo, token), args.root, Where.of(args.repo, args.base, environ),
                       args.remote, args.branch, say, engines=args.engine, token_secret=args.token_secret,
                       summarize=lambda markdown: write_summary(markdown.replace(token, "***"), environ))
    except (RefreshError, GitHubError, DataError) as error:
        say(f"error: {error}", sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
