#!/usr/bin/env python3
"""Export the ExecuTorch smoke model: add.pte computes x + y for two float[3] inputs.

The path is the plain one the smoke needs and nothing more:
torch.export.export -> executorch.exir.to_edge -> to_executorch, with no delegate, so
the program runs on any package's CPU kernels (portable or optimized).

Writes, next to this script unless --out-dir is given:
  add.pte       the program
  add.pte.json  {"executorch": <version>, "torch": <version>, "sha256": <of add.pte>}

Run it in an environment holding torch and executorch, for example:
  python3 -m venv /tmp/etvenv
  /tmp/etvenv/bin/pip install torch==2.13.0 executorch==1.3.1
  /tmp/etvenv/bin/python smoke/executorch/export_add.py

The versions recorded are the ones that actually exported the file, so a reader can tell
whether add.pte came from the pinned ExecuTorch or from a stand-in combination.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from importlib import metadata
from pathlib import Path


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def export(out_dir: Path) -> Path:
    import torch
    from executorch.exir import to_edge

    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    example = (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 3.0, 4.0]))
    exported = torch.export.export(Add().eval(), example)
    program = to_edge(exported).to_executorch()
    data = bytes(program.buffer)

    out_dir.mkdir(parents=True, exist_ok=True)
    pte = out_dir / "add.pte"
    pte.write_bytes(data)
    info = {
        "executorch": _dist_version("executorch"),
        "torch": torch.__version__,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (out_dir / "add.pte.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return pte


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    pte = export(args.out_dir)
    print(f"wrote {pte} ({pte.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
