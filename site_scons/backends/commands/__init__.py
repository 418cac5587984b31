"""What the command line asks for: the options and their checks (options), one invocation
resolved from them (invocation), the reports (report: list, plan=1, key=1, ci-matrix, a bare
scons), `scons lock`, `scons affected`, `scons -c`, `scons gc=1`, cache-keygen and the host
set-up command. May import every floor up to `graph`.
"""
