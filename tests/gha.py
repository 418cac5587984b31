"""GitHub Actions' own rules, for tests that run the workflows' steps the way a runner does.

- The shell of a `run:` step: `shell:` on the step, else the job's then the workflow's
  `defaults.run.shell`, else the runner's default. GitHub expands each name to its own
  command line: an unnamed shell on Linux or macOS is `bash -e {0}` (no pipefail), while
  `shell: bash` is `bash --noprofile --norc -eo pipefail {0}`. A test that runs a step with
  another command line hides what the runner would do.
- `${{ }}` expressions, the subset the workflows use, with GitHub's semantics: `false`, `0`,
  `-0`, `''`, `null` and NaN are falsy; `&&` and `||` return an operand, not a boolean (so
  `x && 0 || 1` is always 1); `==` compares strings ignoring case and other types as
  numbers; a missing property is `null`.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"

# What GitHub runs for each shell name (docs: "jobs.<job_id>.steps[*].shell").
SHELLS: Mapping[str, str] = {
    "bash": "bash --noprofile --norc -eo pipefail {0}",
    "sh": "sh -e {0}",
    "pwsh": "pwsh -command \". '{0}'\"",
    "powershell": "powershell -command \". '{0}'\"",
    "python": "python {0}",
    "cmd": "%ComSpec% /D /E:ON /V:OFF /S /C \"CALL \"{0}\"\"",
}
UNNAMED_POSIX = "bash -e {0}"  # no `shell:` anywhere, on a Linux or macOS runner
UNNAMED_WINDOWS = SHELLS["pwsh"]


def load(name: str, text: str | None = None) -> dict[Any, Any]:
    """A workflow as YAML reads it (`on` comes back as the key True: YAML 1.1)."""
    document = yaml.safe_load(text if text is not None else (WORKFLOWS / name).read_text())
    assert isinstance(document, dict), name
    return document


def triggers(workflow: Mapping[Any, Any]) -> dict[str, Any]:
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return {event: None for event in on}
    return dict(on or {})


def shell_template(workflow: Mapping[Any, Any], job: Mapping[Any, Any], step: Mapping[Any, Any]) -> str | None:
    """GitHub's command line for a `run:` step ({0}: the script file); None where the runner
    is a matrix value, so the default depends on its OS (pwsh on Windows)."""
    for shell in (step.get("shell"), _default(job), _default(workflow)):
        if shell:
            return SHELLS.get(str(shell), str(shell) if "{0}" in str(shell) else f"{shell} {{0}}")
    runs_on = str(job.get("runs-on", ""))
    if "${{" in runs_on:
        return None
    return UNNAMED_WINDOWS if runs_on.startswith("windows") else UNNAMED_POSIX


def _default(node: Mapping[Any, Any]) -> object:
    return ((node.get("defaults") or {}).get("run") or {}).get("shell")


@dataclass(frozen=True)
class Step:
    workflow_name: str
    job_name: str
    body: Mapping[str, Any]
    shell: str | None  # GitHub's command line, as shell_template gives it

    @property
    def name(self) -> str:
        return str(self.body.get("name", self.body.get("id", self.body.get("uses", ""))))

    @property
    def run(self) -> str:
        return str(self.body.get("run", ""))

    def where(self) -> str:
        return f"{self.workflow_name}: job {self.job_name}, step {self.name!r}"


def steps(workflow_name: str, job_name: str, workflow: Mapping[Any, Any] | None = None) -> list[Step]:
    workflow = workflow if workflow is not None else load(workflow_name)
    job = workflow["jobs"][job_name]
    return [Step(workflow_name, job_name, step, shell_template(workflow, job, step) if "run" in step else None)
            for step in job.get("steps", [])]


def all_steps(workflows: Mapping[str, Mapping[Any, Any]] | None = None) -> Iterator[Step]:
    loaded = workflows if workflows is not None else {path.name: load(path.name)
                                                      for path in sorted(WORKFLOWS.glob("*.yml"))}
    for name, workflow in loaded.items():
        for job_name in workflow["jobs"]:
            yield from steps(name, job_name, workflow)


def step(workflow_name: str, job_name: str, starts: str, workflow: Mapping[Any, Any] | None = None) -> Step:
    """The job's step whose name starts with `starts` (or whose id is it)."""
    for candidate in steps(workflow_name, job_name, workflow):
        if candidate.name.startswith(starts) or candidate.body.get("id") == starts:
            return candidate
    raise KeyError(f"{workflow_name}: job {job_name} has no step {starts!r}")


def run(step: Step, env: Mapping[str, str], cwd: Path, scratch: Path,
        path: Sequence[Path] = ()) -> subprocess.CompletedProcess[str]:
    """The step's `run:` as GitHub runs it: written to a file, run with the step's shell, in
    `cwd`, with the environment plus `env`; `path` directories first on PATH."""
    assert step.shell is not None, f"{step.where()}: its shell depends on the runner's OS"
    scratch.mkdir(parents=True, exist_ok=True)
    script = scratch / f"step-{abs(hash(step.where()))}.sh"
    script.write_text(step.run)
    argv = shlex.split(step.shell.replace("{0}", shlex.quote(str(script))))
    environ = {**os.environ, **env}
    environ["PATH"] = os.pathsep.join([*map(str, path), environ.get("PATH", os.defpath)])
    return subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, text=True)


# -- expressions -----------------------------------------------------------------------------------

class ExpressionError(ValueError):
    """Text that is no expression of the subset evaluated here."""


TOKEN = re.compile(r"""\s*(?:
    (?P<number>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?))
  | (?P<string>'(?:[^']|'')*')
  | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\].,])
  | (?P<name>[A-Za-z_][A-Za-z0-9_-]*)
)""", re.VERBOSE)
TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


@dataclass(frozen=True)
class Literal:
    value: object


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Index:
    target: object
    key: object  # a node


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[object, ...]


@dataclass(frozen=True)
class Unary:
    op: str
    operand: object


@dataclass(frozen=True)
class Binary:
    op: str
    left: object
    right: object


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = TOKEN.match(text, at)
        if not match or match.end() == at:
            raise ExpressionError(f"cannot read {text[at:]!r} in {text!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        at = match.end()
    return tokens


class _Parser:
    PRECEDENCE = (("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="))

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def parse(self) -> object:
        node = self._binary(0)
        if self.at != len(self.tokens):
            raise ExpressionError(f"unexpected {self.tokens[self.at][1]!r} in {self.text!r}")
        return node

    def _peek(self) -> str:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else ""

    def _take(self, expected: str = "") -> tuple[str, str]:
        if self.at >= len(self.tokens) or (expected and self.tokens[self.at][1] != expected):
            raise ExpressionError(f"expected {expected or 'more'} in {self.text!r}")
        self.at += 1
        return self.tokens[self.at - 1]

    def _binary(self, level: int) -> object:
        if level == len(self.PRECEDENCE):
            return self._unary()
        node = self._binary(level + 1)
        while self._peek() in self.PRECEDENCE[level] and self.tokens[self.at][0] == "op":
            op = self._take()[1]
            node = Binary(op, node, self._binary(level + 1))
        return node

    def _unary(self) -> object:
        if self._peek() == "!":
            self._take()
            return Unary("!", self._unary())
        return self._postfix(self._primary())

    def _primary(self) -> object:
        kind, text = self._take()
        if kind == "number":
            return Literal(float(int(text, 16)) if text.lower().startswith(("0x", "-0x")) else float(text))
        if kind == "string":
            return Literal(text[1:-1].replace("''", "'"))
        if text == "(":
            node = self._binary(0)
            self._take(")")
            return node
        if kind != "name":
            raise ExpressionError(f"unexpected {text!r} in {self.text!r}")
        if text in ("true", "false"):
            return Literal(text == "true")
        if text == "null":
            return Literal(None)
        if self._peek() == "(":
            self._take("(")
            args = []
            while self._peek() != ")":
                args.append(self._binary(0))
                if self._peek() == ",":
                    self._take(",")
            self._take(")")
            return Call(text.lower(), tuple(args))
        return Name(text)

    def _postfix(self, node: object) -> object:
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                node = Index(node, Literal(self._take()[1]))
            else:
                node = Index(node, self._binary(0))
                self._take("]")
        return node


def parse(text: str) -> object:
    return _Parser(text).parse()


def truthy(value: object) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def _number(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(int(value, 16)) if value.strip().lower().startswith("0x") else float(value.strip() or 0)
        except ValueError:
            return math.nan
    return math.nan


def _equal(left: object, right: object) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    if type(left) is type(right) and isinstance(left, (dict, list)):
        return left is right
    if isinstance(left, (dict, list)) or isinstance(right, (dict, list)):
        return False
    return _number(left) == _number(right)


def text(value: object) -> str:
    """A value as GitHub puts it into a string (an interpolation, an input, an env value)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, indent=2)
    return str(value)


STATUS_FUNCTIONS: Mapping[str, Callable[[str], bool]] = {
    "success": lambda status: status == "success",
    "failure": lambda status: status == "failure",
    "cancelled": lambda status: status == "cancelled",
    "always": lambda status: True,
}


def evaluate(node: object, context: Mapping[str, Any]) -> object:
    """The value of a parsed expression in `context` (github, inputs, secrets, steps, ...;
    `job.status` for the status functions)."""
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Name):
        return context.get(node.name)
    if isinstance(node, Index):
        target, key = evaluate(node.target, context), evaluate(node.key, context)
        if isinstance(target, dict):
            return next((v for k, v in target.items() if str(k).casefold() == text(key).casefold()), None)
        if isinstance(target, list) and isinstance(key, float) and key.is_integer() and 0 <= key < len(target):
            return target[int(key)]
        return None
    if isinstance(node, Unary):
        return not truthy(evaluate(node.operand, context))
    if isinstance(node, Binary):
        left = evaluate(node.left, context)
        if node.op == "&&":
            return evaluate(node.right, context) if truthy(left) else left
        if node.op == "||":
            return left if truthy(left) else evaluate(node.right, context)
        right = evaluate(node.right, context)
        if node.op in ("==", "!="):
            return _equal(left, right) == (node.op == "==")
        a, b = _number(left), _number(right)
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[node.op]
    if isinstance(node, Call):
        return _call(node, context)
    raise ExpressionError(f"not an expression node: {node!r}")


def _call(node: Call, context: Mapping[str, Any]) -> object:
    if node.function in STATUS_FUNCTIONS:
        return STATUS_FUNCTIONS[node.function](str((context.get("job") or {}).get("status", "success")))
    args = [evaluate(arg, context) for arg in node.args]
    if node.function == "startswith":
        return text(args[0]).casefold().startswith(text(args[1]).casefold())
    if node.function == "endswith":
        return text(args[0]).casefold().endswith(text(args[1]).casefold())
    if node.function == "contains":
        if isinstance(args[0], list):
            return any(_equal(item, args[1]) for item in args[0])
        return text(args[1]).casefold() in text(args[0]).casefold()
    if node.function == "format":
        return re.sub(r"\{(\d+)\}", lambda m: text(args[1 + int(m.group(1))]), text(args[0]))
    if node.function == "join":
        items = args[0] if isinstance(args[0], list) else [args[0]]
        return (text(args[1]) if len(args) > 1 else ",").join(text(item) for item in items)
    if node.function == "tojson":
        return json.dumps(args[0], indent=2)
    if node.function == "fromjson":
        return _from_json(text(args[0]))
    if node.function == "hashfiles":
        return context.get("hashFiles", "0" * 64)
    raise ExpressionError(f"function {node.function}() is not evaluated here")


def _from_json(source: str) -> object:
    try:
        value = json.loads(source)
    except json.JSONDecodeError as error:
        raise ExpressionError(f"fromJSON({source!r}): {error}") from None  # GitHub fails the job here
    return _numbers_as_floats(value)


def _numbers_as_floats(value: object) -> object:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [_numbers_as_floats(item) for item in value]
    assert isinstance(value, dict)
    return {key: _numbers_as_floats(item) for key, item in value.items()}


def render(value: object, context: Mapping[str, Any]) -> object:
    """A workflow value: one whole `${{ }}` gives the expression's value, a string with
    expressions inside gives the string with each replaced by its text, anything else is
    itself."""
    if not isinstance(value, str):
        return value
    whole = TEMPLATE.fullmatch(value.strip())
    if whole:
        return evaluate(parse(whole.group(1)), context)
    return TEMPLATE.sub(lambda m: text(evaluate(parse(m.group(1)), context)), value)


def condition(value: object, context: Mapping[str, Any]) -> bool:
    """An `if:`: an expression with or without `${{ }}`; status functions absent means
    `success() && (...)`, as GitHub adds it."""
    if isinstance(value, bool):
        return value
    source = str(value).strip()
    whole = TEMPLATE.fullmatch(source)
    source = whole.group(1) if whole else source
    node = parse(source)
    result = truthy(evaluate(node, context))
    if not _calls_status(node):
        result = result and STATUS_FUNCTIONS["success"](str((context.get("job") or {}).get("status", "success")))
    return result


def _calls_status(node: object) -> bool:
    if isinstance(node, Call):
        return node.function in STATUS_FUNCTIONS or any(_calls_status(arg) for arg in node.args)
    if isinstance(node, Unary):
        return _calls_status(node.operand)
    if isinstance(node, Binary):
        return _calls_status(node.left) or _calls_status(node.right)
    if isinstance(node, Index):
        return _calls_status(node.target) or _calls_status(node.key)
    return False


def constant_choices(node: object) -> Iterator[Binary]:
    """Every `a && <falsy literal> || b` inside `node`: GitHub always returns b there."""
    if isinstance(node, Binary):
        if (node.op == "||" and isinstance(node.left, Binary) and node.left.op == "&&"
                and isinstance(node.left.right, Literal) and not truthy(node.left.right.value)):
            yield node
        yield from constant_choices(node.left)
        yield from constant_choices(node.right)
    elif isinstance(node, Unary):
        yield from constant_choices(node.operand)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from constant_choices(arg)
    elif isinstance(node, Index):
        yield from constant_choices(node.target)
        yield from constant_choices(node.key)


def expressions(node: object) -> Iterator[str]:
    """The source of every `${{ }}` in a loaded workflow, and every `if:` value."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "if" and isinstance(value, str) and not TEMPLATE.search(value):
                yield value
            yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)
    elif isinstance(node, str):
        yield from (match.group(1) for match in TEMPLATE.finditer(node))
