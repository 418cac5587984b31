"""One canonical JSON spelling of plans and settings: what signatures and keys hash."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Mapping


def plain(obj: object) -> object:
    """Dataclasses, mappings, sequences and paths as JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def canonical(obj: object) -> str:
    return json.dumps(plain(obj), sort_keys=True, separators=(",", ":"))


def digest(obj: object) -> str:
    return hashlib.sha256(canonical(obj).encode()).hexdigest()
