"""The SCons layer, and the only package that imports SCons: holds a run's settings (settings),
declares every selected leg's step nodes and their signatures (declare), runs a step when SCons
asks and records what it was built from (actions, records), and prints the end-of-run summary
(summary). May import every floor up to `cache`.
"""
