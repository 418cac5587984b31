"""Loaded by SCons before it reads SConstruct: `scons ci-matrix` prints JSON on stdout, so
SCons' own progress lines ("Reading SConscript files ...") are silenced for it, as -Q does."""
import sys

import SCons.Script.Main

if "ci-matrix" in sys.argv[1:]:
    SCons.Script.Main.progress_display.set_mode(0)
