"""The architecture: imports go one way (hashring -> kinesis.lease_loop -> kinesis.consumer ->
spark_integration), with no cycle among first-party modules, the pure modules stay pure, and
each package exports its audience's names (old names of ``kinesis`` warn for one release)."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import kinesis

ROOT = Path(kinesis.__file__).resolve().parent.parent
PACKAGES = ("hashring", "kinesis", "spark_integration")
LEASE_LOOP = ROOT / "kinesis" / "lease_loop"
CONSUMER = ROOT / "kinesis" / "consumer"


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


def first_party_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    modules = first_party_modules()
    return {name: {m for m in module_level_imports(path) if m in modules and m != name}
            for name, path in modules.items()}


def test_imports_go_one_way_between_the_layers() -> None:
    layers = ["hashring", "kinesis.lease_loop", "kinesis.consumer", "spark_integration"]

    def layer(module: str) -> int | None:
        found = [i for i, prefix in enumerate(layers) if module == prefix or module.startswith(prefix + ".")]
        return found[-1] if found else None

    upward = []
    for module, imports in import_graph().items():
        here = layer(module)
        for imported in imports:
            there = layer(imported)
            if here is not None and there is not None and there > here:
                upward.append(f"{module} imports {imported}")
    assert upward == []


def test_no_import_cycle_among_first_party_modules() -> None:
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph[module]):
            if imported.startswith(module + "."):
                continue  # a package's __init__ importing its own modules is no cycle
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported):], imported] if imported in path else [module, imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_decisions_are_pure() -> None:
    # no I/O, no clock, no threads: the rules take a snapshot and return decisions
    allowed = {"__future__", "collections.abc", "dataclasses", "math", "hashring",
               "kinesis.lease_loop.table.model", "kinesis.lease_loop.timing"}
    assert module_level_imports(LEASE_LOOP / "decisions.py") <= allowed


def test_the_write_rules_are_pure() -> None:
    # no client, no retries, no clock: what a write sets, on what condition, what a failure means
    allowed = {"__future__", "collections.abc", "typing", "kinesis.errors", "kinesis.lease_loop.table",
               "kinesis.lease_loop.table.model"}
    assert module_level_imports(LEASE_LOOP / "table" / "rules.py") <= allowed


def test_positions_are_pure() -> None:
    # where a reader starts is a function of the checkpoint: no client, no clock, no threads
    assert module_level_imports(CONSUMER / "retrieval" / "positions.py") <= {
        "__future__", "datetime", "typing", "kinesis.errors", "kinesis.lease_loop.checkpoints",
        "kinesis.sequence_numbers"}


def test_the_source_option_parsers_are_pure() -> None:
    # plain functions of the text: no I/O, no Spark, no AWS
    allowed = {"__future__", "re", "collections.abc", "datetime", "urllib.parse", "spark_integration.errors"}
    assert module_level_imports(ROOT / "spark_integration" / "option_values.py") <= allowed


# --- the public surfaces ---------------------------------------------------------------------------


@pytest.mark.parametrize("package", ["kinesis", "kinesis.lease_loop", "kinesis.consumer.retrieval",
                                     "kinesis.consumer.discovery"])
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no exported name is a deprecated one
        assert all(getattr(module, name) is not None for name in module.__all__)


def test_the_worker_surface_leaves_the_lease_loop_and_the_readers_out() -> None:
    assert {"Worker", "WorkerConfig", "StreamConfig", "RecordProcessor", "Checkpoint", "Position",
            "SessionMembership", "DynamoDBMembership", "LeaseLostError"} <= set(kinesis.__all__)
    assert not {"LeaseCoordinator", "LeaseTable", "ShardReader", "FanOutReader", "FakeClock",
                "read_range", "shard_order"} & set(kinesis.__all__)


@pytest.mark.parametrize("name", sorted(kinesis._MOVED))
def test_an_old_import_from_kinesis_still_works_with_a_deprecation_warning(name: str) -> None:
    new_home = importlib.import_module(kinesis._MOVED[name])
    with pytest.warns(DeprecationWarning, match=f"use 'from {kinesis._MOVED[name]} import {name}'"):
        old = getattr(kinesis, name)
    assert old is getattr(new_home, name)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        kinesis.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_spark_builds_only_on_names_the_kinesis_packages_export() -> None:
    # the Spark source is a user of the lease loop and of the readers like any other: it
    # imports their packages' exported names (and the public errors), never a module's insides
    public_modules = {"kinesis.errors", "kinesis.deprecation"}
    internal = []
    for path in sorted((ROOT / "spark_integration").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kinesis"):
                continue
            if node.module in public_modules:
                continue
            exported = set(getattr(importlib.import_module(node.module), "__all__", ()))
            internal += [f"{path.name}: from {node.module} import {a.name}" for a in node.names if a.name not in exported]
    assert internal == []


def test_the_spark_sources_errors_live_in_spark_integration() -> None:
    import kinesis.errors
    import spark_integration.errors

    for name in kinesis.errors._MOVED:
        with pytest.warns(DeprecationWarning, match=f"use 'from spark_integration.errors import {name}'"):
            old = getattr(kinesis.errors, name)
        assert old is getattr(spark_integration.errors, name)
        assert issubclass(old, kinesis.errors.KinesisHashRingError)  # one except still catches them
    assert not [n for n in vars(kinesis.errors) if n in kinesis.errors._MOVED]


def test_no_two_public_classes_share_a_name() -> None:
    # kinesis.errors.ConfigurationError subclasses hashring.errors.ConfigurationError (one
    # hierarchy: catching hashring's catches both), so it keeps the name on purpose
    defined: dict[str, list[str]] = {}
    for name, path in first_party_modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(name)
    shared = {n: ms for n, ms in defined.items() if len(ms) > 1 and n != "ConfigurationError"}
    assert shared == {}
    import hashring.errors
    import kinesis.errors

    assert issubclass(kinesis.errors.ConfigurationError, hashring.errors.ConfigurationError)


@pytest.mark.parametrize("old", ["kinesis.consumer.reader", "kinesis.consumer.shard_end", "kinesis.consumer.kclpy_inputs",
                                 "kinesis.lease_loop.write_pool", "spark_integration.handover"])
def test_a_module_that_moved_imports_from_its_old_path_with_a_warning(old: str) -> None:
    import spark_integration
    from kinesis import consumer, lease_loop

    moved = {**consumer.MOVED_MODULES, **lease_loop.MOVED_MODULES, **spark_integration.MOVED_MODULES}
    with pytest.warns(DeprecationWarning, match=moved[old]):
        module = importlib.import_module(old)
    assert module is importlib.import_module(moved[old])


def test_the_durations_are_declared_once() -> None:
    # names and types in timing.Durations, defaults and rules in LeaseTiming.of; the Worker's
    # config (a frozen dataclass: its fields are its API) carries the same names and passes them on
    import dataclasses
    import inspect

    from kinesis.consumer.worker.config import WorkerConfig
    from kinesis.lease_loop.coordinator import LeaseCoordinator
    from kinesis.lease_loop.timing import DURATIONS, LeaseTiming

    assert set(DURATIONS) | {"lease_duration"} == {f.name for f in dataclasses.fields(LeaseTiming)}
    assert set(DURATIONS) <= {f.name for f in dataclasses.fields(WorkerConfig)}
    for signature in (inspect.signature(LeaseCoordinator), inspect.signature(LeaseTiming.of)):
        assert not set(DURATIONS) & set(signature.parameters), "a duration declared as its own parameter"
        assert any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())


def test_tests_share_helpers_not_test_modules() -> None:
    # tests live in folders that mirror the packages and move with them: what two test modules
    # share lives in a helper module (tests/support, tests/coordinator_fleet.py), never in a test
    imports = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            imports += [f"{path.name} imports {n}" for n in names if n.rsplit(".", 1)[-1].startswith("test_")]
    assert imports == []
