"""Writes golden_vectors.json. Run only when a release deliberately changes placement.

    python tests/data/make_golden_vectors.py
"""

from __future__ import annotations

import json
import pathlib

from hashring import (
    key_hash,
    member_hash,
    owners_of,
    plan_assignment,
    stable_assignment,
    string_key_hash,
)
from hashring.balance import PLACEMENT_VERSION

CASES = [
    ("orders", "shardId-000000000000"),
    ("orders", "shardId-000000000001"),
    ("billing-consumer", "shardId-000000000017"),
    ("ünïcødé", "shard/ß"),
    ("", ""),
    ("a", "bc"),
    ("ab", "c"),
]
MEMBER_LISTS = [
    ["consumer-0", "consumer-1", "consumer-2"],
    [f"consumer-{i}" for i in range(10)],
    ["pod-7f9c4-abcde", "pod-7f9c4-fghij", "pod-7f9c4-klmno", "pod-85d2b-pqrst"],
]


def build() -> dict[str, object]:
    hashes = [{"consumer": c, "shard": s, "key_hash": str(key_hash(c, s))} for c, s in CASES]
    members = sorted({m for ml in MEMBER_LISTS for m in ml})
    decisions = []
    for ml in MEMBER_LISTS:
        for strategy in ("range", "rendezvous", "jump"):
            if strategy == "jump" and not ml[0].startswith("consumer-"):
                continue
            for c, s in CASES[:4]:
                decisions.append({
                    "members": ml, "strategy": strategy, "replicas": 2, "consumer": c,
                    "shard": s, "owners": owners_of(c, s, ml, strategy=strategy, replicas=2),
                })
    keys = [f"orders/shardId-{i:012d}" for i in range(23)]
    plan = plan_assignment(MEMBER_LISTS[1], keys, replicas=1)
    stable = [
        {"members": ml, "replicas": 1,
         "owners": {k: list(v) for k, v in stable_assignment(ml, keys, replicas=1).owners.items()}}
        for ml in MEMBER_LISTS
    ]
    return {
        "placement_version": PLACEMENT_VERSION,
        "encoding": "mmh3 x64_128 seed 0, first 64-bit word, of u32be(len(c)) + c + s",
        "key_hashes": hashes,
        "member_hashes": {m: str(member_hash(m)) for m in members},
        "string_key_hashes": {k: str(string_key_hash(k)) for k in keys[:5]},
        "decisions": decisions,
        "plan": {"members": MEMBER_LISTS[1], "keys": keys, "replicas": 1,
                 "owners": {k: list(v) for k, v in plan.owners.items()}},
        "stable": [{"keys": keys, **s} for s in stable],
    }


if __name__ == "__main__":
    out = pathlib.Path(__file__).with_name("golden_vectors.json")
    out.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
