"""The package layout: the generic lease loop does not depend on the Kinesis consumer."""

from __future__ import annotations

import ast
from pathlib import Path

import kinesis

LEASE_LOOP = Path(kinesis.__file__).parent / "lease_loop"


def module_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions or TYPE_CHECKING blocks)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_lease_loop_imports_nothing_of_the_consumer() -> None:
    offenders = {
        path.name: sorted(m for m in module_level_imports(path) if m.startswith("kinesis.consumer"))
        for path in sorted(LEASE_LOOP.glob("*.py"))
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}
    assert len(offenders) >= 8  # the sub-package is where the layout says


def test_the_decisions_are_pure() -> None:
    # no I/O, no clock, no threads: the rules take a snapshot and return decisions
    allowed = {"__future__", "collections.abc", "dataclasses", "math", "hashring",
               "kinesis.lease_loop.lease_model", "kinesis.lease_loop.lease_timing"}
    assert module_level_imports(LEASE_LOOP / "decisions.py") <= allowed


def test_the_coordinator_is_split_into_its_parts() -> None:
    parts = {"coordinator", "decisions", "holder", "handoffs", "acquisitions", "observations", "planner",
             "round_loop", "write_pool", "resource_keys", "coordinator_settings", "member_list", "lease_timing",
             "scoped_reads", "lifecycle", "round_reads", "round_record"}
    assert parts <= {path.stem for path in LEASE_LOOP.glob("*.py")}
    imported = module_level_imports(LEASE_LOOP / "coordinator.py")
    assert {f"kinesis.lease_loop.{p}" for p in parts - {"coordinator", "lease_timing"}} <= imported


def test_the_orchestrator_stays_small() -> None:
    # the rules, the reads, the held leases and the lifecycle live in the parts above
    lines = len((LEASE_LOOP / "coordinator.py").read_text().splitlines())
    assert lines <= 400, f"coordinator.py has {lines} lines: move a responsibility into a part"


def test_the_public_names_are_unchanged() -> None:
    for name in ("Worker", "WorkerConfig", "LeaseCoordinator", "LeaseTable", "DynamoDBMembership",
                 "Checkpoint", "Position", "RecordProcessor", "ShardReader", "FakeClock"):
        assert getattr(kinesis, name).__module__.startswith(("kinesis.lease_loop", "kinesis.consumer"))
