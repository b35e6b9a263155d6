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


def test_the_public_names_are_unchanged() -> None:
    for name in ("Worker", "WorkerConfig", "LeaseCoordinator", "LeaseTable", "DynamoDBMembership",
                 "Checkpoint", "Position", "RecordProcessor", "ShardReader", "FakeClock"):
        assert getattr(kinesis, name).__module__.startswith(("kinesis.lease_loop", "kinesis.consumer"))


CONSUMER = Path(kinesis.__file__).parent / "consumer"


def test_the_lease_table_is_split_into_its_parts() -> None:
    parts = {"table_calls", "table_setup", "table_reads", "member_rows", "write_rules"}
    assert parts <= {path.stem for path in LEASE_LOOP.glob("*.py")}
    assert {f"kinesis.lease_loop.{p}" for p in parts} <= module_level_imports(LEASE_LOOP / "leases.py")


def test_the_write_rules_are_pure() -> None:
    # no client, no retries, no clock: what a write sets, on what condition, what a failure means
    allowed = {"__future__", "collections.abc", "typing", "kinesis.errors", "kinesis.lease_loop",
               "kinesis.lease_loop.lease_model"}
    assert module_level_imports(LEASE_LOOP / "write_rules.py") <= allowed


def imported_names(path: Path) -> set[str]:
    """``module.name`` for every ``from module import name`` at module level."""
    tree = ast.parse(path.read_text())
    return {f"{node.module}.{alias.name}" for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


def test_the_worker_is_split_into_its_parts() -> None:
    path = CONSUMER / "worker.py"
    parts = {"kinesis.consumer.worker_setup", "kinesis.consumer.worker_health"}
    assert parts <= module_level_imports(path) | imported_names(path)
    assert "kinesis.consumer.consumer_registration.deregister_on_stop" in imported_names(path)


def test_the_shard_consumer_is_split_into_its_parts() -> None:
    parts = {"kinesis.consumer.batch_retries", "kinesis.consumer.read_failures", "kinesis.consumer.shard_start",
             "kinesis.consumer.shard_end", "kinesis.consumer.shard_status"}
    assert parts <= module_level_imports(CONSUMER / "shard_consumer.py")
    assert "kinesis.consumer.consumer_pool.ConsumerPool" in imported_names(CONSUMER / "worker.py")


def test_the_read_backoff_and_the_shard_start_are_pure() -> None:
    # no client, no clock, no threads, no logging: the consumer logs, counts and waits
    assert module_level_imports(CONSUMER / "read_failures.py") <= {
        "__future__", "dataclasses", "botocore.exceptions", "kinesis.errors"}
    assert module_level_imports(CONSUMER / "shard_start.py") <= {
        "__future__", "dataclasses", "datetime", "kinesis.consumer.positions"}


SPARK = Path(__file__).resolve().parent.parent / "spark_integration"


def test_the_source_options_are_split_into_their_parts() -> None:
    parts = {"spark_integration.option_values", "spark_integration.role_options",
             "spark_integration.group_options"}
    assert parts <= module_level_imports(SPARK / "options.py")
    # the value parsers are plain functions of the text: no I/O, no Spark, no AWS
    allowed = {"__future__", "re", "collections.abc", "datetime", "urllib.parse", "kinesis.errors"}
    assert module_level_imports(SPARK / "option_values.py") <= allowed


def test_the_source_options_stay_small() -> None:
    lines = len((SPARK / "options.py").read_text().splitlines())
    assert lines <= 400, f"options.py has {lines} lines: move an option group into a part"
