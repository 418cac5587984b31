#!/usr/bin/env bash
# The README's main job: set up, then build, verify and smoke-test a real archive,
# dist/libtorch-2.13.0-Linux-x86_64-shared.zip, from PyTorch's CPU wheel on PyPI
# (taken as the leg's upstream origin; the build never reaches download.pytorch.org).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
source tools/venv.sh
mkdir -p .cache/wheels
"$PROJECT_PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d .cache/wheels torch==2.13.0
wheel=$(realpath "$(ls .cache/wheels/torch-2.13.0*-manylinux*_x86_64.whl | head -1)")
"$PROJECT_PYTHON" -m SCons -Q libtorch-linux-x86_64-shared version=2.13.0 origin="$wheel" "$@"
