"""What a failed network-off command is said to have tried: the URLs of its output, once each."""
from __future__ import annotations

from pathlib import Path

from backends.runner.network import isolated, tried_urls, urls_in
from backends.runner.run import _log_header


def test_urls_in_output_once_each_without_trailing_punctuation() -> None:
    lines = ["-- Downloading https://github.com/abseil/abseil-cpp/archive/x.zip.",
             "error: downloading 'https://github.com/abseil/abseil-cpp/archive/x.zip' failed",
             "Could not resolve host (git://example.org/repo); see http://127.0.0.1:9/a,"]
    assert urls_in(lines) == ["https://github.com/abseil/abseil-cpp/archive/x.zip", "git://example.org/repo",
                              "http://127.0.0.1:9/a"]


def test_isolated_prefixes_argv_only_where_the_host_can() -> None:
    assert isolated(["cmake", "--build", "b"], ("unshare", "-n", "--")) == ["unshare", "-n", "--", "cmake", "--build", "b"]
    assert isolated(["cmake"], ()) == ["cmake"]


def test_tried_urls_are_the_last_commands_output_not_its_header_or_earlier_commands(tmp_path: Path) -> None:
    """A step log holds a header per command (argv, and an environment that may name URLs
    such as CI's cache service) before its output, and earlier commands' entries before it."""
    log = tmp_path / "build.log"
    first = _log_header(["cmake", "-S", "."], tmp_path, {"ACTIONS_CACHE_URL": "https://cache.example/a"}, "configure")
    second = _log_header(["cmake", "--build", "b"], tmp_path,
                         {"MIRROR_URL": "https://mirror.example/m", "PATH": "/usr/bin"}, "build")
    log.write_text(first + "-- fetched https://earlier.example/x.zip\n==== [configure] exit code 0 after 1.0 s\n"
                   + second + "error: downloading 'https://github.com/abseil/abseil-cpp/archive/x.zip' failed\n"
                   + "==== [build] exit code 1 after 0.4 s\n")
    assert tried_urls(log) == ["https://github.com/abseil/abseil-cpp/archive/x.zip"]


def test_tried_urls_of_a_log_without_headers_read_all_of_it(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_text("curl: (6) Could not resolve host for https://deps.example/a.tgz\n")
    assert tried_urls(log) == ["https://deps.example/a.tgz"]
