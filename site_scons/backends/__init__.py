"""anira-backends' core: packages stacked as floors, each importing only the floors below it.

From the ground up (`LAYERS`; tests/unit/test_layers.py reads every import and fails on one
that runs upwards or closes a cycle):

    util      the standard library and requests only: files, digests, locks, tables, HTTP
    model     the data and what follows from it: legs, platforms, plans, contracts; no I/O
              beyond reading the project's own data files
    binfmt    readers of ELF, Mach-O, COFF/PE, ar and zip files
    runner    running upstream's commands: supervised process trees, logs, progress
    probes    what this host is and has (the platform it runs, its tools, Visual Studio)
    pins      the pins in engines/*/engine.toml: what a selection takes from upstream, and
              writing pins back
    steps     one module per kind of step (fetch, extract, stage, archive, verify, ...),
              generic: no engine names
    cache     leg keys, signatures and trust, and the binary-cache stores
    graph     the only SCons importer: declares each leg's nodes and runs its steps
    commands  what the command line asks for: options, list/plan/key, lock, affected,
              clean, gc, cache-keygen, host set-up
    ci        the GitHub workflows' side: matrix, cache hits, release, the anira gate, pins
              pull requests
"""

LAYERS: tuple[str, ...] = ("util", "model", "binfmt", "runner", "probes", "pins", "steps", "cache", "graph",
                           "commands", "ci")
