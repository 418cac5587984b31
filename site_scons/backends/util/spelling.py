"""The "did you mean" of an error that refuses a token."""
from __future__ import annotations

import difflib
from typing import Iterable


def suggest(token: str, valid: Iterable[str]) -> str:
    valid = list(valid)
    close = [v for v in valid if token and v.startswith(token)] or difflib.get_close_matches(token, valid, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
