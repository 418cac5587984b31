"""Command-line validation: every bad input fails before anything runs, naming what is valid."""
import base64
import hashlib
from pathlib import Path

import pytest

from backends.commands.invocation import resolve
from backends.model.matrix import load_matrix
from backends.model.selection import SelectionError
from backends.model.vocab import canonical_platform
from backends.probes.host import Host

ROOT = Path(__file__).resolve().parents[3]
LINUX = Host("linux", "x86_64")
README = ROOT / "README.md"
ORT_SHARED = "onnxruntime-linux-x86_64-shared"


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(ROOT)


def _resolve(matrix, targets=(), environ=None, host=LINUX, **arguments):
    return resolve(arguments, list(targets), matrix, ROOT, host, environ or {})


def _secret(label: bytes, size: int = 32) -> str:
    """The base64 of a key's bytes, made up but fixed (so a failure is reproducible)."""
    return base64.b64encode(hashlib.sha256(label).digest() * (size // 32)).decode()


# Secrets pasted where a path or a public key belongs: refused, and never shown. The
# environment's key (ANIRA_BINARY_CACHE_KEY) is set for every row of the table too.
SEED = _secret(b"a seed typed on the command line")
SECRET = "ed25519-secret:" + SEED
ENV_SECRET = "ed25519-secret:" + _secret(b"the CI secret in the environment")
NIX_SECRET = "cache.example.org-1:" + _secret(b"a Nix secret key", 64)
URL_TOKEN = "ghp_" + _secret(b"a token pasted into a URL").rstrip("=").replace("+", "A").replace("/", "B")
REDACTED_SECRET = f"<redacted: ed25519-secret:..., {len(SECRET)} characters>"


BAD_INPUTS = [
    ({"bogus": "1"}, (), "unknown option bogus; options: engine, platform"),
    ({"engine": "onnx"}, (), "unknown engine 'onnx' (did you mean onnxruntime?); valid: onnxruntime, libtorch"),
    ({"engine": "tensorflow"}, (), "valid: onnxruntime, libtorch, tflite, litert, executorch"),
    ({"platform": "beos-x86_64"}, (), "unknown platform 'beos-x86_64'"),
    ({"platform": "linux-riscv64"}, (), "unknown platform 'linux-riscv64'"),
    ({"flavor": "rocm"}, (), "unknown flavor 'rocm'; valid: cpu, gpu, cuda"),
    ({"kind": "dynamic"}, (), "unknown kind 'dynamic'; valid: shared, static, xcframework"),
    ({"config": "relwithdebinfo"}, (), "unknown config 'relwithdebinfo'; valid: release, debug"),
    ({"source": "docker"}, (), "unknown source 'docker'"),
    ({"engine": "libtorch", "kind": "static"}, ("list",), "libtorch ships no static legs; kinds: shared"),
    ({"engine": "onnxruntime", "platform": "macos-arm64", "flavor": "cuda"}, ("list",),
     "flavor=cuda exists for onnxruntime on linux-x86_64, windows-x86_64"),
    ({"engine": "litert", "flavor": "gpu"}, ("list",), "litert ships no gpu legs; flavors: cpu"),
    ({"engine": "executorch", "config": "debug"}, ("list",), "executorch ships no debug legs; configs: release"),
    ({"engine": "libtorch", "platform": "wasm"}, ("list",), "libtorch ships no wasm legs; platforms:"),
    ({"offline": "maybe"}, (), "offline='maybe' is not a boolean; use 1 or 0"),
    ({"format": "rar"}, (), "unknown format 'rar'; valid: zip, tar.gz, 7z"),
    ({"heavy_jobs": "0"}, (), "heavy_jobs='0' must be a positive integer"),
    ({"version": "9.9.9"}, ("list",), "version=9.9.9 overrides one engine's pin; the selection has"),
    ({}, ("libtorch-linux-x86_64-static",), "unknown leg 'libtorch-linux-x86_64-static'"),
    ({}, ("list", "ci-matrix"), "choose one of list, ci-matrix"),
    ({"engine": "onnxruntime", "platform": "macos-arm64"}, (),
     "onnxruntime-macos-arm64-static builds on macos-15 (macos-arm64); this host is linux-x86_64"),
    ({"engine": "onnxruntime", "platform": "android-x86_64"}, (),
     "onnxruntime-android-x86_64-static needs the Android NDK (toolchain android): set ANDROID_NDK_HOME"),
    ({"engine": "libtorch", "platform": "linux-aarch64"}, (),
     "libtorch-linux-aarch64-shared builds on ubuntu-24.04-arm (linux-aarch64); this host is linux-x86_64"),
    # Empty values never mean "everything" or "the repository root".
    *[({name: ""}, (), f"{name}= is empty: give a value, or leave the option out")
      for name in ("engine", "platform", "flavor", "cache", "version", "origin", "mirror")],
    # Versions: the engine's own numbers, nothing that could name a path.
    ({"engine": "onnxruntime", "version": "1/../../../../../elsewhere/x"}, (), "no separators, spaces or '..'"),
    ({"engine": "onnxruntime", "version": "\u0661.\u0662\u0666.\u0660"}, (), "has non-ASCII characters"),
    ({"engine": "onnxruntime", "version": "01.26.00"}, (), "has a leading zero: write '1.26.0'"),
    ({"engine": "onnxruntime", "version": "1.26.0/../../../advpub/x"}, (), "is not a version such as 1.26.0"),
    ({"engine": "onnxruntime", "version": "abc def"}, (), "version='abc def' is not a version"),
    ({"engine": "onnxruntime", "version": "v1.27.0"}, (), "version='v1.27.0' is not a version"),
    ({"engine": "onnxruntime", "version": "1.27.0rc1"}, (), "version=1.27.0rc1 is not a onnxruntime version"),
    ({"engine": "onnxruntime", "version": "1.27"}, (), "version=1.27 is not a onnxruntime version"),
    ({"engine": "libtorch", "version": "2.12"}, (), "libtorch versions look like"),
    # Origins: a source of the selection, an existing path of the right type, a URL only with lock=1.
    ({"origin": f"relase={README}"}, (ORT_SHARED,),
     "no source named 'relase' (did you mean release?); their sources: release"),
    ({"origin": f"nosuch={README}"}, (ORT_SHARED,), "no source named 'nosuch'; their sources: release"),
    ({"origin": "/nonexistent/onnxruntime.tgz"}, (ORT_SHARED,), "origin=/nonexistent/onnxruntime.tgz does not exist"),
    ({"origin": "file:///nonexistent/onnxruntime.tgz"}, (ORT_SHARED,), "does not exist"),
    ({"origin": str(ROOT)}, (ORT_SHARED,), f"origin={ROOT} is a directory: the release download is a file"),
    ({"origin": f"source={README}"}, ("onnxruntime-linux-x86_64-static",),
     "is not a directory: the source source is a git repository"),
    ({"origin": "http://example.invalid/onnxruntime-linux-x64-1.26.0.tgz"}, (ORT_SHARED,), "is a URL: add lock=1"),
    ({"origin": "https://example.invalid/x.tgz"}, (ORT_SHARED,), "is a URL: add lock=1"),
    ({"origin": f"{README},{README}"}, (ORT_SHARED,), "origin= names the main download twice"),
    # Leg ids select exactly: a filter beside them is a contradiction, not a refinement.
    ({"engine": "tflite"}, (ORT_SHARED,), "engine=tflite would be ignored"),
    ({"kind": "static"}, (ORT_SHARED,), "kind=static would be ignored"),
    ({"platform": "windows-x64"}, (ORT_SHARED,), "platform=windows-x64 would be ignored"),
    # Targets: commands and leg ids, nothing else (SCons would otherwise write .sconsign for any word).
    ({}, ("build",), "unknown target 'build'; targets are list, ci-matrix, pins, lock, affected, fetch or leg ids"),
    ({}, ("clean",), "unknown target 'clean'"),
    ({}, ("onnxruntime-linux-x64-cuda-static",), "unknown leg 'onnxruntime-linux-x64-cuda-static'"),
    ({}, ("onnxruntime-linux-x86_64-shared-debug",), "(did you mean onnxruntime-linux-x86_64-shared?)"),
    ({"plan": "1", "key": "1"}, (), "choose one of plan=1, key=1"),
    ({"gc": "1"}, ("list",), "choose one of list, gc=1"),
    # Places: the cache, mirrors and binary caches must be what they say.
    ({"cache": str(README)}, (), f"cache={README} is not a directory"),
    ({"mirror": str(README)}, (), "is not a directory (or an http(s)/file URL)"),
    ({"binary_cache": str(README)}, (), f"binary_cache={README} is not a directory"),
    ({"binary_cache": "github:anira@binary-cache"}, (), "write github:<owner>/<repo>@<release tag>"),
    ({"binary_cache": "github:anira-project/anira-backends"}, (), "write github:<owner>/<repo>@<release tag>"),
    # Values of the right kind.
    ({"heavy_jobs": "-1"}, (), "heavy_jobs='-1' must be a positive integer"),
    ({"heavy_jobs": "two"}, (), "heavy_jobs='two' must be a positive integer"),
    ({"wait": "2"}, (), "wait='2' is not a boolean"),
    ({"lock": "yes please"}, (), "lock='yes please' is not a boolean"),
    ({"format": "ZIP"}, (), "unknown format 'ZIP'; valid: zip, tar.gz, 7z"),
    ({"inputs": "somewhere"}, (), "unknown inputs 'somewhere'; valid: build, dist"),
    ({"engine": "onnxruntime,"}, (), "has an empty item; separate values with single commas"),
    ({"platform": "linux-x86_64/../../x"}, (), "unknown platform 'linux-x86_64/../../x'"),
    # Round 2: odd values refused with a message, never a traceback.
    ({"heavy_jobs": "\u00b2"}, (), "must be a positive integer"),
    ({"heavy_jobs": "\u0662"}, (), "must be a positive integer"),
    *[({name: "/tmp/" + "x" * 300}, targets, "cannot be used: File name too long")
      for name, targets in (("origin", (ORT_SHARED,)), ("cache", ()), ("mirror", ()), ("binary_cache", ()))],
    *[({name: "/tmp/in\udcff.tgz"}, targets, "is not valid UTF-8")
      for name, targets in (("origin", (ORT_SHARED,)), ("cache", ()), ("mirror", ()), ("binary_cache", ()))],
    ({"cache": "/tmp/a\nb"}, (), "holds a control character"),
    ({"binary_cache": "ftp://host/x"}, (), "unsupported URL scheme 'ftp'"),
    ({"binary_cache": "s3://bucket/x"}, (), "unsupported URL scheme 's3'"),
    ({"mirror": "ftp://host/x"}, (), "unsupported URL scheme 'ftp'"),
    ({"origin": "ftp://host/onnxruntime-linux-x64-1.26.0.tgz"}, (ORT_SHARED,), "unsupported URL scheme 'ftp'"),
    ({"cache": "https://cache.example/x"}, (), "the download cache is a local directory"),
    ({"cache": "dist"}, (), "lies inside dist/, which the build owns"),
    ({"cache": "dist/downloads"}, (), "lies inside dist/"),
    ({"cache": "build/cache"}, (), "lies inside build/"),
    ({"binary_cache": "dist/cache"}, (), "lies inside dist/"),
    ({"origin": "/etc/hostname"}, (ORT_SHARED,), "unknown archive type; expected one of .tar.gz"),
    ({}, (f"build/legs/{ORT_SHARED}/steps/build.json",), f"{ORT_SHARED} has no build step"),
    ({}, (f"build/legs/{ORT_SHARED}/steps/restore.json",), "without binary_cache="),
    ({}, (f"build/legs/{ORT_SHARED}/steps/bogus.json",), "unknown step 'bogus'"),
    # Secrets: refused before any other check (whose message could show the value), redacted.
    ({"binary_cache_key": SECRET}, (), f"binary_cache_key={REDACTED_SECRET} holds key material, not the path"),
    ({"binary_cache_key": SEED}, (), f"binary_cache_key=<redacted: key material, {len(SEED)} characters>"),
    ({"binary_cache_key": SECRET + "\n"}, (), "holds key material, not the path of a key file"),
    ({"binary_cache_key": f"~/{SECRET}"}, (), "holds key material"),
    ({"binary_cache_trust": SECRET}, (), f"binary_cache_trust={REDACTED_SECRET} holds a secret key: it takes "
     "public keys"),
    ({"binary_cache_trust": f"unsigned,{SECRET},"}, (), "holds a secret key"),
    ({"binary_cache_trust": NIX_SECRET}, (), "binary_cache_trust=<redacted: key material"),
    ({"binary_cache_trust": "-----BEGIN OPENSSH PRIVATE KEY-----"}, (), "holds a secret key"),
    ({"origin": SECRET}, (ORT_SHARED,), f"origin={REDACTED_SECRET} holds what looks like a secret key"),
    ({"binary_cache": f"/srv/{SECRET}"}, (), "holds what looks like a secret key, which no option takes"),
    ({"version": SECRET}, (), "version=<redacted: ed25519-secret:"),
    ({"binary_cache": f"https://ci:{URL_TOKEN}@cache.example.org/anira"}, (),
     "must not carry a user or password; put them in ~/.netrc"),
    ({"mirror": f"https://{URL_TOKEN}@mirror.example.org/"}, (), "mirror=<redacted: a URL with credentials"),
    ({"origin": f"release=https://user:{URL_TOKEN}@files.example.org/torch.whl"}, (ORT_SHARED,),
     "origin=<redacted: a URL with credentials"),
    ({"mirror_out": "https://mirror.example.org/anira"}, ("fetch",), "mirror_out=https://mirror.example.org/anira is a URL"),
    ({"mirror_out": "ftp://mirror.example.org/anira"}, ("fetch",), "mirror_out=ftp://mirror.example.org/anira: unsupported URL scheme"),
]


@pytest.mark.parametrize("arguments, targets, message", BAD_INPUTS)
def test_bad_input_names_what_is_valid(matrix, arguments, targets, message):
    with pytest.raises(SelectionError) as error:
        _resolve(matrix, targets, **arguments)
    assert message in str(error.value)


def _shows_secret(text: str) -> bool:
    """Whether `text` holds any 8 characters in a row of a secret's base64."""
    return any(secret[i:i + 8] in text for secret in (SEED, ENV_SECRET.split(":")[1], NIX_SECRET.split(":")[1], URL_TOKEN)
               for i in range(len(secret) - 7))


@pytest.mark.parametrize("arguments, targets, message", BAD_INPUTS)
def test_no_refusal_shows_a_secret(matrix, arguments, targets, message):
    """Every message of the table, with the signing key in the environment as CI has it."""
    with pytest.raises(SelectionError) as error:
        _resolve(matrix, targets, environ={"ANIRA_BINARY_CACHE_KEY": ENV_SECRET}, **arguments)
    assert not _shows_secret(str(error.value)), str(error.value)


def test_a_secret_given_twice_is_shown_neither_time(matrix):
    other = "ed25519-secret:" + _secret(b"another pasted seed")
    with pytest.raises(SelectionError, match="holds key material") as error:
        resolve({"binary_cache_key": other}, ["list"], matrix, ROOT, LINUX, {},
                arglist=[("binary_cache_key", SECRET), ("binary_cache_key", other)])
    assert not _shows_secret(str(error.value)) and other.split(":")[1][:8] not in str(error.value)


def test_a_secret_key_file_given_as_trust_is_refused_unshown(matrix, tmp_path):
    from backends.cache.trust import keygen

    secret, public = keygen(tmp_path / "k")
    with pytest.raises(SelectionError, match=f"{secret}:1 is a secret key \\(ed25519-secret:..., not shown\\)") as error:
        _resolve(matrix, ["list"], binary_cache_trust=str(secret))
    assert secret.read_text().split(":")[1][:8] not in str(error.value)
    assert _resolve(matrix, ["list"], binary_cache_trust=str(public)).settings.trust.keys


def test_paths_and_public_keys_are_no_secrets(matrix, tmp_path):
    from backends.cache.trust import keygen
    from backends.cache.redaction import looks_secret

    secret, public = keygen(tmp_path / "a-rather-long-directory-name-that_has_underscores_too" / "k")
    settings = _resolve(matrix, ["list"], binary_cache_key=str(secret),
                        binary_cache_trust=f"{public},{public.read_text().strip()},unsigned").settings
    assert settings.signer is not None and settings.trust.unsigned
    for name in ("binary_cache_key", "binary_cache_trust", "key"):
        for value in ("~/.anira/cache-key", "C:\\Users\\me\\keys\\ci-key", "/srv/keys/" + "a" * 64 + "/k",
                      "keys/binary-cache.pub", public.read_text().strip()):
            assert not looks_secret(name, value), (name, value)


def test_an_option_given_twice_with_other_values_is_refused(matrix):
    with pytest.raises(SelectionError, match=r"version= is given 2 times \('1.26.0', '1.25.0'\): give each option once"):
        resolve({"version": "1.25.0"}, ["list"], matrix, ROOT, LINUX, {},
                arglist=[("version", "1.26.0"), ("version", "1.25.0")])
    resolve({"verbose": "1"}, ["list"], matrix, ROOT, LINUX, {}, arglist=[("verbose", "1"), ("verbose", "1")])


def test_relative_paths_are_read_from_the_launch_directory(matrix, tmp_path):
    (tmp_path / "in").mkdir()
    origin = tmp_path / "in" / "onnxruntime-linux-x64-1.26.0.tgz"
    origin.write_bytes(b"")
    (tmp_path / "relcache").mkdir()
    settings = resolve({"origin": "in/onnxruntime-linux-x64-1.26.0.tgz", "cache": "dl", "binary_cache": "relcache",
                        "mirror": "in"}, [ORT_SHARED], matrix, ROOT, LINUX, {}, launch_dir=tmp_path).settings
    assert settings.origins == {"": str(origin)}
    assert settings.cache == tmp_path / "dl"
    assert settings.binary_caches == (str(tmp_path / "relcache"),)
    assert settings.mirrors == (str(tmp_path / "in"),)
    # The default cache stays in the project, wherever scons was started from.
    assert resolve({}, ["list"], matrix, ROOT, LINUX, {}, launch_dir=tmp_path).settings.cache == \
        ROOT / ".cache/downloads"


@pytest.mark.parametrize("name", ["onnxruntime-linux-x64-1.25.0.tgz", "onnxruntime-1.25.0-cp311-cp311-manylinux_2_27_x86_64.whl"])
def test_an_origin_named_for_another_version_suggests_version(matrix, tmp_path, name):
    origin = tmp_path / name
    origin.write_bytes(b"")
    with pytest.raises(SelectionError, match=f"names version 1.25.0, but {ORT_SHARED} is version "
                                             r"\d+\.\d+\.\d+: add version=1.25.0"):
        resolve({"origin": str(origin)}, [ORT_SHARED], matrix, ROOT, LINUX, {})
    settings = resolve({"origin": str(origin), "version": "1.25.0"}, [ORT_SHARED], matrix, ROOT, LINUX, {}).settings
    assert settings.origins == {"": str(origin)}
    same = tmp_path / name.replace("1.25.0", matrix.engines["onnxruntime"].version)
    same.write_bytes(b"")
    resolve({"origin": str(same)}, [ORT_SHARED], matrix, ROOT, LINUX, {})


def test_the_bad_input_table_stays_past_fifty():
    assert len(BAD_INPUTS) > 50


def test_android_legs_need_the_ndk(matrix):
    with pytest.raises(SelectionError, match="set ANDROID_NDK_HOME"):
        _resolve(matrix, ["tflite-android-x86_64-static"], host=LINUX)


def test_building_defaults_to_host_cpu_legs(matrix):
    invocation = _resolve(matrix, engine="onnxruntime")
    assert [l.id for l in invocation.legs] == ["onnxruntime-linux-x86_64-static", "onnxruntime-linux-x86_64-shared"]


def test_listing_defaults_to_everything(matrix):
    assert len(_resolve(matrix, ["list"]).legs) == len(matrix.legs)
    gpu = _resolve(matrix, ["list"], engine="onnxruntime", flavor="gpu").legs
    assert gpu and gpu == tuple(l for l in matrix.legs if l.engine == "onnxruntime" and l.flavor == "gpu")


@pytest.mark.parametrize("alias, canonical", [
    ("windows-x64", "windows-x86_64"), ("linux-arm64", "linux-aarch64"), ("macos-aarch64", "macos-arm64"),
    ("linux-amd64", "linux-x86_64"), ("android-arm64", "android-arm64-v8a"), ("wasm32", "wasm"),
    ("Windows-ARM64", "windows-arm64"), ("macos-universal", "macos-universal"),
])
def test_platform_aliases(alias, canonical):
    assert canonical_platform(alias) == canonical


def test_aliases_select_like_canonical(matrix):
    a = _resolve(matrix, ["list"], platform="windows-x64", engine="onnxruntime").legs
    b = _resolve(matrix, ["list"], platform="windows-x86_64", engine="onnxruntime").legs
    assert a == b and a


def test_comma_lists(matrix):
    legs = _resolve(matrix, ["list"], engine="libtorch,executorch", flavor="gpu,cuda").legs
    assert {l.engine for l in legs} == {"libtorch", "executorch"}
    assert all(l.flavor in ("gpu", "cuda") for l in legs)


def test_version_override_renames(matrix):
    invocation = _resolve(matrix, ["libtorch-linux-x86_64-shared"], version="2.13.0")
    assert invocation.plans[0].archive == "libtorch-2.13.0-Linux-x86_64-shared.zip"


def test_origins_parse(matrix, tmp_path):
    wheel = tmp_path / "torch.whl"
    wheel.write_bytes(b"PK")
    invocation = _resolve(matrix, ["libtorch-linux-x86_64-shared"], origin=str(wheel))
    assert dict(invocation.settings.origins) == {"": str(wheel)}
    invocation = _resolve(matrix, ["libtorch-linux-aarch64-shared"], origin=f"acl={tmp_path}", plan="1")
    assert dict(invocation.settings.origins) == {"acl": str(tmp_path)}
