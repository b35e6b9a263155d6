"""The placement simulator, checked against facts established independently of it."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from collections import Counter

import pytest

from hashring import ConfigurationError, UnknownStrategyError, owners_of
from hashring.hashing import key_bytes
from hashring.ketama import KetamaRing
from hashring.sim.fleet import timeline
from hashring.sim.placers import SimKeys, make_placer
from hashring.simulate import (
    GridReport,
    ScenarioResult,
    SimulationSizeError,
    UnknownScenarioError,
    run_grid,
    run_timeline,
    simulate,
)

CHANGES = ("scale-out", "scale-in", "crash")


def spread(owners: list[str], members: tuple[str, ...]) -> int:
    counts = Counter(owners)
    loads = [counts.get(m, 0) for m in members]
    return max(loads) - min(loads)


# --- the placers are the library's strategies ---------------------------------------------


@pytest.mark.parametrize("strategy", ["range", "rendezvous", "jump"])
def test_placers_agree_with_owners_of_key_by_key(strategy: str) -> None:
    keys = SimKeys.kinesis("orders", 150)
    placer = make_placer(strategy, keys)
    members = timeline("steady", placer.workload, 7, seed=3).states[0]
    placed = placer.place(members, None)
    expected = [owners_of("orders", s, members, strategy=strategy)[0] for s in keys.shards]
    assert placed == expected


def naive_ketama(members: list[str], consumer: str, shard: str, vnodes: int) -> str:
    """Textbook ketama, written independently: md5 points, bisect, wrap around."""
    ring = []
    for m in members:
        pts: list[int] = []
        i = 0
        while len(pts) < vnodes:
            d = hashlib.md5(f"{m}-{i}".encode()).digest()
            pts += [int.from_bytes(d[j:j + 4], "little") for j in range(0, 16, 4)]
            i += 1
        ring += [(p, m) for p in pts[:vnodes]]
    ring.sort()
    point = int.from_bytes(hashlib.md5(key_bytes(consumer, shard)).digest()[:4], "little")
    i = bisect.bisect_left(ring, (point, ""))
    return ring[i % len(ring)][1]


@pytest.mark.parametrize("vnodes", [1, 7, 160])
def test_ketama_matches_a_textbook_implementation(vnodes: int) -> None:
    members = [f"pod-{c}" for c in "abcdefg"]
    keys = SimKeys.kinesis("orders", 120)
    placed = make_placer("ketama", keys, vnodes=vnodes).place(members, None)
    assert placed == [naive_ketama(members, "orders", s, vnodes) for s in keys.shards]
    assert KetamaRing(members, vnodes).owner("orders", keys.shards[5]) == placed[5]


def test_ketama_rejects_bad_vnodes() -> None:
    with pytest.raises(ConfigurationError, match="vnodes"):
        KetamaRing(["a"], 0)
    with pytest.raises(ConfigurationError, match="vnodes"):
        run_grid([10], [3], ["steady"], ["ketama"], vnodes=-5)


# --- scenarios ----------------------------------------------------------------------------


def test_deployment_timelines_follow_kubernetes_semantics() -> None:
    n = 6
    start = timeline("steady", "deployment", n, seed=1).states
    assert len(start) == 1 and len(set(start[0])) == n
    out = timeline("scale-out", "deployment", n, seed=1).states
    assert out[0] == start[0] and set(out[0]) < set(out[1]) and len(out[1]) == n + 1
    inn = timeline("scale-in", "deployment", n, seed=1).states
    assert inn[1] == inn[0][:-1]  # the youngest pod (last created) goes
    crash = timeline("crash", "deployment", n, seed=1).states
    assert set(crash[1]) < set(crash[0]) and len(crash[1]) == n - 1
    roll = timeline("rolling-deploy", "deployment", n, seed=1).states
    assert len(roll) == 2 * n + 1
    for before, after in itertools.pairwise(roll):
        assert abs(len(after) - len(before)) == 1  # one pod at a time
        assert n <= len(after) <= n + 1  # maxSurge=1, maxUnavailable=0
    assert not set(roll[-1]) & set(roll[0])  # every pod replaced
    old_hash = {p.split("-")[1] for p in roll[0]}
    new_hash = {p.split("-")[1] for p in roll[-1]}
    assert len(old_hash) == len(new_hash) == 1 and old_hash != new_hash


def test_statefulset_timelines_keep_names() -> None:
    roll = timeline("rolling-deploy", "statefulset", 4).states
    assert roll[0] == roll[-1] == ("worker-0", "worker-1", "worker-2", "worker-3")
    assert [set(roll[0]) - set(s) for s in roll[1::2]] == [
        {"worker-3"}, {"worker-2"}, {"worker-1"}, {"worker-0"}
    ]
    assert timeline("scale-in", "statefulset", 4).states[1] == roll[0][:3]
    assert timeline("scale-out", "statefulset", 4).states[1][-1] == "worker-4"


def test_runs_are_reproducible_and_seeded() -> None:
    assert timeline("crash", "deployment", 5, seed=7) == timeline("crash", "deployment", 5, seed=7)
    assert timeline("steady", "deployment", 5, seed=7) != timeline("steady", "deployment", 5, 8)
    assert run_grid([50], [4], seed=2).results == run_grid([50], [4], seed=2).results


# --- the balanced planner: the bounds ---------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(64, 10), (400, 20), (5, 8), (97, 7)])
def test_planner_is_balanced_and_moves_exactly_the_optimum(k: int, n: int) -> None:
    results = {r.scenario: r for r in run_grid([k], [n], strategies=["balanced"]).results}
    for r in results.values():
        assert r.worst_spread <= 1
    join = results["scale-out"]
    assert join.moved == join.optimum == k // (n + 1)
    for s in ("scale-in", "crash"):
        leave = results[s]
        assert leave.moved == leave.optimum  # exactly the leaver's keys
        assert leave.optimum in (k // n, -(-k // n))  # a balanced leaver holds floor/ceil


def test_planner_rolling_deploy_is_within_the_balanced_bound() -> None:
    k, n = 200, 6
    keys = SimKeys.kinesis("orders", k)
    placer = make_placer("balanced", keys)
    tl = timeline("rolling-deploy", "deployment", n, seed=4)
    result, owners = run_timeline(placer, keys, tl)
    assert set(owners[-1]) <= set(tl.states[-1]) and not set(owners[-1]) & set(tl.states[0])
    assert all(spread(o, s) <= 1 for o, s in zip(owners, tl.states, strict=True))
    # Each join moves floor(K/(N+1)); each leaver holds floor or ceil of K/(N+1).
    floor = k // (n + 1)
    assert result.balanced_optimum == max(k, 2 * n * floor)
    assert result.balanced_optimum <= result.moved <= result.balanced_optimum + n
    assert result.optimum == k


# --- the stateless strategies -------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["rendezvous", "ketama"])
def test_a_join_moves_keys_only_to_the_newcomer(strategy: str) -> None:
    keys = SimKeys.kinesis("orders", 300)
    placer = make_placer(strategy, keys)
    tl = timeline("scale-out", "deployment", 8, seed=5)
    (newcomer,) = set(tl.states[1]) - set(tl.states[0])
    result, (before, after) = run_timeline(placer, keys, tl)
    changed = [b for a, b in zip(before, after, strict=True) if a != b]
    assert changed and set(changed) == {newcomer}
    assert result.moved == after.count(newcomer)


@pytest.mark.parametrize("strategy", ["rendezvous", "ketama", "jump", "balanced"])
@pytest.mark.parametrize("scenario", ["scale-in", "crash"])
def test_a_leave_moves_only_the_leavers_keys(strategy: str, scenario: str) -> None:
    keys = SimKeys.kinesis("orders", 300)
    placer = make_placer(strategy, keys)
    tl = timeline(scenario, placer.workload, 9, seed=6)
    (leaver,) = set(tl.states[0]) - set(tl.states[1])
    result, (before, after) = run_timeline(placer, keys, tl)
    moved = [a for a, b in zip(before, after, strict=True) if a != b]
    assert set(moved) == {leaver} and len(moved) == before.count(leaver)
    assert result.moved == result.optimum == before.count(leaver)


def test_jump_rolling_restart_moves_each_key_away_and_back() -> None:
    r = simulate("jump", "rolling-deploy", 300, 7)
    assert r.workload == "statefulset" and r.steps == 14
    assert r.moved == 2 * 300  # each pod's keys leave while it restarts and come back
    assert r.optimum == 0 and r.moved_over_optimum is None


def test_range_moves_far_more_than_the_optimum() -> None:
    r = simulate("range", "scale-out", 400, 10)
    assert r.moved > 2 * r.optimum
    rdv = simulate("rendezvous", "scale-out", 400, 10)
    assert rdv.moved < r.moved


# --- report shape and checks --------------------------------------------------------------


def test_grid_report_json_shape() -> None:
    report = run_grid([40, 90], [3, 5], strategies=["range", "balanced"])
    data = json.loads(json.dumps(report.to_dict()))
    assert data["params"]["keys"] == [40, 90] and data["params"]["members"] == [3, 5]
    assert len(data["results"]) == 2 * 2 * 2 * 5
    combos = {(r["keys"], r["members"], r["strategy"], r["scenario"]) for r in data["results"]}
    assert len(combos) == 40
    row = data["results"][0]
    for field in ("peak", "minimum", "average", "spread", "peak_to_average", "moved",
                  "moved_fraction", "optimum", "optimum_fraction", "moved_over_optimum",
                  "balanced_optimum", "worst_spread", "workload", "steps"):
        assert field in row
    assert set(data["summary"]) == {"range", "balanced"}
    assert data["summary"]["balanced"]["steady_spread"][1] <= 1
    assert [c["passed"] for c in data["checks"]] == [True, True]


def _fake(**changes: object) -> ScenarioResult:
    base = {"scenario": "scale-out", "strategy": "balanced", "workload": "deployment",
            "keys": 100, "members": 4, "final_members": 5, "steps": 1, "peak": 20,
            "minimum": 20, "average": 20.0, "worst_spread": 0, "moved": 20, "optimum": 20,
            "balanced_optimum": 20, "note": ""}
    base.update(changes)
    return ScenarioResult(**base)  # type: ignore[arg-type]


def test_checks_fail_when_the_bounds_are_broken() -> None:
    params = {"strategies": ["balanced"], "keys": [100], "members": [4], "seed": 0}
    ok = GridReport(params, (_fake(),))
    assert all(c.passed for c in ok.checks())
    unbalanced = GridReport(params, (_fake(worst_spread=2),))
    assert [c.passed for c in unbalanced.checks()] == [False, True]
    too_many = GridReport(params, (_fake(moved=22),))
    assert [c.passed for c in too_many.checks()] == [True, False]


def test_bad_arguments_raise_named_errors() -> None:
    with pytest.raises(UnknownScenarioError, match="choose one of"):
        run_grid([10], [3], ["meltdown"])
    with pytest.raises(UnknownStrategyError, match="ketama"):
        run_grid([10], [3], ["steady"], ["consistent"])
    with pytest.raises(SimulationSizeError, match=">= 1"):
        run_grid([0], [3])
    with pytest.raises(SimulationSizeError, match="at least 2 members"):
        run_grid([10], [1], ["crash"])
    with pytest.raises(ValueError):  # every simulator error is a ValueError too
        run_grid([10], [3], [])


def test_stable_is_balanced_in_every_state_and_checked() -> None:
    report = run_grid([64, 400], [7, 20], strategies=["stable"])
    assert all(r.worst_spread <= 1 for r in report.results)
    for r in report.select(scenario="scale-out") + report.select(scenario="crash"):
        assert r.moved >= r.optimum > 0
    (check,) = report.checks()
    assert check.name.startswith("stable: max - min <= 1") and check.passed
