"""Pins: what a selection takes from upstream, each input with its pin or the lack of one
(inputs), and writing pins into engine.toml without losing its formatting (engine_toml). May
import `util`, `model`, `binfmt`, `runner` and `probes`.
"""
