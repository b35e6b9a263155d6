"""Pinned decisions: a release that changes any of these reshuffles ownership."""

from __future__ import annotations

import json

from hashring import (
    key_hash,
    member_hash,
    owners_of,
    plan_assignment,
    stable_assignment,
    string_key_hash,
)
from hashring.balance import PLACEMENT_VERSION
from tests.support.paths import ROOT

GOLDEN = json.loads(
    (ROOT / "tests" / "data" / "golden_vectors.json").read_text(encoding="utf-8")
)


def test_key_hashes() -> None:
    for case in GOLDEN["key_hashes"]:
        assert key_hash(case["consumer"], case["shard"]) == int(case["key_hash"]), case
    for member, h in GOLDEN["member_hashes"].items():
        assert member_hash(member) == int(h)
    for key, h in GOLDEN["string_key_hashes"].items():
        assert string_key_hash(key) == int(h)


def test_strategy_decisions() -> None:
    assert len(GOLDEN["decisions"]) >= 30
    for d in GOLDEN["decisions"]:
        got = owners_of(d["consumer"], d["shard"], d["members"], strategy=d["strategy"],
                        replicas=d["replicas"])
        assert got == d["owners"], d


def test_planner_decisions() -> None:
    p = GOLDEN["plan"]
    plan = plan_assignment(p["members"], p["keys"], replicas=p["replicas"])
    assert {k: list(v) for k, v in plan.owners.items()} == p["owners"]


def test_stable_assignment_decisions() -> None:
    assert GOLDEN["placement_version"] == PLACEMENT_VERSION
    assert len(GOLDEN["stable"]) >= 3
    for case in GOLDEN["stable"]:
        plan = stable_assignment(case["members"], case["keys"], replicas=case["replicas"])
        assert {k: list(v) for k, v in plan.owners.items()} == case["owners"], case["members"]
