"""The lease coordinator for resources that are not Kinesis shards: partition queues.

    .venv/bin/python examples/coordinator_generic.py [--queues 12] [--lease-duration 2]

Twelve "partition queues" (think RabbitMQ queues, license keys, cron partitions) must each
be consumed by exactly one member, evenly. Three members run in this process, each with its
own :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` thread and
:class:`~kinesis.lease_loop.membership.DynamoDBMembership` (heartbeat rows in the lease table), against
an embedded DynamoDB (moto server on 127.0.0.1). The script shows:

1. start: 3 members split 12 queues 4/4/4 without racing for them;
2. scale-out: a 4th member joins and receives 3 queues by graceful hand-off;
3. scale-in: a member stops gracefully (SIGTERM-style): its queues move at once;
4. crash: a member stops ticking without a word: after the lease duration (and the
   membership timeout) the others take its queues over.

A sampler thread checks all along that no queue is ever held by two members at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kinesis.lease_loop import Completion, DynamoDBMembership, Lease, LeaseCoordinator, LeaseTable  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402


class QueueConsumer:
    """The listener: 'consumes' the queues it is given; stops one when asked to hand it off."""

    def __init__(self, name: str, log: Callable[[str], None]):
        self.name = name
        self.log = log
        self.consuming: set[str] = set()
        self._lock = threading.Lock()

    def on_lease_acquired(self, lease: Lease) -> None:
        with self._lock:
            self.consuming.add(lease.key)
        self.log(f"{self.name:>9} starts consuming {lease.key}")

    def on_lease_lost(self, lease: Lease) -> None:
        with self._lock:
            self.consuming.discard(lease.key)
        self.log(f"{self.name:>9} lost {lease.key}")

    def on_handoff_requested(self, lease: Lease) -> Completion:
        done = threading.Event()

        def drain() -> None:  # finish the message in flight, ack it, then let go
            with self._lock:
                self.consuming.discard(lease.key)
            done.set()

        threading.Thread(target=drain, daemon=True).start()
        return done


class Member:
    """One member: a membership heartbeat, a coordinator thread and a consumer."""

    def __init__(self, table: LeaseTable, name: str, queues: list[str], lease_duration: float, log: Callable[[str], None]):
        self.name = name
        self.membership = DynamoDBMembership(table, name, member_timeout=lease_duration)
        self.consumer = QueueConsumer(name, log)
        self.coordinator = LeaseCoordinator(
            table, self.membership, queues, self.consumer, lease_duration=lease_duration
        )

    def start(self) -> Member:
        self.coordinator.start()
        return self

    def held(self) -> tuple[str, ...]:
        return self.coordinator.held_keys()


class OverlapSampler(threading.Thread):
    """Samples every member's ``holds()`` and counts queues held by two members at once."""

    def __init__(self, members: dict[str, Member], queues: list[str]):
        super().__init__(daemon=True)
        self.members = members
        self.queues = queues
        self.samples = 0
        self.overlaps = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.01):
            members = list(self.members.values())
            for queue in self.queues:
                if sum(1 for m in members if m.coordinator.holds(queue)) > 1:
                    self.overlaps += 1
            self.samples += 1

    def stop(self) -> None:
        self._halt.set()
        self.join()


def wait_for(condition: Callable[[], bool], timeout: float) -> float:
    """Wait until ``condition()`` holds; return the seconds it took (raise on timeout)."""
    start = time.monotonic()
    done = threading.Event()
    while not condition():
        if time.monotonic() - start > timeout:
            raise TimeoutError("the fleet did not settle in time")
        done.wait(0.02)
    return time.monotonic() - start


def main(argv: list[str] | None = None, *, quiet: bool = False) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=int, default=12)
    parser.add_argument("--lease-duration", type=float, default=2.0)
    args = parser.parse_args(argv)
    queues = [f"partition-queue-{i:02d}" for i in range(args.queues)]
    duration = args.lease_duration
    log: Callable[[str], None] = (lambda _msg: None) if quiet else print
    results: dict[str, Any] = {"phases": {}}

    def balance(title: str, members: dict[str, Member], seconds: float) -> None:
        counts = {name: len(m.held()) for name, m in sorted(members.items())}
        results["phases"][title] = {"counts": counts, "seconds": round(seconds, 2)}
        bar = "  ".join(f"{name}={'#' * n} {n}" for name, n in counts.items())
        log(f"--- {title}: settled in {seconds:.2f} s ({seconds / duration:.1f} lease durations)\n    {bar}")

    def settled(members: dict[str, Member]) -> Callable[[], bool]:
        def check() -> bool:
            counts = [len(m.held()) for m in members.values()]
            everyone = {q for m in members.values() for q in m.held()}
            return everyone == set(queues) and max(counts) - min(counts) <= 1
        return check

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the embedded server's access log
    with LocalAWS() as aws:
        table = LeaseTable.open(aws.client("dynamodb"), "partition-queue-leases")
        members = {n: Member(table, n, queues, duration, log) for n in ("member-a", "member-b", "member-c")}
        sampler = OverlapSampler(members, queues)
        sampler.start()
        for m in members.values():
            m.start()
        balance("start (3 members)", members, wait_for(settled(members), 30 * duration))

        members["member-d"] = Member(table, "member-d", queues, duration, log).start()
        balance("scale-out (+member-d)", members, wait_for(settled(members), 30 * duration))

        leaving = members.pop("member-b")
        started = time.monotonic()
        handed_off = leaving.coordinator.stop(graceful=True, timeout=5 * duration)
        balance("scale-in (member-b stops gracefully)", members, time.monotonic() - started + wait_for(settled(members), 30 * duration))
        results["graceful_stop_handed_everything_off"] = handed_off

        crashed = members.pop("member-c")
        started = time.monotonic()
        crashed.coordinator.stop(graceful=False)  # no hand-off, no leave: it just goes silent
        balance("crash (member-c goes silent)", members, time.monotonic() - started + wait_for(settled(members), 30 * duration))

        sampler.stop()
        counters = {
            name: sum(m.coordinator.counters[name] for m in (*members.values(), leaving, crashed))
            for name in ("created", "adopted", "takeovers", "handoffs", "offers_withdrawn", "leases_lost")
        }
        for m in members.values():
            m.coordinator.stop(graceful=True, timeout=5 * duration)
        results.update(counters=counters, overlaps=sampler.overlaps, samples=sampler.samples)
        log(f"counters: {counters}")
        log(f"double holders seen in {sampler.samples} samples: {sampler.overlaps}")
    return results


if __name__ == "__main__":
    outcome = main()
    sys.exit(1 if outcome["overlaps"] else 0)
