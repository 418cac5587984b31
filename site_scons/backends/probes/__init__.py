"""What this host is and has: its platform (host), what a leg needs of a host (host_needs, with
host_packages.txt naming which package brings which program), what is installed (host_checks,
visual_studio), and probes CI runs before a build (glslc). May import `util`, `model`,
`binfmt` and `runner`.
"""
