"""azure-eventhub's real load balancer, several processors on one in-memory checkpoint store.

Runs in azure-eventhub's own environment (``benchmarks/peers/.venvs/azure-eventhub``);
there is no Event Hubs service here, so no events flow: this measures the lease loop only.

    python benchmarks/peers/azure_sim.py --partitions 16 --members 4 --seed 0 \\
        [--strategy greedy|balanced] [--interval 30]

Each member is azure-eventhub's own ``OwnershipManager`` (``_eventprocessor/ownership_manager.py``,
the code ``EventProcessor._load_balancing`` calls) with the library's defaults: load-balancing
interval 30 s plus up to 20% random jitter per cycle (as ``EventProcessor`` sleeps),
ownership expiry 6 x interval = 180 s, strategy ``greedy`` (``balanced`` with
``--strategy``). All members share one ``InMemoryCheckpointStore`` (ETag-checked claims, the
library's own). Time is simulated: ``time.time`` in those two modules is replaced by a
discrete-event clock, ``random`` is seeded. A graceful stop is ``EventProcessor.stop``'s
effect (``release_ownership`` for every owned partition); a SIGKILL stops a member's cycles.

Store calls are counted per member the way ``BlobCheckpointStore`` would send them: one
list request per ``list_ownership``, one blob upload per ownership in ``claim_ownership``.
Prints one JSON document (the same phase layout as the process peers in bench_peers.py).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
import types
from collections import Counter
from typing import Any

from azure.eventhub._eventprocessor import in_memory_checkpoint_store as store_mod
from azure.eventhub._eventprocessor import ownership_manager as om_mod
from azure.eventhub._eventprocessor.common import LoadBalancingStrategy


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


CLOCK = Clock()
_fake_time = types.SimpleNamespace(time=CLOCK.time, sleep=lambda s: None)
om_mod.time = _fake_time
store_mod.time = _fake_time


class CountingStore:
    """One member's view of the shared store; counts the requests a blob store would send."""

    def __init__(self, store: Any, counts: Counter[str]):
        self._store = store
        self.counts = counts

    def list_ownership(self, *args: Any, **kwargs: Any) -> Any:
        self.counts["list_ownership"] += 1
        return [dict(x) for x in self._store.list_ownership(*args, **kwargs)]

    def claim_ownership(self, ownership_list: Any, **kwargs: Any) -> Any:
        items = list(ownership_list)
        self.counts["claim_ownership (per partition)"] += len(items)
        return [dict(x) for x in self._store.claim_ownership(items, **kwargs)]

    def list_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        self.counts["list_checkpoints"] += 1
        return self._store.list_checkpoints(*args, **kwargs)


class FakeClient:
    """What OwnershipManager reads from an EventHubConsumerClient."""

    def __init__(self, partitions: int):
        self._address = types.SimpleNamespace(hostname="bench.servicebus.invalid")
        self.eventhub_name = "bench"
        self._ids = [str(i) for i in range(partitions)]

    def get_partition_ids(self) -> list[str]:
        return list(self._ids)


class Member:
    def __init__(self, name: str, client: FakeClient, store: Any, interval: float, strategy: Any):
        self.name = name
        self.counts: Counter[str] = Counter()
        self.interval = interval
        self.manager = om_mod.OwnershipManager(client, "$default", name, CountingStore(store, self.counts),
                                               interval * 6, strategy, None)
        self.processing: set[str] = set()
        self.alive = True

    def cycle(self) -> None:
        """One ``EventProcessor._load_balancing`` iteration (claim, start/cancel partitions)."""
        claimed = set(self.manager.claim_ownership())
        self.processing = claimed

    def stop(self) -> None:
        """``EventProcessor.stop``: close every partition consumer, releasing its ownership."""
        for pid in sorted(self.processing):
            self.manager.release_ownership(pid)
        self.processing = set()
        self.alive = False


class Sim:
    def __init__(self, partitions: int, interval: float, strategy: Any, seed: int):
        random.seed(seed)
        self.partitions = [str(i) for i in range(partitions)]
        self.client = FakeClient(partitions)
        self.store = store_mod.InMemoryCheckpointStore()
        self.interval = interval
        self.timeout = interval * 6
        self.strategy = strategy
        self.members: dict[str, Member] = {}
        self.queue: list[tuple[float, int, str]] = []
        self.seq = itertools.count()
        self.start = CLOCK.now
        self.timeline: list[tuple[float, dict[str, int]]] = []
        self.double_processing = 0.0

    def t(self) -> float:
        return CLOCK.now - self.start

    def add(self, name: str, delay: float = 0.0) -> None:
        self.members[name] = Member(name, self.client, self.store, self.interval, self.strategy)
        heapq.heappush(self.queue, (CLOCK.now + delay, next(self.seq), name))

    def live(self) -> list[str]:
        return sorted(n for n, m in self.members.items() if m.alive)

    def owners(self) -> dict[str, str | None]:
        now = CLOCK.now
        rows = {o["partition_id"]: o for o in self.store.list_ownership("bench.servicebus.invalid", "bench", "$default")}
        out: dict[str, str | None] = {}
        for pid in self.partitions:
            o = rows.get(pid)
            alive = o is not None and o["owner_id"] and o["last_modified_time"] + self.timeout >= now
            out[pid] = o["owner_id"] if alive and o is not None else None
        return out

    def counts(self) -> dict[str, int]:
        owners = self.owners()
        return {n: sum(1 for o in owners.values() if o == n) for n in self.live()}

    def balanced(self) -> bool:
        owners = self.owners()
        live = set(self.live())
        if any(o not in live for o in owners.values()):
            return False
        c = self.counts()
        return max(c.values()) - min(c.values()) <= 1

    def run_for(self, seconds: float) -> list[tuple[float, bool, tuple[tuple[str, str | None], ...]]]:
        """Run events for ``seconds``; the (time, balanced, owners) after each event."""
        end = CLOCK.now + seconds
        samples = [(CLOCK.now, self.balanced(), tuple(sorted(self.owners().items())))]
        while self.queue and self.queue[0][0] <= end:
            at, _, name = heapq.heappop(self.queue)
            member = self.members[name]
            if not member.alive:
                continue
            busy = Counter(p for m in self.members.values() if m.alive for p in m.processing)
            self.double_processing += (at - CLOCK.now) * sum(c - 1 for c in busy.values() if c > 1)
            CLOCK.now = at
            member.cycle()
            heapq.heappush(self.queue, (at + self.interval + self.interval * random.random() * 0.2,
                                        next(self.seq), name))
            samples.append((CLOCK.now, self.balanced(), tuple(sorted(self.owners().items()))))
            self.timeline.append((self.t(), self.counts()))
        CLOCK.now = end
        samples.append((CLOCK.now, self.balanced(), tuple(sorted(self.owners().items()))))
        return samples


def settle(samples: list[tuple[float, bool, Any]], start: float) -> dict[str, float | None]:
    """Seconds from ``start`` until first balanced and until the last ownership change
    (None if the phase did not end balanced)."""
    first = next((t - start for t, ok, _ in samples if ok), None)
    owned = next((t - start for t, _, own in samples if all(o is not None for _, o in own)), None)
    last_change = start
    for (_, _, a), (t, _, b) in itertools.pairwise(samples):
        if a != b:
            last_change = t
    return {"balanced_s": None if first is None else round(first, 1),
            "all_owned_s": None if owned is None else round(owned, 1),
            "stable_s": round(last_change - start, 1) if samples[-1][1] else None}


def most_loaded(sim: Sim) -> str:
    counts = sim.counts()
    return sorted(counts, key=lambda n: (-counts[n], n))[0]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strategy", choices=("greedy", "balanced"), default="greedy")
    p.add_argument("--interval", type=float, default=30.0, help="load_balancing_interval (default: the library's)")
    args = p.parse_args()
    strategy = LoadBalancingStrategy.GREEDY if args.strategy == "greedy" else LoadBalancingStrategy.BALANCED
    sim = Sim(args.partitions, args.interval, strategy, args.seed)
    window = 40 * args.interval  # every phase runs this long (simulated), then is summarised
    phases: dict[str, Any] = {}
    names = [f"m{i}" for i in range(1, args.members + 1)]
    for i, name in enumerate(names):
        sim.add(name, delay=i * 0.1)
    t0 = CLOCK.now
    phases["cold_start"] = settle(sim.run_for(window), t0)
    t0 = CLOCK.now
    newcomer = f"m{args.members + 1}"
    sim.add(newcomer)
    samples = sim.run_for(window)
    phases["join"] = settle(samples, t0)
    first = next((t - t0 for t, _, own in samples if any(o == newcomer for _, o in own)), None)
    phases["join"]["newcomer_first_lease_s"] = None if first is None else round(first, 1)
    for phase, how in (("sigterm", "stop"), ("sigkill", "kill")):
        victim = most_loaded(sim)
        held = {p for p, o in sim.owners().items() if o == victim}
        t0 = CLOCK.now
        if how == "stop":
            sim.members[victim].stop()
        else:
            sim.members[victim].alive = False
            sim.members[victim].processing = set()
        samples = sim.run_for(window)
        phases[phase] = settle(samples, t0)
        live = set(sim.live())
        back = next((t - t0 for t, _, own in samples if all(dict(own)[p] in live for p in held)), None)
        phases[phase].update(victim=victim, victim_leases=len(held),
                             leases_back_s=None if back is None else round(back, 1))
    before = {n: Counter(m.counts) for n, m in sim.members.items()}
    steady = 600.0
    sim.run_for(steady)
    per_member = {}
    for n in sim.live():
        diff = sim.members[n].counts - before[n]
        per_member[n] = {op: round(c * 60 / steady, 2) for op, c in sorted(diff.items())}
    totals = [sum(v.values()) for v in per_member.values()]
    print(json.dumps({
        "peer": "azure-eventhub", "strategy": args.strategy, "partitions": args.partitions,
        "members": args.members, "seed": args.seed, "load_balancing_interval_s": args.interval,
        "ownership_expiry_s": sim.timeout, "phase_window_s": window, "phases": phases,
        "store_requests_per_member_per_minute": per_member,
        "store_requests_per_member_per_minute_mean": round(sum(totals) / len(totals), 2),
        "double_processing_partition_seconds": round(sim.double_processing, 1),
        "final_counts": sim.counts(),
        "timeline": [(round(t, 1), c) for t, c in sim.timeline],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
