"""One declarative schema for the data files (`engine.toml`, `variants/*.toml`).

A table is read against `Field`s (name, check, default): unknown keys are refused naming
the nearest valid one, a missing field takes its default or is refused as required, and
every value passes its check (type, allowed values, pattern, non-empty list) once, where it
enters. A new field is validated by being declared. Errors name the file and the row.

The version grammar lives here too: `VERSION`, `version_problem` and `check_version`.
"""
from __future__ import annotations

import re
import string
import urllib.parse
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from backends.util.errors import BackendsError
from backends.util.spelling import suggest


class DataError(BackendsError, ValueError):
    """The project's own data files are inconsistent."""


# (value, label, where) -> the value as the model holds it; raises DataError naming `where`.
Check = Callable[[Any, str, str], Any]
REQUIRED = object()


@dataclass(frozen=True)
class Field:
    name: str
    check: Check
    default: object = REQUIRED


def refuse_unknown(keys: Iterable[str], valid: Sequence[str], where: str) -> None:
    unknown = sorted(set(keys) - set(valid))
    if unknown:
        named = ", ".join(f"{key}{suggest(key, valid)}" for key in unknown)
        raise DataError(f"{where}: unknown fields {named}; fields: {', '.join(valid)}")


def read(raw: object, fields: Sequence[Field], where: str, *, partial: bool = False) -> dict[str, Any]:
    """`raw` checked against `fields`; `partial`: only the fields present (a [defaults] table)."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: must be a table, not {raw!r}")
    refuse_unknown(raw, [f.name for f in fields], where)
    values: dict[str, Any] = {}
    for field in fields:
        if field.name in raw:
            values[field.name] = field.check(raw[field.name], field.name, where)
        elif field.default is REQUIRED and not partial:
            raise DataError(f"{where}: the required field {field.name!r} is missing")
        elif not partial:
            values[field.name] = field.default
    return values


# -- checks ---------------------------------------------------------------------------------

def _type_error(value: object, label: str, where: str, expected: str) -> DataError:
    return DataError(f"{where}: {label} must be {expected}, not {value!r}")


def text(value: object, label: str, where: str) -> str:
    if not isinstance(value, str):
        raise _type_error(value, label, where, "a string")
    return value


def boolean(value: object, label: str, where: str) -> bool:
    if not isinstance(value, bool):  # TOML's true/false, never "false" or 1
        raise _type_error(value, label, where, "a boolean (true or false)")
    return value


def hours(value: object, label: str, where: str) -> float:
    """A positive number of hours, as TOML writes it (5 or 5.5), at most a day."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 24:
        raise DataError(f"{where}: {label} must be a number of hours above 0 and at most 24 (such as 5.5), "
                        f"not {value!r}")
    return float(value)


def table(value: object, label: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _type_error(value, label, where, "a table")
    return value


def matching(pattern: str, refusal: str) -> Check:
    """A string that `pattern` (ASCII) matches in full; `refusal` says what is valid
    ("must be one plain file name ...")."""
    compiled = re.compile(pattern, re.ASCII)

    def check(value: object, label: str, where: str) -> str:
        if not compiled.fullmatch(text(value, label, where)):
            raise DataError(f"{where}: {label} {value!r} {refusal}")
        return value  # type: ignore[return-value]
    return check


def one_of(allowed: Iterable[str]) -> Check:
    allowed = tuple(allowed)

    def check(value: object, label: str, where: str) -> str:
        if text(value, label, where) not in allowed:
            raise DataError(f"{where}: {label} {value!r} is not one of {', '.join(allowed)}")
        return value  # type: ignore[return-value]
    return check


def list_of(item: Check) -> Check:
    """A non-empty list, each entry checked: an empty list would silently remove what it lists."""
    def check(value: object, label: str, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _type_error(value, label, where, "a list")
        if not value:
            raise DataError(f"{where}: {label} is an empty list: give at least one value")
        return tuple(item(entry, f"{label} entry", where) for entry in value)
    return check


def one_or_more(item: Check) -> Check:
    """A value or a non-empty list of values, as a tuple."""
    listed = list_of(item)

    def check(value: object, label: str, where: str) -> tuple[Any, ...]:
        return listed(value, label, where) if isinstance(value, list) else (item(value, label, where),)
    return check


def table_of(value_check: Check, key_check: Check | None = None,
             by_key: Mapping[str, Check] | None = None) -> Check:
    """A table whose keys pass `key_check` and whose values pass `value_check`, or the check
    `by_key` declares for that key; read-only."""
    def check(value: object, label: str, where: str) -> Mapping[str, Any]:
        checked = {}
        for key, entry in table(value, label, where).items():
            if key_check is not None:
                key_check(key, f"{label} key", where)
            dotted = f"{label}.{key}" if IDENTIFIER.fullmatch(key) else f'{label}."{key}"'  # TOML's spelling
            checked[key] = (by_key or {}).get(key, value_check)(entry, dotted, where)
        return MappingProxyType(checked)
    return check


def template(value_check: Check) -> Check:
    """A `str.format` template (`v{version}`): placeholders are plain names, never attribute
    or index lookups; `value_check` sees the text with each placeholder as `x`."""
    def check(value: object, label: str, where: str) -> str:
        try:
            parts = list(string.Formatter().parse(text(value, label, where)))
        except ValueError as error:
            raise DataError(f"{where}: {label} {value!r} is not a template such as v{{version}}: {error}") from None
        for _, name, spec, conversion in parts:
            if name is not None and (not IDENTIFIER.fullmatch(name) or spec or conversion):
                raise DataError(f"{where}: {label} {value!r}: placeholder {{{name}}} must be a plain name such as "
                                "{version} (letters, digits, _)")
        value_check("".join(literal + ("x" if name is not None else "") for literal, name, _, _ in parts), label, where)
        return value  # type: ignore[return-value]
    return check


def url(schemes: Sequence[str] = ("http", "https")) -> Check:
    def check(value: object, label: str, where: str) -> str:
        address = text(value, label, where)
        parsed = urllib.parse.urlsplit(address)
        if parsed.scheme not in schemes or not (parsed.netloc or parsed.scheme == "file") or not WORD.fullmatch(address):
            raise DataError(f"{where}: {label} {value!r} must be a {' or '.join(f'{s}://' for s in schemes)} URL")
        return address
    return check


def optional(check: Check) -> Check:
    """`check`, or the empty string for "none"."""
    return lambda value, label, where: value if value == "" else check(value, label, where)


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
LINE = re.compile(r"[^\x00-\x1f\x7f]+")  # one line of text: no newlines or control characters
WORD = re.compile(r"[!-~]+")  # printable ASCII without spaces
# Every value that becomes part of a path (versions, library names, package dirs, params).
PATH_COMPONENT = r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._+-]*"
path_component = matching(PATH_COMPONENT, "must be one plain file name (letters, digits, . _ + -; "
                                           "no separators, no '..')")
identifier = matching(IDENTIFIER.pattern, "must be a name of letters, digits and _ (not starting with a digit)")
line = matching(LINE.pattern, "must be one line of text (no newlines or control characters)")


def template_name(value: object, label: str, where: str) -> str:
    """A name a template can use (`{android_api}`); `version` is the engine's own and stays so."""
    if identifier(value, label, where) == "version":
        raise DataError(f"{where}: {label} 'version' would replace the version in every template; "
                        "set the version field instead")
    return value  # type: ignore[return-value]


# -- versions -----------------------------------------------------------------------------

_NUMBERS = r"(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*"
# An engine may declare a suffix (`rc1`, `+cpu`, `.post1`) in its version_pattern; the
# grammar admits one that starts unlike a number, so `1.26.00` never passes as `1.26.0` + `0`.
_SUFFIX = r"(?:[A-Za-z]|[-+_][A-Za-z0-9]|\.[A-Za-z])[A-Za-z0-9]*(?:[-+._][A-Za-z0-9]+)*"
VERSION = re.compile(rf"{_NUMBERS}(?:{_SUFFIX})?", re.ASCII)
DEFAULT_VERSION_PATTERN = r"[0-9]+\.[0-9]+\.[0-9]+"
_LEADING_NUMBERS = re.compile(r"[0-9]+(?:\.[0-9]+)*", re.ASCII)


def version_problem(value: str) -> str:
    """What is wrong with `value` as a version, "" when nothing (for messages of any origin)."""
    if VERSION.fullmatch(value):
        return ""
    if not value.isascii():
        return "has non-ASCII characters: a version is ASCII digits and dots such as 1.26.0"
    numbers = _LEADING_NUMBERS.match(value)
    if numbers:
        canonical = ".".join(str(int(part)) for part in numbers.group(0).split(".")) + value[numbers.end():]
        if canonical != value and VERSION.fullmatch(canonical):
            return f"has a leading zero: write {canonical!r}, its canonical spelling"
    return ("is not a version such as 1.26.0 (digits and dots without leading zeros, then a suffix such as "
            "rc1 or +cpu where the engine's version_pattern allows it; no separators, spaces or '..')")


def check_version(value: object, where: str, label: str = "version") -> str:
    """`value`, refused with a DataError naming `where` unless it is a version."""
    problem = version_problem(text(value, label, where))
    if problem:
        raise DataError(f"{where}: {label} {value!r} {problem}")
    return value  # type: ignore[return-value]


def version(value: object, label: str, where: str) -> str:
    return check_version(value, where, label)


@dataclass(frozen=True)
class VersionPattern:
    """An engine's `version_pattern`, matched within the grammar: a version satisfies both,
    so a pattern such as `.*` can narrow the grammar but never widen it."""

    pattern: str

    def __post_init__(self) -> None:
        re.compile(self.pattern, re.ASCII)  # re.error for a malformed pattern

    def fullmatch(self, value: str) -> bool:
        return bool(VERSION.fullmatch(value)) and bool(re.fullmatch(self.pattern, value, re.ASCII))


def version_pattern(value: object, label: str, where: str) -> VersionPattern:
    try:
        return VersionPattern(text(value, label, where))
    except re.error as error:
        raise DataError(f"{where}: {label} {value!r} is not a regular expression ({error}); "
                        f"the default is {DEFAULT_VERSION_PATTERN}") from None
