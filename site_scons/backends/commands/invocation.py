"""From the command line to an invocation: what to do and for which legs (no SCons import).

Everything the user typed is checked here, before SCons writes anything: option names and
values (options.py; each option once), targets (commands and leg ids, aliases accepted), the
selection, a version override against the engine's own scheme, and every `origin=` (a source
of the selected legs, an existing file or clone of a known archive type, a URL only with
lock=1).

Every location an option takes (`origin=`, `cache=`, `mirror=`, `binary_cache=`) is read once
here: a URL of a supported scheme, or a local path made absolute against the directory scons
was started from (`-C`, `-u` and `-D` change into the project; the user's relative path meant
their own directory). Nothing after this module sees a relative path, so what is hashed,
tracked and written is what the user named.
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import stat
from pathlib import Path
from typing import Mapping, Sequence

from backends.cache.redaction import refusal as secret_refusal
from backends.cache.release_store import github_release
from backends.cache.store import CacheError
from backends.cache.trust import Signer, Trust, TrustError, keygen, load_signer, load_trust
from backends.commands.options import FILTERS, OPTION_NAMES, OPTIONS, OptionError, option, parse_bool
from backends.graph.settings import Invocation, Settings
from backends.model.leg import Leg, leg_id
from backends.model.matrix import Matrix
from backends.model.plan import Download, Plan
from backends.model.recipes import plan_all
from backends.model.runner_needs import NDK_VERSION
from backends.model.selection import Filters, SelectionError, select, select_ids, suggest
from backends.model.vocab import FLAVORS, KINDS, VocabularyError, canonical_platform
from backends.probes.host import Host
from backends.steps import LEG_STEPS
from backends.steps.extract import ExtractError, archive_format
from backends.util.locations import UnsupportedLocation, is_url, locate, origin_filename

# Commands are words on the command line; leg ids are the other targets, and so is a step's
# record (build/legs/<leg id>/steps/<step>.json): running up to that step.
COMMANDS = ("list", "ci-matrix", "pins", "lock", "affected", "fetch")
KEYGEN = "cache-keygen"
_STEP_TARGET = re.compile(r"build/legs/([^/]+)/steps/([^/]+)\.json")


def _check_options(arguments: Mapping[str, str], arglist: Sequence[tuple[str, str]]) -> None:
    _refuse_secrets([*arguments.items(), *arglist])  # first: every later message may show a value
    unknown = sorted(set(arguments) - set(OPTION_NAMES))
    if unknown:
        hint = suggest(unknown[0], OPTION_NAMES)
        raise SelectionError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}{hint}; "
                             f"options: {', '.join(OPTION_NAMES)} (scons -h explains each)")
    given: dict[str, list[str]] = {}
    for name, value in arglist:
        given.setdefault(name, []).append(value)
    for name, values in given.items():
        if len(set(values)) > 1:  # SCons keeps the last one silently
            raise SelectionError(f"{name}= is given {len(values)} times ({', '.join(map(repr, values))}): "
                                 "give each option once")
    for name, value in arguments.items():
        _check_text(name, value)
    for opt in OPTIONS:
        if opt.name in arguments:
            try:
                opt.validate(arguments[opt.name])
            except OptionError as error:
                raise SelectionError(str(error)) from None


def _refuse_secrets(options: Sequence[tuple[str, str]]) -> None:
    for name, value in options:
        problem = secret_refusal(name, value)
        if problem:
            raise SelectionError(problem)


def _check_text(name: str, value: str) -> None:
    """A value is text: SCons decodes undecodable bytes to surrogates, which no file name,
    manifest or log can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SelectionError(f"{name}={ascii(value)} is not valid UTF-8 (the shell passed bytes that are no "
                             "character); rename the file or pass another path") from None
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise SelectionError(f"{name}={value!r} holds a control character (a newline, a tab, ...); "
                             "values are single-line text")


def _short(value: str, width: int = 70) -> str:
    return value if len(value) <= width else f"{value[:width // 2]}...{value[-(width // 2):]}"


def _location(name: str, text: str, launch_dir: Path, *, schemes: tuple[str, ...] = ()) -> str:
    """An option's location, read once: a URL (http, https, or one of `schemes`) as it is, or a
    local path (plain, `file://`, `~`) made absolute against `launch_dir`."""
    scheme = text.partition(":")[0].lower() if ":" in text else ""
    if scheme in schemes:
        return text
    try:
        located = locate(text)
    except UnsupportedLocation:
        valid = ", ".join(f"{s}:" for s in schemes)
        raise SelectionError(f"{name}={_short(text)}: unsupported URL scheme {scheme!r}; use http(s)://, file://"
                             f"{', ' + valid if valid else ''} or a local path") from None
    if isinstance(located, str):
        return located
    path = located.expanduser()
    return os.path.abspath(path if path.is_absolute() else launch_dir / path)


def _probe(name: str, path: str) -> os.stat_result | None:
    """The path's status, None when it does not exist; any other failure (a name too long, a
    directory that cannot be searched) refuses the option, naming the path and the reason."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise SelectionError(f"{name}={_short(path)} cannot be used: {error.strerror}") from None


def _outside_the_tree(name: str, path: str, root: Path) -> None:
    """A directory the run writes must not lie inside build/ or dist/: the build owns those
    (`scons -c`, gc=1 and withdrawals remove what they hold)."""
    real = Path(os.path.realpath(path))
    for owned in ("build", "dist"):
        inside = Path(os.path.realpath(root / owned))
        if real == inside or inside in real.parents:
            raise SelectionError(f"{name}={_short(path)} lies inside {owned}/, which the build owns and cleans; "
                                 "choose a directory outside build/ and dist/")


def parse_origins(text: str, launch_dir: Path) -> dict[str, str]:
    """`[<source>=]<path-or-url>,...`; an unnamed origin replaces the leg's main download."""
    origins: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, location = item.partition("=")
        key = name if sep and "/" not in name and ":" not in name and "\\" not in name else ""
        value = location if key else item
        if key in origins:
            raise SelectionError(f"origin= names {key or 'the main download'} twice")
        origins[key] = _location("origin", value, launch_dir)
    return origins


def _mirrors(text: str, launch_dir: Path) -> tuple[str, ...]:
    mirrors = tuple(_location("mirror", m.strip(), launch_dir) for m in text.split(",") if m.strip())
    for mirror in mirrors:
        if not is_url(mirror):
            st = _probe("mirror", mirror)
            if st is None or not stat.S_ISDIR(st.st_mode):
                raise SelectionError(f"mirror={_short(mirror)} is not a directory (or an http(s)/file URL)")
    return mirrors


def _binary_caches(text: str, launch_dir: Path, root: Path) -> tuple[str, ...]:
    caches = tuple(_location("binary_cache", c.strip(), launch_dir, schemes=("github",))
                   for c in text.split(",") if c.strip())
    for cache in caches:
        if cache.startswith("github:"):
            try:
                github_release(cache)
            except CacheError as error:
                raise SelectionError(str(error)) from None
        elif not is_url(cache):
            st = _probe("binary_cache", cache)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise SelectionError(f"binary_cache={_short(cache)} is not a directory")
            _outside_the_tree("binary_cache", cache, root)
    return caches


def _cache(text: str, launch_dir: Path, root: Path) -> Path:
    # The default lives in the project; a value the user typed is relative to where they are.
    cache = _location("cache", text, root if text == option("cache").default else launch_dir)
    if is_url(cache):
        raise SelectionError(f"cache={_short(cache)} is a URL: the download cache is a local directory "
                             "(mirror= takes URLs to read from)")
    st = _probe("cache", cache)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise SelectionError(f"cache={_short(cache)} is not a directory")
    _outside_the_tree("cache", cache, root)
    return Path(cache)


def _signing(arguments: Mapping[str, str], launch_dir: Path, root: Path,
             environ: Mapping[str, str]) -> tuple[Signer | None, Trust]:
    key = arguments.get("binary_cache_key", "")
    trust = ",".join(item if item.strip() in ("unsigned", "") or item.strip().startswith("ed25519:")
                     else _location("binary_cache_trust", item.strip(), launch_dir)
                     for item in arguments.get("binary_cache_trust", "").split(","))
    try:
        return (load_signer(_location("binary_cache_key", key, launch_dir) if key else "", environ),
                load_trust(trust, root))
    except TrustError as error:
        raise SelectionError(str(error)) from None


def keygen_target(arguments: Mapping[str, str], targets: Sequence[str], launch_dir: Path) -> str:
    """`scons cache-keygen key=PATH`: write the key pair; what to tell the user."""
    _refuse_secrets(list(arguments.items()))
    if list(targets) != [KEYGEN] or set(arguments) - {"key"}:
        raise SelectionError(f"{KEYGEN} takes key=PATH and nothing else: scons {KEYGEN} key=~/.anira/cache-key")
    path = arguments.get("key", "")
    if not path or path in ("0", "1"):
        raise SelectionError(f"{KEYGEN} needs key=PATH, the file to write the secret key to (PATH.pub gets the "
                             "public key)")
    _check_text("key", path)
    location = _location("key", path, launch_dir)
    if is_url(location):
        raise SelectionError(f"key={path} is a URL; give a local path")
    try:
        secret, public = keygen(Path(location))
    except (TrustError, OSError) as error:
        raise SelectionError(str(error)) from None
    return (f"wrote {secret} (secret: keep it private; a writer passes binary_cache_key={secret}, CI keeps its "
            f"text in the secret ANIRA_BINARY_CACHE_KEY)\nwrote {public} (public: readers pass "
            f"binary_cache_trust={public}, or add its line to keys/binary-cache.pub)")


def _settings(arguments: Mapping[str, str], root: Path, launch_dir: Path, environ: Mapping[str, str]) -> Settings:
    def value(name: str) -> str:
        return arguments.get(name, option(name).default)

    signer, trust = _signing(arguments, launch_dir, root, environ)

    return Settings(
        cache=_cache(value("cache"), launch_dir, root),
        mirrors=_mirrors(value("mirror"), launch_dir),
        offline=parse_bool("offline", value("offline")),
        lock=parse_bool("lock", value("lock")),
        verbose=parse_bool("verbose", value("verbose")),
        wait=parse_bool("wait", value("wait")),
        format=value("format"),
        inputs=value("inputs"),
        heavy_jobs=int(value("heavy_jobs")),
        version=value("version"),
        origins=parse_origins(value("origin"), launch_dir),
        binary_caches=_binary_caches(value("binary_cache"), launch_dir, root),
        binary_cache_write=parse_bool("binary_cache_write", value("binary_cache_write")),
        lock_minutes=int(value("lock_minutes")),
        signer=signer,
        trust=trust,
        mirror_out=_mirror_out(value("mirror_out"), launch_dir),
    )


def _mirror_out(text: str, launch_dir: Path) -> Path | None:
    """Where `scons fetch` lays its inputs out: a local directory (plain, `file://`, `~`), never a URL."""
    if not text:
        return None
    located = _location("mirror_out", text, launch_dir)
    if is_url(located):
        raise SelectionError(f"mirror_out={_short(text)} is a URL: it names a local directory to write "
                             "(serve that directory over HTTP yourself for mirror=)")
    return Path(located)


# -- targets ------------------------------------------------------------------------------

def canonical_leg_id(target: str, engines: Sequence[str]) -> str | None:
    """The canonical id of a leg id typed with platform aliases (`onnxruntime-windows-x64-shared`
    -> `onnxruntime-windows-x86_64-shared`), or None when `target` is not shaped like one."""
    engine = next((e for e in sorted(engines, key=len, reverse=True) if target.startswith(f"{e}-")), None)
    if engine is None:
        return None
    tokens = target[len(engine) + 1:].lower().split("-")
    config = "release"
    if tokens and tokens[-1] == "debug":
        config = tokens.pop()
    if not tokens or tokens[-1] not in KINDS:
        return None
    kind = tokens.pop()
    flavor = tokens.pop() if len(tokens) > 1 and tokens[-1] in FLAVORS else "cpu"
    try:
        platform = canonical_platform("-".join(tokens))
    except VocabularyError:
        return None
    return leg_id(engine, platform, flavor, kind, config)


def _split_targets(targets: Sequence[str], matrix: Matrix
                   ) -> tuple[list[str], list[str], list[tuple[str, str]], dict[str, str]]:
    """(commands, canonical leg ids, (leg id, step) of step records, typed spellings of leg
    ids -> canonical ids); any other word is refused, with the nearest valid one."""
    commands, legs, steps = [], [], []
    spellings: dict[str, str] = {}
    known = set(matrix.ids)
    for target in targets:
        if target in COMMANDS:
            commands.append(target)
            continue
        canonical = canonical_leg_id(target, tuple(matrix.engines))
        if canonical in known:
            legs.append(canonical)
            if canonical != target:
                spellings[target] = canonical
            continue
        step = _STEP_TARGET.fullmatch(posixpath.normpath(target.replace("\\", "/")))
        if step and step.group(1) in known:
            if step.group(2) not in LEG_STEPS:
                raise SelectionError(f"unknown step {step.group(2)!r} in {target}; a leg's steps: "
                                     f"{', '.join(LEG_STEPS)}")
            legs.append(step.group(1))  # SCons builds up to that step's record, no further
            steps.append((step.group(1), step.group(2)))
            continue
        hint = suggest(target, [*COMMANDS, *matrix.ids])
        what = "leg" if canonical or any(target.startswith(f"{e}-") for e in matrix.engines) else "target"
        raise SelectionError(f"unknown {what} {target!r}{hint}; targets are {', '.join(COMMANDS)} or leg ids "
                             "(`scons list` shows every leg id), or a step's record build/legs/<leg id>/steps/<step>.json")
    return commands, legs, steps, spellings


def recorded_steps(plan: Plan, settings: Settings) -> tuple[str, ...]:
    """The steps with a record under build/legs/<leg id>/steps/ for this leg and run."""
    own = ("merge",) if plan.leg.aggregate else (("build",) if plan.build else ()) + ("stage",)
    cache = ("restore", "store") if settings.binary_caches else ()
    return own + ("archive", "verify", "smoke", "publish") + cache


def _check_step_targets(steps: Sequence[tuple[str, str]], plans: Sequence[Plan], settings: Settings) -> None:
    by_id = {plan.leg.id: plan for plan in plans}
    for leg_id_, step in steps:
        valid = recorded_steps(by_id[leg_id_], settings)
        if step not in valid:
            raise SelectionError(f"{leg_id_} has no {step} step (a {by_id[leg_id_].leg.source} leg"
                                 f"{' without binary_cache=' if step in ('restore', 'store') else ''}); its "
                                 f"steps: {', '.join(valid)}")


def _mode(commands: Sequence[str], arguments: Mapping[str, str]) -> str:
    flags = [name for name in ("plan", "key", "gc") if parse_bool(name, arguments.get(name, "0"))]
    chosen = list(commands) + [f"{name}=1" for name in flags]
    if len(chosen) > 1:
        raise SelectionError(f"choose one of {', '.join(chosen)}")
    if commands:
        return commands[0]
    return flags[0] if flags else "build"


def _check_since(mode: str, arguments: Mapping[str, str]) -> None:
    """`affected` compares with a git ref, and since= means nothing to the other commands."""
    if mode == "affected" and "since" not in arguments:
        raise SelectionError("affected needs since=<git ref>, the commit to compare with: e.g. "
                             "scons affected since=HEAD (your uncommitted changes) or since=origin/main")
    if mode != "affected" and "since" in arguments:
        raise SelectionError(f"since={arguments['since']} is for `scons affected` (which legs a change since that "
                             "ref rebuilds); add the target affected, or drop since=")


# -- selection ----------------------------------------------------------------------------

def _select(matrix: Matrix, arguments: Mapping[str, str], leg_ids: Sequence[str], host: Host,
            building: bool) -> list[Leg]:
    filters = [name for name in FILTERS if name in arguments]
    if leg_ids:
        if filters:
            given = " ".join(f"{name}={arguments[name]}" for name in filters)
            raise SelectionError(f"leg ids select their legs exactly; {given} would be ignored: drop the filters, "
                                 "or drop the leg ids")
        return select_ids(matrix.legs, leg_ids)
    raw = dict(arguments)
    if building:
        # Building means this host's default packages unless told otherwise.
        raw.setdefault("platform", host.platform)
        raw.setdefault("flavor", "cpu")
    return select(matrix.legs, Filters.parse(raw, tuple(matrix.engines)))


def _check_version_override(legs: Sequence[Leg], version: str, matrix: Matrix) -> None:
    if not version:
        return
    engines = sorted({leg.engine for leg in legs})
    if len(engines) != 1:
        raise SelectionError(f"version={version} overrides one engine's pin; the selection has {', '.join(engines)}: "
                             "add engine=<name>")
    engine = matrix.engines[engines[0]]
    if not engine.version_pattern.fullmatch(version):
        raise SelectionError(f"version={version} is not a {engine.name} version: {engine.name} versions look like "
                             f"{engine.version} (pattern {engine.version_pattern.pattern})")


# -- origins ------------------------------------------------------------------------------

def _origin_targets(plans: Sequence[Plan], name: str) -> list[Download]:
    """The downloads an origin stands in for: by source name, or each leg's main download."""
    return [download for _, download in _origin_uses(plans, name)]


def _origin_uses(plans: Sequence[Plan], name: str) -> list[tuple[Plan, Download]]:
    if name:
        return [(plan, d) for plan in plans for d in plan.downloads if d.name == name]
    return [(plan, plan.downloads[0]) for plan in plans if plan.downloads]


# A version inside a file name: dotted numbers not glued to other digits or dots
# (`torch-2.13.0+cpu-cp311-...whl`, `onnxruntime-linux-x64-1.26.0.tgz`).
_NAMED_VERSION = re.compile(r"(?<![0-9.])[0-9]+(?:\.[0-9]+){1,3}(?![0-9])")


def _check_origin_version(label: str, file_name: str, uses: Sequence[tuple[Plan, Download]]) -> None:
    """An origin whose file name names another version than the legs' (where their own
    download's name carries the version) is refused before anything is extracted."""
    named = set(_NAMED_VERSION.findall(file_name))
    for plan, download in uses:
        if not named or plan.version not in download.filename or plan.version in named:
            continue
        found = sorted(named)[0]
        raise SelectionError(f"{label} names version {found}, but {plan.leg.id} is version {plan.version}: "
                             f"add version={found} to build that version (names and the contract follow), or "
                             f"pass the {plan.version} file")


def _check_origins(settings: Settings, plans: Sequence[Plan]) -> None:
    names = sorted({d.name for plan in plans for d in plan.downloads})
    for name, location in settings.origins.items():
        downloads = _origin_targets(plans, name)
        if not downloads:
            if not name:
                raise SelectionError(f"origin={location}: the selected legs download nothing to replace")
            raise SelectionError(f"origin={name}=...: the selected legs have no source named {name!r}"
                                 f"{suggest(name, names)}; their sources: {', '.join(names) or 'none'}")
        label = f"origin={name + '=' if name else ''}{location}"
        if not all(d.kind == "git" for d in downloads):
            _check_origin_version(label, origin_filename(location), _origin_uses(plans, name))
        if is_url(location):
            if not settings.lock:
                raise SelectionError(f"{label} is a URL: add lock=1 to fetch it and record its sha256 (trust on "
                                     "first use; a recorded pin for its file name is checked), or download it "
                                     "yourself and pass the file")
            continue
        path = Path(location)
        git = all(d.kind == "git" for d in downloads)
        if _probe("origin", location) is None:
            raise SelectionError(f"{label} does not exist")
        if git and not path.is_dir():
            raise SelectionError(f"{label} is not a directory: the {downloads[0].name} source is a git repository "
                                 "(pass a clone)")
        if not git and not path.is_file():
            raise SelectionError(f"{label} is {'a directory' if path.is_dir() else 'not a regular file'}: "
                                 f"the {downloads[0].name} download is a file ({downloads[0].filename})")
        if not git and any(d.unpack for d in downloads):
            try:
                archive_format(path.name)
            except ExtractError as error:
                raise SelectionError(f"{label}: {str(error).split(': ', 1)[1].split(', or pass')[0]} "
                                     f"(the {downloads[0].name} download is {downloads[0].filename})") from None


def check_buildable(legs: Sequence[Leg], host: Host, environ: Mapping[str, str]) -> None:
    """Fail fast, naming the runner, for legs this host cannot build."""
    for leg in legs:
        if not host.can_build(leg):
            runner_os, runner_arch = leg.runner_host
            raise SelectionError(
                f"{leg.id} builds on {leg.runner} ({runner_os}-{runner_arch}); this host is {host.platform}. "
                f"`scons plan=1 {leg.id}` shows its commands, `scons list` what builds here")
        if leg.toolchain == "android" and not environ.get("ANDROID_NDK_HOME"):
            raise SelectionError(f"{leg.id} needs the Android NDK (toolchain android): "
                                 f"set ANDROID_NDK_HOME (NDK {NDK_VERSION})")


def resolve(arguments: Mapping[str, str], targets: Sequence[str], matrix: Matrix, root: Path, host: Host,
            environ: Mapping[str, str] | None = None, *, arglist: Sequence[tuple[str, str]] | None = None,
            launch_dir: Path | None = None, cleaning: bool = False) -> Invocation:
    """`arglist` is every option as typed, repeats included (SCons' ARGLIST); `launch_dir` the
    directory scons was started from (GetLaunchDir), which relative paths are read against;
    `cleaning` (scons -c) removes what legs built, so any leg may be named on any host."""
    environ = os.environ if environ is None else environ
    _check_options(arguments, list(arguments.items()) if arglist is None else arglist)
    settings = _settings(arguments, root, root if launch_dir is None else launch_dir, environ)
    commands, leg_ids, step_targets, spellings = _split_targets(targets, matrix)
    mode = _mode(commands, arguments)
    _check_since(mode, arguments)
    if mode != "fetch" and "mirror_out" in arguments:
        raise SelectionError("mirror_out= is for `scons fetch` (write every input in the layout mirror= reads); "
                             "add the target fetch, or drop mirror_out=")
    if mode == "lock":
        settings = dataclasses.replace(settings, lock=True)  # what lock does: a URL origin is fetched and hashed
    if mode == "build" and not leg_ids and not any(name in arguments for name in FILTERS):
        mode = "choose"  # bare `scons`: show what this host builds, build nothing by accident
    legs = _select(matrix, arguments, leg_ids, host, building=mode in ("build", "choose"))
    _check_version_override(legs, settings.version, matrix)
    if mode == "build" and not cleaning:
        check_buildable(legs, host, environ)
        if settings.inputs == "build":
            inputs = [matrix.leg(i) for leg in legs for i in leg.inputs]
            check_buildable([leg for leg in inputs if host.can_build(leg)], host, environ)
    plans = plan_all(matrix, legs, settings.version or None)
    _check_step_targets(step_targets, plans, settings)
    _check_origins(settings, plans)
    return Invocation(mode=mode, plans=tuple(plans), settings=settings, spellings=spellings)
