"""The steps of a leg, one module each (see backends/graph.py for how they are wired)."""

# Bump when a step's implementation changes what it produces: every step reruns, and every
# leg key (backends/legkey.py) changes, so no binary cache entry of the old steps is reused.
STEP_VERSION = 3

# A leg's own steps, each recorded in build/legs/<leg id>/steps/<step>.json (the shared
# downloads, extractions and source trees are recorded under build/ by kind).
LEG_STEPS = ("build", "stage", "merge", "archive", "verify", "smoke", "publish", "store", "restore")
