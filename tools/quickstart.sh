#!/usr/bin/env bash
# The README's main job: set up, then build, verify and smoke-test a real archive,
# dist/libtorch-2.13.0-Linux-x86_64-shared.zip, from PyTorch's CPU wheel
# (taken as the leg's upstream origin; the build never reaches download.pytorch.org).
#   [TORCH_INDEX_URL=<index>] bash tools/quickstart.sh [scons options...]
# TORCH_INDEX_URL is the package index pip takes the wheel from; unset, pip's own configuration
# decides (PyPI unless pip.conf names another index). PyPI's Linux torch wheels are CUDA
# builds, so elsewhere give PyTorch's CPU index: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The wheel is downloaded once into .cache/wheels (delete it there to download again).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0
WHEELS=.cache/wheels
bash tools/setup.sh
# shellcheck source=tools/venv.sh
source tools/venv.sh

find_wheel() {
  if [ -d "$WHEELS" ]; then
    find "$WHEELS" -maxdepth 1 -name "torch-$TORCH_VERSION*-manylinux*_x86_64.whl" | sort | head -1
  fi
}

wheel=$(find_wheel)
if [ -z "$wheel" ]; then
  index=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then index=(--index-url "$TORCH_INDEX_URL"); fi
  mkdir -p "$WHEELS"
  "$PROJECT_PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    "${index[@]}" -d "$WHEELS" "torch==$TORCH_VERSION"
  wheel=$(find_wheel)
  if [ -z "$wheel" ]; then
    echo "tools/quickstart.sh: pip downloaded no Linux x86_64 wheel of torch $TORCH_VERSION into $WHEELS;" \
      "give PyTorch's CPU index: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash tools/quickstart.sh" >&2
    exit 1
  fi
fi
# -j2: the smoke's compile runs beside archive and verify (docs/decisions.md); a later -j wins.
"$PROJECT_PYTHON" -m SCons -Q -j2 libtorch-linux-x86_64-shared version="$TORCH_VERSION" origin="$(realpath "$wheel")" "$@"
