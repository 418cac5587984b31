"""Static libraries link lazily: a consumer's smoke proves only the symbols it pulls in.
So every symbol a package's static libraries leave undefined must be defined inside the
package (with its shared libraries' exports, per xcframework slice or Android ABI) or be
provided by the OS's link line (engines/contracts.toml [undefined])."""
from __future__ import annotations

import re
from collections import defaultdict

from backends.steps.checks.view import ArchiveView, group_of

# Names whose owner a name tells: C++ (Itanium, MSVC, MSVC imports) and Objective-C classes.
_QUALIFIED = re.compile(r"^(_Z|\?|__imp_\?|OBJC_(CLASS|METACLASS|EHTYPE)_\$_)")
SHOWN = 12


def check_undefined(view: ArchiveView, platform: str, system: tuple[str, ...],
                    internal: tuple[str, ...]) -> list[str]:
    statics = [name for name in view.binaries if view.is_static(name)]
    if not statics:
        return []
    allowed = [re.compile(pattern) for pattern in system]
    defined: dict[str, set[str]] = defaultdict(set)
    undefined: dict[str, dict[str, str]] = defaultdict(dict)
    for library in view.binaries:
        group = group_of(library, platform)
        symbols_defined, symbols_undefined = view.symbols(library)
        defined[group] |= symbols_defined
        if library in statics:
            for symbol in symbols_undefined:
                undefined[group].setdefault(symbol, library)
    problems = []
    for group, references in sorted(undefined.items()):
        dangling = sorted(symbol for symbol in references
                          if symbol not in defined[group] and _must_resolve(symbol, allowed, internal))
        if dangling:
            problems.append(_message(group, dangling, references))
    return problems


def _must_resolve(symbol: str, allowed: list[re.Pattern[str]], internal: tuple[str, ...]) -> bool:
    if _QUALIFIED.match(symbol):
        return not any(pattern.search(symbol) for pattern in allowed)
    return symbol.startswith(internal) if internal else False


def _message(group: str, dangling: list[str], references: dict[str, str]) -> str:
    where = f" (slice {group})" if group else ""
    shown = "; ".join(f"{symbol} (in {references[symbol]})" for symbol in dangling[:SHOWN])
    more = f"; and {len(dangling) - SHOWN} more" if len(dangling) > SHOWN else ""
    return (f"{len(dangling)} undefined symbols{where} that neither the package nor the OS defines: "
            f"the static library is not self-contained: {shown}{more}")


