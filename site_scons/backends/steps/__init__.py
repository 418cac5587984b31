"""The steps of a leg, one module per kind of step (fetch, git, extract, source, upstream,
stage, bundle, universal, fixups, sign, sbom, manifest, archive, verify and its checks/, smoke,
publish, ...), generic: a step knows no engine by name, the plan tells it what to do. The graph
(backends/graph/declare.py) wires them. May import `util`, `model`, `binfmt`, `runner`,
`probes` and `pins`.
"""

# Bump when a step's implementation changes what it produces: every step reruns, and every
# leg key (backends/cache/key.py) changes, so no binary cache entry of the old steps is reused.
STEP_VERSION = 4

# A leg's own steps, each recorded in build/legs/<leg id>/steps/<step>.json (the shared
# downloads, extractions and source trees are recorded under build/ by kind).
LEG_STEPS = ("build", "stage", "merge", "archive", "verify", "smoke", "publish", "store", "restore")
