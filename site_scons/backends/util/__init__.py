"""The bottom floor: helpers that need the standard library and requests (with its urllib3)
only, and import no other package of the project: files and atomic writes, digests and their
cache, file locks and the build tree's lock, text tables, canonical JSON, locations (URLs and
paths), line endings, finding binary tools, and the one HTTP client with the GitHub API on it.
tests/unit/test_layers.py holds the package to that.
"""
