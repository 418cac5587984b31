"""What a failed network-off command is said to have tried: the URLs of its output, once each."""
from __future__ import annotations

from backends.runner.network import isolated, urls_in


def test_urls_in_output_once_each_without_trailing_punctuation() -> None:
    lines = ["-- Downloading https://github.com/abseil/abseil-cpp/archive/x.zip.",
             "error: downloading 'https://github.com/abseil/abseil-cpp/archive/x.zip' failed",
             "Could not resolve host (git://example.org/repo); see http://127.0.0.1:9/a,"]
    assert urls_in(lines) == ["https://github.com/abseil/abseil-cpp/archive/x.zip", "git://example.org/repo",
                              "http://127.0.0.1:9/a"]


def test_isolated_prefixes_argv_only_where_the_host_can() -> None:
    assert isolated(["cmake", "--build", "b"], ("unshare", "-n", "--")) == ["unshare", "-n", "--", "cmake", "--build", "b"]
    assert isolated(["cmake"], ()) == ["cmake"]
