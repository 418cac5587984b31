"""Binary cache hits are resolved in the plan job: a hit leg gets no runner job. Measured on the
real matrix by bench/ci_cost.py, which runs the plan job's own `run:` script against the fake
GitHub API (a copy of this tree with every input pinned, made-up pins; a cache filled through
the real store, signed by a key the copy trusts), then replays what the run's jobs ask GitHub.
Pull requests only read; an entry a restore would refuse is a miss; the manifest times the
build, and the store's label carries it to the plan job's summary."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from backends.cache.release_store import GitHubReleaseStore, Listed, entry_label
from backends.cache.trust import Trust, key_id, keygen, load_signer
from backends.ci import main as ci, cache_hits as ci_cache
from backends.steps import manifest as manifest_step
from backends.util import github as github_api
from fake_github import REPO, TOKEN, FakeGitHub, serve
from scratch import bench_module

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("yaml", reason="PyYAML reads the workflow's plan step")
LINE = re.compile(r"ci-cost (no-change|one-patch|one-engine): jobs macos=(\d+) windows=(\d+) linux=(\d+) "
                  r"api_requests=(\d+)")


bench = bench_module("ci_cost")


@pytest.fixture(autouse=True, scope="module")
def no_rate_limit_waits() -> Iterator[None]:
    saved = github_api.RATE_LIMIT_WAIT
    github_api.RATE_LIMIT_WAIT = 0.0  # past the fake's budget: a failure, never a wait
    yield
    github_api.RATE_LIMIT_WAIT = saved


@pytest.fixture(scope="module")
def costs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {scenario.name: (scenario, cost) for scenario, cost in bench.scenarios(tmp_path_factory.mktemp("bench"))}


@pytest.fixture(scope="module")
def simulation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, list[dict[str, Any]]]:
    tree, signer = bench.simulation_tree(tmp_path_factory.mktemp("simulation"))
    return tree, signer, bench.ci_matrix(tree)


def _filled(github: FakeGitHub, simulation: tuple[Path, Any, list[dict[str, Any]]], scratch: Path) -> None:
    _, signer, entries = simulation
    bench.fill_cache(github, entries, signer, scratch / "cache")


# -- the bench's three scenarios ------------------------------------------------------------------

def test_a_push_that_changes_nothing_starts_no_macos_or_windows_job(costs: dict[str, Any]) -> None:
    _, cost = costs["no-change"]
    assert cost.ran == set() and len(cost.hits) > 100  # the whole matrix hits
    assert cost.jobs == {"macos": 0, "windows": 0, "linux": 2}  # ci.yml's changes job and the plan job
    assert cost.api_requests <= 50
    assert cost.requests["plan job"] == 1  # one listing: it carries every asset
    assert LINE.fullmatch(cost.line())
    assert f"{len(cost.hits)} of {len(cost.hits)} legs hit" in cost.summary
    linux = next(line for line in cost.summary.splitlines() if line.startswith("| linux |"))
    assert int(linux.split("|")[5]) > 0  # runner minutes saved, from the labels' build times


def test_one_patch_runs_exactly_the_legs_it_applies_to_and_the_aggregates_over_them(costs: dict[str, Any]) -> None:
    scenario, cost = costs["one-patch"]
    assert scenario.expected and cost.ran == scenario.expected
    assert any("universal" in leg for leg in cost.ran)  # the aggregate over the patched legs runs too
    assert cost.jobs["windows"] == 0 and cost.jobs["linux"] == 2 and cost.jobs["macos"] == len(cost.ran)
    assert cost.hits.isdisjoint(cost.ran) and len(cost.hits) + len(cost.ran) > 100
    assert cost.api_requests <= 50 and LINE.fullmatch(cost.line())
    for leg in cost.ran:
        assert f"| `{leg}` |" in cost.summary and "its key is not in the cache" in cost.summary


def test_one_engine_bumped_runs_that_engines_legs(costs: dict[str, Any]) -> None:
    scenario, cost = costs["one-engine"]
    assert cost.ran == scenario.expected and {leg.split("-")[0] for leg in cost.ran} == {bench.BUMP[0]}
    assert LINE.fullmatch(cost.line())


# -- who reads the cache ----------------------------------------------------------------------------

def test_a_pull_requests_plan_job_cannot_see_the_draft_and_every_leg_runs(simulation: Any, tmp_path: Path) -> None:
    """A pull request's token is contents: read: GitHub lists no draft to it. Its plan job stays
    green, starts every leg's runner job and says why in the job summary; it writes nothing."""
    tree, _, entries = simulation
    with serve() as github:
        _filled(github, simulation, tmp_path)
        github.push_access = False
        done, outputs, summary = bench.run_plan(tree, github, tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(outputs["hits"]) == []
        ran = [e["id"] for kind in ("legs", "aggregates") for e in json.loads(outputs[kind])["include"]]
        assert sorted(ran) == sorted(e["id"] for e in entries)
        assert "cannot be seen" in summary and "contents: read" in summary
        assert {method for method, _ in github.calls} == {"GET"}


def test_a_published_cache_release_lets_pull_requests_resolve_hits_and_restore_them(simulation: Any,
                                                                                     tmp_path: Path) -> None:
    """With the cache release published (Immutable Releases off), every token sees it: a fork's
    pull request resolves hits and its aggregates download their hit inputs, reading only."""
    tree, _, entries = simulation
    with serve() as github:
        _filled(github, simulation, tmp_path)
        github.publish("binary-cache")
        github.push_access = False
        done, outputs, _ = bench.run_plan(tree, github, tmp_path)
        assert done.returncode == 0, done.stderr
        hits = json.loads(outputs["hits"])
        assert len(hits) == len(entries) and json.loads(outputs["legs"])["include"] == []
        hit = hits[0]
        assert bench.job_store(github).fetch(hit["key"], hit["archive"], tmp_path / "restored")
        assert {method for method, _ in github.calls} == {"GET"}


def test_an_entry_a_restore_would_refuse_is_a_miss(simulation: Any, tmp_path: Path) -> None:
    """Labelled unsigned, or signed by a key the checkout does not trust: its leg runs (and its
    store replaces the entry); the others still hit."""
    tree, signer, entries = simulation
    stranger = load_signer(str(keygen(tmp_path / "keys" / "other")[0]), {})
    legs = [e for e in entries if not e["needs"]][:2]
    with serve() as github:
        bench.fill_cache(github, [e for e in entries if e not in legs], signer, tmp_path / "cache")
        bench.store_entry(github, legs[0], stranger, tmp_path / "stranger")
        unsigned = bench.entry_files(legs[1], signer, tmp_path / "unsigned")[1:]  # no .sig
        bench.job_store(github).put(legs[1]["key"], unsigned)
        done, outputs, summary = bench.run_plan(tree, github, tmp_path)
    assert done.returncode == 0, done.stderr
    ran = {e["id"] for e in json.loads(outputs["legs"])["include"]}
    assert ran == {legs[0]["id"], legs[1]["id"]}
    assert f"signed by key {key_id(stranger.public)}, which this checkout does not trust" in summary
    assert "signed by no key" in summary


def test_without_a_trusted_key_every_leg_runs(simulation: Any, tmp_path: Path) -> None:
    tree, _, entries = simulation
    untrusting = tmp_path / "tree"
    shutil.copytree(tree, untrusting, ignore=shutil.ignore_patterns("keys"))
    with serve() as github:
        _filled(github, simulation, tmp_path)
        done, outputs, summary = bench.run_plan(untrusting, github, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(outputs["hits"]) == [] and len(json.loads(outputs["legs"])["include"]) > 90
    assert "no key is trusted" in summary


def test_a_listing_the_rate_limit_refuses_fails_the_plan_job(simulation: Any, tmp_path: Path) -> None:
    """Never a quiet miss: a run that cannot tell hits from misses stops in its plan job."""
    tree, _, _ = simulation
    with serve() as github:
        _filled(github, simulation, tmp_path)
        github.exhaust(reset_in=3600, times=5)
        done, outputs, _ = bench.run_plan(tree, github, tmp_path)
    assert done.returncode != 0 and outputs == {}
    assert "rate limit" in done.stderr and "cannot tell hits from misses" in done.stderr


# -- outputs, labels, durations ---------------------------------------------------------------------

def _hit(entry: dict[str, Any]) -> ci_cache.Hit:
    return ci_cache.Hit(entry["id"], entry["key"] or "k", entry["archive"], entry["runner"], entry["publish"], 60)


def test_an_aggregate_restores_its_hit_inputs_and_downloads_the_others(simulation: Any) -> None:
    _, _, entries = simulation
    aggregate = next(e for e in entries if e["needs"])
    by_id = {e["id"]: e for e in entries}
    hit, missed = aggregate["needs"]
    outputs = ci.plan_outputs(entries, {hit: _hit(by_id[hit])})
    [built] = [e for e in json.loads(outputs["aggregates"])["include"] if e["id"] == aggregate["id"]]
    assert built["inputs"] == [by_id[missed]["archive"]]
    assert built["restore"] == [{"id": hit, "key": by_id[hit]["key"], "archive": by_id[hit]["archive"],
                                 "publish": by_id[hit]["publish"]}]
    assert hit not in {e["id"] for e in json.loads(outputs["legs"])["include"]}
    assert json.loads(outputs["matrix"])["include"] == entries  # the release still requires every leg
    skipped = ci.plan_outputs(entries, {aggregate["id"]: _hit(aggregate)})
    assert aggregate["id"] not in {e["id"] for e in json.loads(skipped["aggregates"])["include"]}


def test_why_not_a_hit() -> None:
    trusted = "ed25519:" + "A" * 43 + "="
    listing = ci_cache.Listing("github:o/r@c", {("k", "a.zip"): Listed("k", "a.zip", "leg", key_id(trusted), 90),
                                                ("u", "a.zip"): Listed("u", "a.zip", "leg")},
                               Trust(frozenset({trusted})))
    assert listing.why_not("k", "a.zip") == ""
    assert listing.why_not("", "a.zip") == "it has no key"
    assert listing.why_not("k", "b.zip") == "its key is not in the cache"
    assert "signed by no key" in listing.why_not("u", "a.zip")
    assert ci_cache.Listing("x", listing.entries, Trust(frozenset(), unsigned=True)).why_not("u", "a.zip") == ""
    assert ci_cache.Hit("l", "k", "a.zip", "macos-15", True, 90).minutes == 2 + ci_cache.JOB_OVERHEAD_MINUTES


def test_the_manifest_times_the_build_and_the_entry_label_carries_it(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    manifest_step.note_seconds("build", steps / "build.json", 1234.56)
    manifest_step.note_seconds("stage", steps / "stage.json", 5.04)
    manifest_step.note_seconds("verify", steps / "verify.json", 9.0)  # after the manifest: not the build's
    durations = manifest_step.step_seconds(steps, ["build", "stage"])
    assert durations == {"build": 1234.6, "stage": 5.0} and not (steps / "verify.seconds").exists()
    assert manifest_step.build_seconds({"durations": durations}) == pytest.approx(1239.6)
    assert manifest_step.build_seconds({}) is None

    secret, _ = keygen(tmp_path / "keys" / "k")
    signer = load_signer(str(secret), {})
    archive = tmp_path / "entry" / "pkg.zip"
    archive.parent.mkdir()
    archive.write_bytes(b"PK")
    archive.with_name("pkg.zip.json").write_text(json.dumps({"leg": {"id": "leg"}, "durations": durations}))
    signature = signer.sign("ab" * 32, archive)
    assert entry_label("leg", [signature, archive.with_name("pkg.zip.json"), archive], archive) == \
        f"leg signed={key_id(signer.public)} build=1240s"
    assert entry_label("leg", [archive], archive) == "leg"


def test_the_store_labels_entries_and_lists_only_complete_ones(simulation: Any, tmp_path: Path) -> None:
    _, signer, entries = simulation
    entry = entries[0]
    with serve() as github:
        store = bench.job_store(github)
        assert store.listing() is None  # no release yet
        bench.store_entry(github, entry, signer, tmp_path)
        name = f"{entry['key']}-{entry['archive']}"
        labels = github.labels("binary-cache")
        assert labels[name] == entry["id"]
        assert labels[name + ".entry"].startswith(f"{entry['id']} signed={key_id(signer.public)} build=")
        listed = bench.job_store(github).listing()
        assert listed is not None and listed[entry["key"], entry["archive"]].signer == key_id(signer.public)
        assert listed[entry["key"], entry["archive"]].seconds is not None
        # A half-uploaded .entry is no entry.
        asset = next(a for a in github.assets[github.release("binary-cache")["id"]] if a["name"] == name + ".entry")
        asset["state"] = "starter"
        assert bench.job_store(github).listing() == {}
        assert isinstance(store, GitHubReleaseStore)


def test_a_tagged_run_after_a_green_main_restores_in_the_release_job_alone(
        simulation: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every leg hits: no runner job but the changes, plan and release jobs. The release job
    restores each published hit (one listing, two downloads each) and releases them."""
    from backends.ci import release

    tree, _, entries = simulation
    with serve() as github:
        _filled(github, simulation, tmp_path)
        done, outputs, _ = bench.run_plan(tree, github, tmp_path, release="true")
        assert done.returncode == 0, done.stderr
        assert {method for method, _ in github.calls} == {"GET"}  # the plan job (contents: write) writes nothing
        planning = bench.counted(github)
        assert json.loads(outputs["legs"])["include"] == json.loads(outputs["aggregates"])["include"] == []
        hits = [hit for hit in json.loads(outputs["hits"]) if hit["publish"]]
        store, dist = bench.job_store(github), tmp_path / "dist"
        dist.mkdir()
        for hit in hits:  # the fetches of `backends.ci.main restore` (the fake archives would fail its checks)
            entry = tmp_path / "entries" / hit["id"]
            assert store.fetch(hit["key"], hit["archive"], entry)
            for name in (hit["archive"], hit["archive"] + ".json", hit["archive"] + ".sha256"):
                shutil.copy(entry / name, dist / name)
        restoring = bench.counted(github)
        (tmp_path / "matrix.json").write_text(outputs["matrix"])
        assert release.main(["--repo", REPO, "--tag", "v9.9.9", "--dist", str(dist), "--matrix",
                             str(tmp_path / "matrix.json"), "--api", github.base],
                            environ={"GITHUB_TOKEN": TOKEN}) == 0
        releasing = bench.counted(github)
    capsys.readouterr()
    with capsys.disabled():
        print(f"\ntagged run after a green main ({len(entries)} legs, all hits, {len(hits)} published): GitHub REST "
              f"requests: plan job {planning}, release job restore {restoring}, release job release {releasing}, "
              f"total {planning + restoring + releasing}")
    assert planning == 1 and restoring == 1 + 2 * len(hits)
    assert planning + restoring + releasing < 700  # tests/unit/ci/test_api_budget.py's TAGGED_BUDGET
