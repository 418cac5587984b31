"""The data and what follows from it, with no SCons and no I/O beyond reading the project's own
data files: the vocabulary and the platform table, engines (engine.toml), the leg matrix
(variants/*.toml), recipes' plans, contracts, the data schema, and what a CI runner needs for a
leg. May import `util` only.
"""
