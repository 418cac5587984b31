"""CI's binary cache hits, resolved before any runner starts: a hit gets no runner job.

Every leg's key is known without building (`scons -Q ci-matrix` carries it), so the plan job
lists the binary cache once (the GitHub release store: one request, the listing carries
every asset) and splits the selection:

- a **hit**: the key has a complete entry whose label says it is signed by a key this
  checkout trusts (keys/binary-cache.pub). No runner job starts for it. Its archive is
  downloaded only by the jobs that use it, and each checks it exactly as a restore in scons
  does (cache_entry.check_entry: the signature, the manifest, every member, the contract),
  so what skips the leg's own runner rests on the signature, never on the label: an aggregate
  that runs restores its hit inputs; a tag's release job restores every published hit;
- a **miss** runs on its runner as before (and stores its entry on pushes). An aggregate
  whose own key hits is a hit like any leg; one that misses runs after its missed inputs.

The label only decides whether trying to skip the runner is worth it: an entry labelled
unsigned, or signed by a key not trusted here, would be refused by the restore, so it is a
miss and its leg is rebuilt (and its entry replaced by a signed one).

The job summary shows hits and misses per OS and the runner minutes the hits saved,
estimated from the build time each hit's manifest records (its label carries it).
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from backends.cache.entry import check_entry, restored_record
from backends.cache.release_store import GitHubReleaseStore, Listed
from backends.cache.store import CacheError, Store
from backends.cache.stores import store_for
from backends.cache.trust import Trust, TrustError, key_id, load_trust, signer_of
from backends.model.matrix import Matrix
from backends.model.plan import Contract
from backends.model.recipes import plan_all
from backends.model.vocab import RUNNERS
from backends.steps.publish import PublishError, publish
from backends.util.files import remove_path

OSES = ("linux", "macos", "windows")
# What GitHub bills a minute of each OS's standard runner as, in Linux minutes.
BILLED_AS_LINUX = {"linux": 1, "macos": 10, "windows": 2}
# A leg job's minutes outside the build its manifest times: runner start, checkout, Python,
# requirements and tool set-up, fetching inputs, verify, smoke and the artifact upload.
JOB_OVERHEAD_MINUTES = 3


@dataclass(frozen=True)
class Listing:
    """The binary cache as the plan job saw it: its entries and the keys this checkout
    trusts; `unavailable` says why no leg can hit ("" when the store was listed)."""

    location: str
    entries: Mapping[tuple[str, str], Listed] = field(default_factory=dict)
    trust: Trust = Trust(frozenset())
    unavailable: str = ""

    def why_not(self, key: str, archive: str) -> str:
        """Why the leg of `key` is no hit ("" when it is)."""
        if self.unavailable:
            return self.unavailable
        if not key:
            return "it has no key"
        listed = self.entries.get((key, archive))
        if listed is None:
            return "its key is not in the cache"
        if listed.signer and listed.signer in {key_id(k) for k in self.trust.keys}:
            return ""
        if self.trust.unsigned and not self.trust.keys:
            return ""
        signer = f"by key {listed.signer}" if listed.signer else "by no key"
        return f"its entry is labelled as signed {signer}, which this checkout does not trust"


def runner_os(label: str) -> str:
    """linux, macos or windows: what a GitHub runner label provides."""
    if label in RUNNERS:
        return RUNNERS[label][0]
    return next((os for os, prefix in (("linux", "ubuntu"), ("macos", "macos"), ("windows", "windows"))
                 if label.startswith(prefix)), label)


def read_listing(location: str, environ: Mapping[str, str], root: Path,
                 say: Callable[[str], None] | None = None) -> Listing:
    """List `location` once. What makes every leg a miss (no trusted key, a store that cannot
    be listed, or cannot be seen) is said in `unavailable`; a rate limit that outlasts the wait
    raises LookupFailed: a lookup that could not be made is never a quiet miss."""
    say = say or _stderr
    try:
        trust = load_trust("", root)
    except TrustError as error:
        return Listing(location, unavailable=f"the trusted keys cannot be read: {error}")
    if trust.empty:
        return Listing(location, trust=trust, unavailable="no key is trusted (keys/binary-cache.pub lists none), so "
                       "a restore would refuse every entry: add the CI key's public line "
                       "(docs/binary-cache.md#rotating-a-key)")
    store = store_for(location, environ)
    if not isinstance(store, GitHubReleaseStore):
        return Listing(location, trust=trust, unavailable=f"{location} cannot be listed before the legs run (only "
                       "a github: release store can)")
    try:
        entries = store.listing()
    except CacheError as error:
        return Listing(location, trust=trust, unavailable=f"it could not be listed: {error}")
    finally:
        say(f"{location}: {store.client.usage()}")
    if entries is None:
        return Listing(location, trust=trust, unavailable=f"{location} cannot be seen: no release was made yet, or "
                       "this run's token cannot list drafts (GitHub lists a draft only to tokens with push access: "
                       "pull requests, forks' included, get contents: read)")
    return Listing(location, entries, trust)


# -- resolution -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Hit:
    id: str
    key: str
    archive: str
    runner: str
    publish: bool
    seconds: int | None  # the build's seconds its manifest records; None: not recorded

    def record(self) -> dict[str, object]:
        """What a restore needs (an aggregate's `restore` entries, the plan's `hits` output)."""
        return {"id": self.id, "key": self.key, "archive": self.archive, "publish": self.publish}

    @property
    def minutes(self) -> int:
        """The runner minutes this hit spared: its build plus a job's fixed part, rounded up
        as GitHub bills a job."""
        return math.ceil((self.seconds or 0) / 60) + JOB_OVERHEAD_MINUTES


@dataclass(frozen=True)
class Resolution:
    hits: dict[str, Hit]
    misses: dict[str, str]  # leg id -> why it runs
    runners: dict[str, str]  # leg id -> runner label, every entry
    location: str = ""
    unavailable: str = ""


def resolve(entries: Sequence[Mapping[str, object]], listing: Listing) -> Resolution:
    """Split the runnable entries into hits and misses by the listing."""
    hits: dict[str, Hit] = {}
    misses: dict[str, str] = {}
    for entry in entries:
        leg_id, key, archive = str(entry["id"]), str(entry.get("key") or ""), str(entry["archive"])
        why = listing.why_not(key, archive)
        if why:
            misses[leg_id] = why
            continue
        listed = listing.entries[key, archive]
        hits[leg_id] = Hit(leg_id, key, archive, str(entry["runner"]), bool(entry.get("publish")), listed.seconds)
    runners = {str(entry["id"]): str(entry["runner"]) for entry in entries}
    return Resolution(hits, misses, runners, listing.location, listing.unavailable)


def no_resolution(entries: Sequence[Mapping[str, object]]) -> Resolution:
    """Every entry a miss: no binary cache was given to the plan job."""
    return Resolution({}, {str(e["id"]): "no binary cache was given" for e in entries},
                      {str(e["id"]): str(e["runner"]) for e in entries}, unavailable="no binary cache was given")


# -- the job summary ------------------------------------------------------------------------

@dataclass(frozen=True)
class OsCount:
    legs: int
    hits: int
    minutes: int  # runner minutes the hits saved (estimated)
    undated: int  # hits whose manifest records no build time

    @property
    def jobs(self) -> int:
        return self.legs - self.hits


def per_os(resolution: Resolution) -> dict[str, OsCount]:
    counts: dict[str, OsCount] = {}
    for name in (*OSES, *sorted({runner_os(r) for r in resolution.runners.values()} - set(OSES))):
        legs = [leg for leg, runner in resolution.runners.items() if runner_os(runner) == name]
        hits = [resolution.hits[leg] for leg in legs if leg in resolution.hits]
        counts[name] = OsCount(len(legs), len(hits), sum(hit.minutes for hit in hits),
                               sum(1 for hit in hits if hit.seconds is None))
    return counts


def report(resolution: Resolution) -> str:
    """The job summary's binary cache section: hits and misses per OS, the minutes saved."""
    total = len(resolution.runners)
    if resolution.unavailable:
        return (f"### Binary cache: not used at plan time, every one of {total} legs runs\n\n"
                f"{resolution.unavailable}.\n")
    counts = per_os(resolution)
    lines = [f"### Binary cache: {len(resolution.hits)} of {total} legs hit `{resolution.location}`, no runner job "
             "for them", "",
             "| OS | legs | hits (no runner job) | misses (runner jobs) | runner minutes saved (est.) "
             "| as Linux minutes |", "|---|---|---|---|---|---|"]
    for name, count in counts.items():
        if count.legs:
            factor = BILLED_AS_LINUX.get(name, 1)
            lines.append(f"| {name} | {count.legs} | {count.hits} | {count.jobs} | {count.minutes} "
                         f"| {count.minutes * factor} (×{factor}) |")
    saved = sum(c.minutes for c in counts.values())
    billed = sum(c.minutes * BILLED_AS_LINUX.get(name, 1) for name, c in counts.items())
    lines += [f"| all | {total} | {len(resolution.hits)} | {total - len(resolution.hits)} | {saved} | {billed} |", "",
              "Minutes saved: each hit's build time as its manifest records it, plus "
              f"{JOB_OVERHEAD_MINUTES} minutes per job for start-up, set-up, fetching, verify, smoke and upload "
              "(an estimate). GitHub bills a macOS minute as 10 Linux minutes and a Windows minute as 2."]
    undated = sum(c.undated for c in counts.values())
    if undated:
        lines.append(f"{undated} hit(s) record no build time (stored before manifests timed builds): counted as "
                     f"{JOB_OVERHEAD_MINUTES} minutes each.")
    lines.append("A hit is downloaded and checked (signature, manifest, members, contract) only by the jobs that "
                 "use it: an aggregate that runs, and a tag's release job.")
    if resolution.misses:
        lines += ["", f"<details><summary>{len(resolution.misses)} misses: runner jobs</summary>", "",
                  "| leg | runner | why it runs |", "|---|---|---|"]
        lines += [f"| `{leg}` | {resolution.runners[leg]} | {why} |" for leg, why in resolution.misses.items()]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


# -- restoring hits -------------------------------------------------------------------------

@dataclass(frozen=True)
class Restored:
    id: str
    problems: tuple[str, ...] = ()  # empty: published into dist/, checked

    @property
    def ok(self) -> bool:
        return not self.problems


def read_hits(text: str, what: str) -> list[dict[str, str]]:
    """Hits as the plan job writes them: a JSON list of {id, key, archive[, publish]}."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise CacheError(f"{what}: not JSON ({error}); pass the plan job's `hits` output or an aggregate's "
                         "`restore` entries") from None
    fields = ("id", "key", "archive")
    if not isinstance(payload, list) or not all(isinstance(hit, dict) and all(isinstance(hit.get(f), str)
                                                                               for f in fields) for hit in payload):
        raise CacheError(f"{what}: expected a JSON list of {{\"id\", \"key\", \"archive\"}} objects")
    return payload


def restore_hits(hits: Sequence[Mapping[str, object]], matrix: Matrix, root: Path, store: Store, trust: Trust,
                 dist: Path, say: Callable[[str], None]) -> list[Restored]:
    """Download each hit's entry, check it as a restore in scons does (cache_entry.check_entry:
    signature, manifest, members, contract) and publish it into `dist` with its manifest
    saying where it came from. Nothing is built: any platform's archive is checked here (verify
    reads Mach-O, COFF and ELF on every host). A LookupFailed (a rate limit past the wait)
    propagates: the job fails, naming when to run it again."""
    unknown = [str(hit["id"]) for hit in hits if str(hit["id"]) not in set(matrix.ids)]
    if unknown:
        raise CacheError(f"the hits name {', '.join(unknown)}, which variants/ does not define: pass the plan job's "
                         "output of this commit")
    plans = {plan.leg.id: plan for plan in plan_all(matrix, [matrix.leg(str(hit["id"])) for hit in hits])}
    done = []
    for hit in hits:
        leg_id, key, archive = str(hit["id"]), str(hit["key"]), str(hit["archive"])
        plan = plans[leg_id]
        if plan.archive != archive:
            done.append(Restored(leg_id, (f"the hit names {archive}, but this checkout's {leg_id} is "
                                          f"{plan.archive}: pass the plan job's output of this commit",)))
            continue
        entry = root / "build" / "binary-cache" / key
        problems = _fetch_and_check(store, key, archive, entry, plan.contract, plan.version, root, trust)
        if not problems:
            try:
                publish(entry / archive, dist / archive, dist / ".stale",
                        {"leg_key": key, "restored": restored_record(store.location, key, signer_of(entry / archive))})
            except (PublishError, OSError) as error:
                problems = [f"it could not be published into {dist}: {error}"]
        remove_path(entry)
        done.append(Restored(leg_id, tuple(problems)))
        say(f"[restore] {leg_id}: " + (f"restored from {store.location} (key {key[:12]}), checked: signature, "
                                       "manifest, members, contract" if not problems
                                       else "refused: " + "; ".join(problems)))
    return done


def _fetch_and_check(store: Store, key: str, archive: str, entry: Path, contract: Contract, version: str,
                     root: Path, trust: Trust) -> list[str]:
    remove_path(entry)
    try:
        if not store.fetch(key, archive, entry):
            return [f"its entry is gone from {store.location} (pruned or deleted since the plan job listed it)"]
    except CacheError as error:
        return [str(error)]
    return check_entry(entry, archive, key, contract, version, str(root / "build"), trust)


def restore_report(restored: Sequence[Restored], location: str) -> str:
    """The restore step's job summary: each hit and what became of it."""
    good = [r for r in restored if r.ok]
    lines = [f"### Restored from the binary cache: {len(good)} of {len(restored)} hits", "",
             f"Each entry of `{location}` checked as a restore in scons is: signature (keys/binary-cache.pub), "
             "manifest, every member, the contract.", "", "| leg | result |", "|---|---|"]
    lines += [f"| `{r.id}` | " + ("restored, checked" if r.ok else "refused: " + "; ".join(r.problems)) + " |"
              for r in restored]
    return "\n".join(lines) + "\n"


def refusal_message(refused: Sequence[Restored], location: str) -> str:
    """What a maintainer does when a hit's entry does not check out (its leg had no runner)."""
    return (f"{len(refused)} binary cache hit(s) refused: {', '.join(r.id for r in refused)}. The plan job took "
            f"them as hits, so no runner job built them in this run. Delete each one's two assets "
            f"(<key>-<archive> and <key>-<archive>.entry) from {location} and use \"Re-run all jobs\": the "
            "legs then build (the job summary has each refusal's reason).")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
