"""The chaos suite's invariant checker: what the members journaled, what the producer wrote,
the faults injected and the lease table's history, checked against the guarantees.

Inputs (all on one host, times are ``time.time_ns()``):

* the members' ledgers (``examples/demo_member.py`` format: I/R/S/E/L lines), read with
  ``examples.demo_fleet.read_ledgers`` and audited with ``examples.demo_fleet.audit`` (lost
  records, order within a session, per-key order, overlapping sessions of two members);
* the members' checkpoint journals (``tests/chaos/chaos_member.py``: C/X lines with the
  window ``[t0, t1]`` in which the write was applied);
* what the producer wrote, with the time each PutRecords call started;
* the faults injected (kind, target member, window);
* samples of the lease table taken while running, and the table at the end.

:func:`check` returns a :class:`Report` whose ``violations`` say exactly what broke where
(empty when every invariant holds) and whose ``figures`` describe the run.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from examples.demo_fleet import Event, Produced, audit, read_ledgers

Position = tuple[int, int, int]
"""``Checkpoint.order_key``: (rank, sequence, sub); rank 0 initial, 1 a record, 2 SHARD_END."""
INITIAL: Position = (0, 0, 0)
SHARD_END: Position = (2, 0, 0)
NS = 1_000_000_000


def position(seq: str, sub: int = 0) -> Position:
    if seq in ("", "-", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"):
        return INITIAL
    if seq == "SHARD_END":
        return SHARD_END
    return (1, int(seq), sub)


def show(p: Position) -> str:
    return {0: "initial", 2: "SHARD_END"}.get(p[0], f"{p[1]}/{p[2]}")


@dataclass(frozen=True)
class CheckpointWrite:
    member: str
    shard_id: str
    position: Position
    ok: bool
    """True: the write succeeded; False: it was refused (LeaseLostError)."""
    t0: int
    t1: int


def read_checkpoints(out_dir: Path) -> list[CheckpointWrite]:
    """Every member's checkpoint journal (``<member>.checkpoints``); torn lines are skipped."""
    out: list[CheckpointWrite] = []
    for path in sorted(Path(out_dir).glob("*.checkpoints")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 6 or parts[0] not in ("C", "X"):
                continue
            try:
                out.append(CheckpointWrite(path.stem, parts[1], position(parts[2], int(parts[3])),
                                           parts[0] == "C", int(parts[4]), int(parts[5])))
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class FaultRecord:
    kind: str
    """kill, term, pause, dynamodb, kinesis or flap."""
    member: str
    t0: int
    t1: int
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.t1 - self.t0) / NS


@dataclass(frozen=True)
class LeaseRow:
    owner: str | None
    counter: int
    checkpoint: Position


TableSample = tuple[int, Mapping[str, LeaseRow]]
"""(time, lease key -> row) of one scan of the lease table."""


@dataclass
class Tenure:
    """One member's session on one shard: from its ``initialize`` to the next one."""

    member: str
    shard_id: str
    start: int
    checkpoint: Position
    records: list[Event] = field(default_factory=list)
    end: str = ""
    """S (hand-off), E (shard end), L (lease lost) or "" (the process died or the run ended)."""
    end_t: int = 0


def tenures(events: Iterable[Event]) -> list[Tenure]:
    by_key: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in events:
        by_key[(e.member, e.shard_id)].append(e)
    out: list[Tenure] = []
    for (member, shard), evs in by_key.items():
        current: Tenure | None = None
        for e in evs:  # a ledger is in the order its member wrote it
            if e.kind == "I":
                cp = e.checkpoint.split("/")
                current = Tenure(member, shard, e.t, position(cp[0], int(cp[1]) if len(cp) > 1 else 0))
                out.append(current)
            elif current is None:
                continue
            elif e.kind == "R":
                current.records.append(e)
            elif e.kind in ("S", "E", "L") and not current.end:
                current.end, current.end_t = e.kind, e.t
    return sorted(out, key=lambda t: t.start)


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def format(self, limit: int = 40) -> str:
        lines = [f"{len(self.violations)} invariant violation(s)"]
        lines += [f"  - {v}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)


def check(
    out_dir: Path,
    produced: Sequence[Produced],
    produced_at: Sequence[int],
    faults: Sequence[FaultRecord],
    *,
    lease_duration: float,
    stall_allowance: float,
    table_samples: Sequence[TableSample] = (),
    final_table: Mapping[str, LeaseRow] | None = None,
    steady_from: int = 0,
    keyed: bool = False,
) -> Report:
    """Check every invariant (see the module docstring); ``stall_allowance`` (seconds) is what a
    loaded machine may add to a shard's stall bound; records produced before ``steady_from``
    (the fleet starting up) are not held to the stall bound. ``keyed``: the members ran a
    keyed-parallel processor, which processes a shard's records out of order (per-key order
    holds) and writes its checkpoints itself (no journal): a session's records need not be in
    shard order, and a tenure need not go on without a gap (it skips what completed)."""
    report = Report()
    v = report.violations
    events, torn = read_ledgers(out_dir)
    writes = read_checkpoints(out_dir)
    spans = tenures(events)

    # 1. the existing ledger audit: lost, order per session, per-key order, overlapping holders
    result = audit(list(produced), out_dir)
    for o in result.overlaps:
        v.append(f"two holders at once: {o}")
    for lost in result.lost[:20]:
        v.append(f"lost: record {lost[1]} of {lost[0]} was produced and never processed")
    if len(result.lost) > 20:
        v.append(f"lost: {len(result.lost) - 20} more records")
    if not keyed:
        v += [f"order: {o}" for o in result.out_of_order]
    if result.per_key_order_errors:
        v.append(f"order: {result.per_key_order_errors} records first processed before an "
                 "earlier record of their partition key")

    # 2. a tenure starts right after its checkpoint and goes on without a gap
    order: dict[str, list[int]] = defaultdict(list)
    for p in produced:
        order[p.shard_id].append(int(p.sequence_number))
    for seqs in order.values():
        seqs.sort()
    for t in [] if keyed else spans:
        seqs = order.get(t.shard_id, [])
        if t.checkpoint == INITIAL:
            expected = 0
        else:
            i = bisect.bisect_left(seqs, t.checkpoint[1])
            if i == len(seqs) or seqs[i] != t.checkpoint[1]:
                v.append(f"tenure: {t.member} started {t.shard_id} from checkpoint "
                         f"{show(t.checkpoint)}, which is no record of the shard")
                continue
            expected = i + 1
        for r in t.records:
            seq = int(r.sequence_number)
            i = bisect.bisect_left(seqs, seq)
            if i != expected:
                what = "skipped" if i > expected else "went back to"
                at = seqs[expected] if expected < len(seqs) else "the end"
                v.append(f"tenure: {t.member} on {t.shard_id} (from {show(t.checkpoint)}) {what} "
                         f"{seq} where {at} was next")
                break
            expected += 1

    # 3. checkpoints: never backwards, never by a member that lost the lease, never beyond
    #    what was delivered; the table agrees
    by_shard_inits: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for e in events:
        if e.kind == "I":
            by_shard_inits[e.shard_id].append((e.t, e.member))
    for inits in by_shard_inits.values():
        inits.sort()
    ok_writes = sorted((w for w in writes if w.ok), key=lambda w: w.t0)
    last_by_shard: dict[str, CheckpointWrite] = {}
    for w in ok_writes:
        prev = last_by_shard.get(w.shard_id)
        if prev is not None and w.position < prev.position:
            v.append(f"checkpoint backwards: {w.member} wrote {show(w.position)} on {w.shard_id} "
                     f"after {prev.member} wrote {show(prev.position)}")
        if prev is None or w.position >= prev.position:
            last_by_shard[w.shard_id] = w
        own = [t for t in spans if t.member == w.member and t.shard_id == w.shard_id and t.start <= w.t0]
        if not own:
            v.append(f"checkpoint without a lease: {w.member} wrote {show(w.position)} on "
                     f"{w.shard_id} without having initialized it")
            continue
        tenure = own[-1]
        usurpers = [m for t, m in by_shard_inits[w.shard_id] if tenure.start < t < w.t0 and m != w.member]
        if usurpers:
            v.append(f"checkpoint after the lease was lost: {w.member} wrote {show(w.position)} "
                     f"on {w.shard_id} at {w.t0} after {usurpers[0]} had taken the shard")
        if w.position != SHARD_END:
            delivered = [position(r.sequence_number, r.sub) for r in tenure.records if r.t <= w.t1]
            if not delivered or w.position > max(delivered):
                v.append(f"checkpoint beyond delivery: {w.member} wrote {show(w.position)} on "
                         f"{w.shard_id}, beyond what it had processed")
    if final_table is not None:
        for shard, w in last_by_shard.items():
            row = next((r for k, r in final_table.items() if k.rsplit("/", 1)[-1] == shard), None)
            if row is None or row.checkpoint < w.position:
                v.append(f"table behind the journal: {shard} has "
                         f"{show(row.checkpoint) if row else 'no row'} but {w.member} wrote "
                         f"{show(w.position)}")
    history: dict[str, list[tuple[int, LeaseRow]]] = defaultdict(list)
    for t, rows in table_samples:
        for key, row in rows.items():
            history[key].append((t, row))
    owners_of: dict[tuple[str, int], str | None] = {}
    for key, rows in history.items():
        for (_, a), (tb, b) in pairwise(rows):
            if b.counter < a.counter:
                v.append(f"table: {key} lease counter went back from {a.counter} to {b.counter} at {tb}")
            if b.checkpoint < a.checkpoint:
                v.append(f"table: {key} checkpoint went back from {show(a.checkpoint)} to "
                         f"{show(b.checkpoint)} at {tb}")
        for _, row in rows:
            seen = owners_of.setdefault((key, row.counter), row.owner)
            if seen != row.owner:
                v.append(f"table: {key} counter {row.counter} seen with owners {seen} and {row.owner}")

    # 4. duplicates: allowed only beyond the last checkpoint of a tenure that did not end
    #    gracefully; never after a checkpoint covering the record, a hand-off or a shard end
    tenure_of: dict[tuple[str, str, int], Tenure] = {}
    for t in spans:
        for r in t.records:
            tenure_of[(r.member, r.shard_id, r.t)] = t
    occurrences: dict[tuple[str, str, int], list[Event]] = defaultdict(list)
    for e in events:
        if e.kind == "R":
            occurrences[(e.shard_id, e.sequence_number, e.sub)].append(e)
    covering: dict[str, list[CheckpointWrite]] = defaultdict(list)
    for w in ok_writes:
        covering[w.shard_id].append(w)
    duplicates = 0
    causes: Counter[str] = Counter()
    for (shard, seq, sub), occ in occurrences.items():
        if len(occ) < 2:
            continue
        occ.sort(key=lambda e: e.t)
        pos = position(seq, sub)
        for first, again in pairwise(occ):
            duplicates += 1
            first_tenure = tenure_of.get((first.member, first.shard_id, first.t))
            done = next((w for w in covering[shard] if w.position >= pos and w.t1 < again.t), None)
            if done is not None:
                v.append(f"duplicate after a checkpoint: {again.member} processed {seq} of {shard} "
                         f"again after {done.member} had checkpointed {show(done.position)}")
            elif first_tenure is not None and first_tenure.end in ("S", "E") and first_tenure.end_t < again.t:
                v.append(f"duplicate after a {'hand-off' if first_tenure.end == 'S' else 'shard end'}: "
                         f"{again.member} processed {seq} of {shard} again after "
                         f"{first.member}'s tenure ended gracefully")
            causes[cause_of(first, again, first_tenure, faults)] += 1

    # 5. progress: every record processed within the stall bound of the faults it waited through
    tick = lease_duration / 3
    recovery = int((lease_duration + 4 * tick) * NS)
    base = lease_duration + 4 * tick + stall_allowance
    first_done: dict[tuple[str, str], int] = {}
    for (shard, seq, _sub), occ in occurrences.items():
        first_done[(shard, seq)] = min(e.t for e in occ)
    longest: dict[str, float] = defaultdict(float)
    stall_by_fault: dict[str, float] = defaultdict(float)
    stalls_reported = 0
    startup = 0.0
    for p, at in zip(produced, produced_at, strict=True):
        done_at = first_done.get((p.shard_id, p.sequence_number))
        if done_at is None:
            continue  # reported as lost
        wait = max(0, done_at - at) / NS
        if at < steady_from:
            startup = max(startup, wait)
            continue
        longest[p.shard_id] = max(longest[p.shard_id], wait)
        # a fault holds up a record if it started before the record was processed and ended
        # less than a recovery (the base bound without the allowance) before it was produced
        during = [f for f in faults if f.t0 <= done_at and f.t1 + recovery >= at]
        for f in during:
            stall_by_fault[f.kind] = max(stall_by_fault[f.kind], wait)
        bound = base + sum(f.seconds for f in during)
        if wait > bound:
            stalls_reported += 1
            if stalls_reported <= 10:
                kinds = ", ".join(f"{f.kind}({f.member}, {f.seconds:.1f} s)" for f in during) or "no fault"
                v.append(f"stall: {p.shard_id} took {wait:.1f} s to process {p.sequence_number} "
                         f"(bound {bound:.1f} s: {lease_duration:g} lease + 4 ticks + "
                         f"{stall_allowance:g} s allowance + faults: {kinds})")
    if stalls_reported > 10:
        v.append(f"stall: {stalls_reported - 10} more records over their bound")

    records = [e for e in events if e.kind == "R"]
    report.figures = {
        "records_produced": len(produced),
        "records_processed": len(records),
        "records_distinct": result.distinct,
        "duplicates": duplicates,
        "duplicates_by_cause": dict(sorted(causes.items())),
        "tenures": len(spans),
        "tenures_by_end": dict(Counter(t.end or "none" for t in spans)),
        "checkpoint_writes": len(ok_writes),
        "checkpoint_writes_refused": sum(1 for w in writes if not w.ok),
        "torn_ledger_lines": torn,
        "longest_stall_s": round(max(longest.values(), default=0.0), 2),
        "longest_stall_lease_durations": round(max(longest.values(), default=0.0) / lease_duration, 2),
        "longest_stall_by_shard_s": {s: round(x, 2) for s, x in sorted(longest.items())},
        "longest_stall_during_fault_s": {k: round(x, 2) for k, x in sorted(stall_by_fault.items())},
        "stall_bound_base_s": round(base, 2),
        "longest_wait_at_startup_s": round(startup, 2),
        "table_samples": len(table_samples),
        "violations": len(v),
    }
    return report


def cause_of(first: Event, again: Event, tenure: Tenure | None, faults: Sequence[FaultRecord]) -> str:
    """Why a record was processed again: the fault on the first processor between its
    processing and the repeat (``kill``, ``pause``, ``dynamodb``...), else how the tenure ended."""
    hits = [f for f in faults if f.member == first.member and f.t0 <= again.t and f.t1 >= first.t]
    if hits:
        return max(hits, key=lambda f: f.t0).kind
    if tenure is not None and tenure.end == "L":
        return "lease lost without a fault (late renewals under load)"
    return "unexplained"
