"""Running upstream's commands: argument lists with an allow-listed environment, output teed to
a log with progress, and a supervisor that ends the whole process tree with the run (run,
supervise, containment). May import `util`, `model` and `binfmt`.
"""
