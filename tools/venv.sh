# Sourced by the tools/ scripts: the Python environment the project runs in. An active
# virtual environment is used as it is; otherwise the project's own .venv (tools/setup.sh
# creates it). Never the system's Python: Debian and Ubuntu refuse pip there (PEP 668).
if [ -n "${VIRTUAL_ENV:-}" ]; then
  PROJECT_VENV=$VIRTUAL_ENV
else
  PROJECT_VENV=$PWD/.venv
fi
PROJECT_PYTHON=$PROJECT_VENV/bin/python

# True when the interpreter runs and is Python 3.11 or newer (tomllib is in the standard library).
python_is_recent() {
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
