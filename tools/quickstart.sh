#!/usr/bin/env bash
# The README's main job: set up, then build, verify and smoke-test a real archive,
# dist/libtorch-2.13.0-Linux-x86_64-shared.zip, from PyTorch's CPU wheel (the leg's origin:
# the build never reaches download.pytorch.org itself).
#   [TORCH_INDEX_URL=<index>] bash tools/quickstart.sh [scons options...]
# The wheel (torch==2.13.0+cpu) comes from PyTorch's CPU index, https://download.pytorch.org/whl/cpu,
# or, when that does not answer within 10 s, from pip's own configuration (pip.conf: PyPI, a
# mirror, a local wheel); TORCH_INDEX_URL names the one index to take it from instead. It is
# judged by its binaries before anything is extracted (a CUDA build is refused, in one line
# saying what to do), then kept in .cache/wheels (delete it there to download again).
# scons gets exactly `version=2.13.0 origin=<wheel>`: the license texts are optional inputs
# (the wheel brings LICENSE; NOTICE comes with its pin), so the leg has a key and a binary cache
# can store and restore it (docs/binary-cache.md).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0
bash tools/setup.sh
# shellcheck source=tools/venv.sh
source tools/venv.sh
wheel=$("$PROJECT_PYTHON" tools/quickstart_wheel.py "$TORCH_VERSION" .cache/wheels)
# -j2: the smoke's compile runs beside archive and verify (docs/decisions.md); a later -j wins.
"$PROJECT_PYTHON" -m SCons -Q -j2 libtorch-linux-x86_64-shared version="$TORCH_VERSION" origin="$wheel" "$@"
