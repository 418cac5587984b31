"""Shared test setup: make the project's importable package visible to pytest."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "site_scons"))
sys.path.insert(0, str(ROOT / "tests"))  # shared helpers: scratch.py
