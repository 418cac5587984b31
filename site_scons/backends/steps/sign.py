"""macOS code signing of a staged package (docs/upstream.md#signing): Developer ID, hardened runtime, timestamp.

    python -m backends.steps.sign STAGE_DIR

Signs every `*.framework` and `*.dylib` under `STAGE_DIR/lib` with the identity named by
`$DEV_ID_APP` (`codesign --force --timestamp --options runtime`), then checks each with
`codesign --verify --strict`. Runs on the stage, before the archive step, because an
archive's bytes are hashed into its `.sha256` and manifest; an aggregate (universal)
stage is signed again after lipo. Skips, saying why, when the identity is absent
(forks, pull requests, local builds) or the host is not macOS. The identity itself is
never printed or recorded: output says "the identity from $DEV_ID_APP".
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from backends.util.errors import BackendsError

IDENTITY_ENV = "DEV_ID_APP"
SIGN_ARGS = ("--force", "--timestamp", "--options", "runtime")
VERIFY_ARGS = ("--verify", "--strict", "--verbose=2")

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class SignError(BackendsError, RuntimeError):
    """codesign failed; the message names the file and carries codesign's output (redacted)."""


@dataclass(frozen=True)
class SignReport:
    signed: tuple[str, ...] = ()
    skipped: str = ""  # why nothing was signed

    def record(self) -> dict[str, object]:
        """For step manifests: what was signed, never with what."""
        if self.skipped:
            return {"signed": [], "skipped": self.skipped}
        return {"signed": list(self.signed), "identity": f"from ${IDENTITY_ENV}"}

    def describe(self) -> str:
        if self.skipped:
            return f"not signed: {self.skipped}"
        return f"signed {len(self.signed)} item(s) with the identity from ${IDENTITY_ENV}"


def will_sign(environ: Mapping[str, str], system: str | None = None) -> bool:
    """Whether `sign_stage` would sign here: a fact for step signatures that does not
    reveal the identity."""
    return not skip_reason(environ, system)


def skip_reason(environ: Mapping[str, str], system: str | None = None) -> str:
    system = platform.system() if system is None else system
    if not environ.get(IDENTITY_ENV, "").strip():
        return (f"${IDENTITY_ENV} is not set (no signing secrets: forks, pull requests, local builds); "
                "the libraries stay unsigned")
    if system != "Darwin":
        return f"codesign needs macOS; this host is {system}"
    return ""


def sign_targets(stage: Path) -> list[Path]:
    """Frameworks, and dylibs outside them, under `stage/lib`; links are signed through
    their targets."""
    lib = stage / "lib"
    if not lib.is_dir():
        return []
    frameworks = sorted(p for p in lib.rglob("*.framework") if p.is_dir() and not p.is_symlink())
    frameworks = [f for f in frameworks if not any(parent.suffix == ".framework" for parent in f.parents)]
    dylibs = sorted(p for p in lib.rglob("*.dylib")
                    if p.is_file() and not p.is_symlink() and not any(f in p.parents for f in frameworks))
    return [*frameworks, *dylibs]


def _redact(text: str, identity: str) -> str:
    return text.replace(identity, f"${IDENTITY_ENV}") if identity else text


def _codesign(args: Sequence[str], target: Path, stage: Path, identity: str, runner: Runner) -> None:
    result = runner(["codesign", *args, str(target)], capture_output=True, text=True)
    if result.returncode != 0:
        output = _redact((result.stdout or "") + (result.stderr or ""), identity).strip()
        action = "verify" if "--verify" in args else "sign"
        raise SignError(f"codesign could not {action} {target.relative_to(stage)} (exit {result.returncode}): "
                        f"{output or 'no output'}")


def sign_stage(stage: Path, environ: Mapping[str, str] | None = None, system: str | None = None,
               runner: Runner = subprocess.run) -> SignReport:
    environ = os.environ if environ is None else environ
    reason = skip_reason(environ, system)
    if reason:
        return SignReport(skipped=reason)
    targets = sign_targets(stage)
    if not targets:
        return SignReport(skipped=f"nothing to sign: no *.dylib or *.framework under {stage / 'lib'}")
    identity = environ[IDENTITY_ENV].strip()
    for target in targets:
        _codesign([*SIGN_ARGS, "-s", identity], target, stage, identity, runner)
    for target in targets:
        _codesign(VERIFY_ARGS, target, stage, identity, runner)
    return SignReport(signed=tuple(str(t.relative_to(stage)) for t in targets))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.steps.sign", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", type=Path, help="a leg's stage directory (holding lib/)")
    args = parser.parse_args(argv)
    if not args.stage.is_dir():
        kind = "a file" if args.stage.exists() else "missing"
        print(f"error: {args.stage} is {kind}; sign the stage directory before the archive step "
              "(an archive's bytes are already hashed into its .sha256 and manifest)", file=sys.stderr)
        return 2
    try:
        report = sign_stage(args.stage)
    except SignError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"[sign] {report.describe()}")
    for item in report.signed:
        print(f"[sign]   {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
