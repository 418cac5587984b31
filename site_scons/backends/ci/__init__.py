"""The GitHub workflows' side, run as `python -m backends.ci ...` and `python -m backends.ci.<module>`:
changed engines and the matrix (main), cache hits resolved before runners start (cache_hits),
the release (release), the anira gate and its pins (downstream, anira_pins), the pins pull
request (pin_refresh) and the MSVC environment (msvc_env). The top floor: may import every
other package.
"""
