"""The chaos checker catches each planted violation (doctored ledgers and checkpoint journals
written as the members write them), and passes the same run without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.demo_fleet import Produced
from tests.chaos.invariants import NS, FaultRecord, LeaseRow, Report, check

SHARD = "shardId-000000000000"
LEASE = 3.0


class Run:
    """Ten records on one shard, produced at 0-9 s, and the lines of each member's files."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.produced = [Produced(SHARD, str(i), "pk-0", i - 1) for i in range(1, 11)]
        self.produced_at = [(i - 1) * NS for i in range(1, 11)]
        self.ledgers: dict[str, list[str]] = {}
        self.checkpoints: dict[str, list[str]] = {}
        self.faults: list[FaultRecord] = []

    def init(self, member: str, t: float, checkpoint: str = "-") -> None:
        self.ledgers.setdefault(member, []).append(f"I {SHARD} {checkpoint} {int(t * NS)}")

    def record(self, member: str, seq: int, t: float) -> None:
        self.ledgers.setdefault(member, []).append(f"R {SHARD} {seq} 0 pk-0 {seq - 1} {int(t * NS)}")

    def end(self, member: str, kind: str, t: float) -> None:
        self.ledgers.setdefault(member, []).append(f"{kind} {SHARD} {int(t * NS)}")

    def checkpoint(self, member: str, seq: int | str, t: float, ok: bool = True) -> None:
        line = f"{'C' if ok else 'X'} {SHARD} {seq} 0 {int(t * NS)} {int((t + 0.01) * NS)}"
        self.checkpoints.setdefault(member, []).append(line)

    def process(self, member: str, seqs: range, t: float) -> None:
        """Process ``seqs`` one per 10 ms from ``t`` and checkpoint the last one."""
        for i, seq in enumerate(seqs):
            self.record(member, seq, t + i * 0.01)
        self.checkpoint(member, seqs[-1], t + len(seqs) * 0.01)

    def check(self, **kwargs: object) -> Report:
        for name, lines in self.ledgers.items():
            (self.dir / f"{name}.ledger").write_text("".join(x + "\n" for x in lines))
        for name, lines in self.checkpoints.items():
            (self.dir / f"{name}.checkpoints").write_text("".join(x + "\n" for x in lines))
        options: dict = {"lease_duration": LEASE, "stall_allowance": 2.0, **kwargs}
        return check(self.dir, self.produced, self.produced_at, self.faults, **options)


def clean_run(tmp_path: Path) -> Run:
    """m1 processes 1-5 and hands off at 4.5 s; m2 continues from 5 (each record 0.1 s after
    it was produced)."""
    run = Run(tmp_path)
    run.init("m1", 0.05)
    for seq in range(1, 6):
        run.process("m1", range(seq, seq + 1), seq - 0.9)
    run.end("m1", "S", 4.5)
    run.init("m2", 4.6, "5/0")
    for seq in range(6, 11):
        run.process("m2", range(seq, seq + 1), seq - 0.9)
    return run


def violations(report: Report, prefix: str) -> list[str]:
    return [v for v in report.violations if v.startswith(prefix)]


def test_a_clean_run_passes(tmp_path: Path) -> None:
    report = clean_run(tmp_path).check(final_table={f"app/s/{SHARD}": LeaseRow("m2", 9, (1, 10, 0))})
    assert report.ok, report.format()
    assert report.figures["duplicates"] == 0 and report.figures["records_distinct"] == 10
    assert report.figures["tenures_by_end"] == {"S": 1, "none": 1}


def test_two_holders_at_once_are_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.record("m1", 6, 6.0)  # m1 (paused, resumed) processes after m2 started at 4.6 s
    report = run.check()
    [overlap] = violations(report, "two holders at once")
    assert SHARD in overlap and "m1" in overlap and "m2" in overlap


def test_a_lost_record_is_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.ledgers["m2"] = [x for x in run.ledgers["m2"] if not x.startswith(f"R {SHARD} 10 ")]
    run.checkpoints["m2"] = run.checkpoints["m2"][:-1]
    report = run.check()
    assert violations(report, "lost") == [f"lost: record 10 of {SHARD} was produced and never processed"]


def test_a_skip_within_a_tenure_is_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.init("m3", 11.0, "5/0")  # a later tenure starts from 5 and jumps to 7
    run.record("m3", 7, 11.1)
    report = run.check()
    assert violations(report, "tenure") == [f"tenure: m3 on {SHARD} (from 5/0) skipped 7 where 6 was next"]


def test_a_checkpoint_after_the_lease_was_lost_is_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.checkpoint("m1", 5, 7.0)  # m1 writes once more, after m2 took the shard at 4.6 s
    report = run.check()
    [late] = violations(report, "checkpoint after the lease was lost")
    assert "m1 wrote 5/0" in late and "after m2 had taken the shard" in late


def test_a_checkpoint_going_backwards_is_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.checkpoint("m2", 7, 10.5)  # after m2 checkpointed 10
    report = run.check()
    assert violations(report, "checkpoint backwards") == [
        f"checkpoint backwards: m2 wrote 7/0 on {SHARD} after m2 wrote 10/0"
    ]


def test_a_checkpoint_beyond_delivery_is_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.checkpoints["m1"][0] = run.checkpoints["m1"][0].replace(f"C {SHARD} 1 ", f"C {SHARD} 3 ")
    report = run.check()
    assert any("beyond what it had processed" in v for v in violations(report, "checkpoint beyond delivery"))


def test_a_duplicate_after_a_graceful_handoff_is_caught(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.ledgers["m2"][0] = f"I {SHARD} 3/0 {int(4.6 * NS)}"  # m2 started from an old checkpoint
    run.ledgers["m2"][1:1] = [f"R {SHARD} 4 0 pk-0 3 {int(4.61 * NS)}", f"R {SHARD} 5 0 pk-0 4 {int(4.62 * NS)}"]
    report = run.check()
    dups = violations(report, "duplicate after a checkpoint")
    assert len(dups) == 2 and "m2 processed 4" in dups[0] and "after m1 had checkpointed 4/0" in dups[0]
    assert report.figures["duplicates"] == 2


def test_a_duplicate_after_a_kill_is_allowed_and_attributed(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.init("m1", 0.0)
    run.process("m1", range(1, 4), 2.1)  # 1-3, checkpointed
    run.record("m1", 4, 3.1)  # processed, then SIGKILLed before the checkpoint
    run.faults.append(FaultRecord("kill", "m1", int(3.2 * NS), int(3.2 * NS)))
    run.init("m2", 7.0, "3/0")  # the lease expired, m2 takes over from the checkpoint
    run.process("m2", range(4, 11), 9.1)
    report = run.check()
    assert report.ok, report.format()
    assert report.figures["duplicates"] == 1 and report.figures["duplicates_by_cause"] == {"kill": 1}


def test_a_stall_over_its_bound_is_caught_unless_a_fault_explains_it(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    # m2 processes 10 (produced at 9 s) only at 30 s: 21 s > 3 + 4 ticks + 2 s
    run.ledgers["m2"] = [x for x in run.ledgers["m2"] if not x.startswith(f"R {SHARD} 10 ")]
    run.record("m2", 10, 30.0)
    run.checkpoints["m2"][-1] = f"C {SHARD} 10 0 {30 * NS + 1} {30 * NS + 2}"
    [stall] = violations(run.check(), "stall")
    assert f"stall: {SHARD} took 21.0 s to process 10 (bound 9.0 s" in stall and "no fault" in stall
    run.faults.append(FaultRecord("pause", "m2", 8 * NS, 22 * NS))  # paused for 14 s meanwhile
    assert run.check().ok


def test_the_lease_table_history_is_checked(tmp_path: Path) -> None:
    key = f"app/s/{SHARD}"
    samples = [
        (1, {key: LeaseRow("m1", 4, (1, 3, 0))}),
        (2, {key: LeaseRow("m2", 4, (1, 3, 0))}),  # one counter, two owners
        (3, {key: LeaseRow("m2", 3, (1, 2, 0))}),  # counter and checkpoint back
    ]
    report = clean_run(tmp_path).check(table_samples=samples,
                                       final_table={key: LeaseRow("m2", 9, (1, 4, 0))})
    assert violations(report, "table:") == [
        f"table: {key} lease counter went back from 4 to 3 at 3",
        f"table: {key} checkpoint went back from 3/0 to 2/0 at 3",
        f"table: {key} counter 4 seen with owners m1 and m2",
    ]
    assert violations(report, "table behind the journal") == [
        f"table behind the journal: {SHARD} has 4/0 but m2 wrote 10/0"
    ]


@pytest.mark.parametrize("line", ["R shardId-1 12", "C shardId-1 x 0 1 2", ""])
def test_torn_lines_are_counted_not_fatal(tmp_path: Path, line: str) -> None:
    run = clean_run(tmp_path)
    run.ledgers["m1"].append(line)
    run.checkpoints["m1"].append(line)
    report = run.check()
    assert report.ok, report.format()
