"""Helpers at the bottom of the project's floors: the standard library and requests (with its
urllib3) only. Nothing here imports any other module of the project, so everything may import
these; `tests/unit/test_util_http.py` holds the package to that.
"""
