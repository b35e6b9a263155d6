"""amazon-kclpy v3 processors on the Worker, unit level: which processors are detected as which
style (with and without an importable amazon_kclpy), the kclpy input objects, the kclpy
checkpointer's errors in kclpy's vocabulary, and the lifecycle the adapter drives.

amazon-kclpy is not installed here: ``fake_amazon_kclpy`` puts a minimal stand-in module
(written for these tests, with kclpy's names) into ``sys.modules``. Worker processes running a
kclpy processor end to end: tests/kinesis/consumer/test_kclpy_processes.py."""

from __future__ import annotations

import base64
import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import botocore.exceptions
import pytest

from kinesis import (
    ConfigurationError,
    InitializationInput,
    KclpyCheckpointError,
    KclpyProcessor,
    LeaseLostError,
    Position,
    ProcessorStyleError,
    RecordProcessor,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.consumer.kclpy import (
    InitializeInput,
    KclpyCheckpointer,
    KclpyRecord,
    adapt_processor,
    style_of,
)
from kinesis.consumer.retrieval.positions import InitialPosition
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.checkpointer import LeaseCheckpointer
from kinesis.consumer.shard.processor import InMemoryCheckpointer
from kinesis.errors import CorruptLeaseError, LeaseTableUnavailableError
from kinesis.lease_loop.table.model import Checkpoint, Lease

# --- processors of every shape -----------------------------------------------------------


class Calls:
    """What a kclpy processor was called with, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []


class KclpyStyle:
    """An amazon-kclpy v3 processor written without importing amazon_kclpy (duck-typed)."""

    def __init__(self, calls: Calls | None = None, checkpoint_at: str | None = None):
        self.log = calls or Calls()
        self.checkpoint_at = checkpoint_at

    def initialize(self, initialize_input: Any) -> None:
        self.log.calls.append(("initialize", initialize_input))

    def process_records(self, process_records_input: Any) -> None:
        self.log.calls.append(("process_records", process_records_input))
        process_records_input.checkpointer.checkpoint(self.checkpoint_at)

    def lease_lost(self, lease_lost_input: Any) -> None:
        self.log.calls.append(("lease_lost", lease_lost_input))

    def shard_ended(self, shard_ended_input: Any) -> None:
        self.log.calls.append(("shard_ended", shard_ended_input))
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        self.log.calls.append(("shutdown_requested", shutdown_requested_input))
        shutdown_requested_input.checkpointer.checkpoint()


class SdkStyle(RecordProcessor):
    def process_records(self, records: list[Record], checkpointer: Any, millis_behind_latest: int | None = None) -> None:
        checkpointer.checkpoint()


class SdkWithOneArgumentMethods(RecordProcessor):
    """A RecordProcessor is SDK-style whatever its signatures look like."""

    def process_records(self, *args: Any, **kwargs: Any) -> None:
        pass


class SdkShapedButNotASubclass:
    def process_records(self, records: Any, checkpointer: Any, millis_behind_latest: int | None = None) -> None:
        pass


class TwoArgumentProcessRecords(KclpyStyle):
    def process_records(self, process_records_input: Any, extra: Any) -> None:  # type: ignore[override]
        pass


class KclpyV2Style:
    version = 2

    def initialize(self, initialize_input: Any) -> None: ...
    def process_records(self, process_records_input: Any) -> None: ...
    def shutdown(self, shutdown_input: Any) -> None: ...
    def shutdown_requested(self, shutdown_requested_input: Any) -> None: ...


class MissingShardEnded:
    def initialize(self, initialize_input: Any) -> None: ...
    def process_records(self, process_records_input: Any) -> None: ...
    def lease_lost(self, lease_lost_input: Any) -> None: ...
    def shutdown_requested(self, shutdown_requested_input: Any) -> None: ...


@pytest.fixture
def fake_amazon_kclpy(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """A stand-in ``amazon_kclpy`` package: ``kcl.CheckpointError`` and ``v3.processor.RecordProcessorBase``."""

    class CheckpointError(Exception):
        def __init__(self, value: str):
            self.value = value

    class RecordProcessorBase:
        version = 3

        def initialize(self, initialize_input: Any) -> None:
            raise NotImplementedError

        def process_records(self, process_records_input: Any) -> None:
            raise NotImplementedError

        def lease_lost(self, lease_lost_input: Any) -> None:
            raise NotImplementedError

        def shard_ended(self, shard_ended_input: Any) -> None:
            raise NotImplementedError

        def shutdown_requested(self, shutdown_requested_input: Any) -> None:
            raise NotImplementedError

    package, kcl = types.ModuleType("amazon_kclpy"), types.ModuleType("amazon_kclpy.kcl")
    v3, processor = types.ModuleType("amazon_kclpy.v3"), types.ModuleType("amazon_kclpy.v3.processor")
    kcl.CheckpointError = CheckpointError  # type: ignore[attr-defined]
    processor.RecordProcessorBase = RecordProcessorBase  # type: ignore[attr-defined]
    for module in (package, kcl, v3, processor):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    yield types.SimpleNamespace(CheckpointError=CheckpointError, RecordProcessorBase=RecordProcessorBase)


# --- detection ---------------------------------------------------------------------------


@pytest.mark.parametrize("as_class", [True, False], ids=["class", "instance"])
def test_detection_without_amazon_kclpy(as_class: bool) -> None:
    def check(cls: type) -> object:
        return cls if as_class else cls()

    assert style_of(check(SdkStyle)) == "sdk"
    assert style_of(check(SdkWithOneArgumentMethods)) == "sdk"  # a RecordProcessor always is
    assert style_of(check(KclpyStyle)) == "kclpy"
    for neither in (SdkShapedButNotASubclass, TwoArgumentProcessRecords, KclpyV2Style, MissingShardEnded):
        assert style_of(check(neither)) is None, neither


def test_a_subclass_of_amazon_kclpys_base_is_kclpy_whatever_its_signatures(fake_amazon_kclpy: Any) -> None:
    class Odd(fake_amazon_kclpy.RecordProcessorBase):  # type: ignore[misc, name-defined]
        def process_records(self, process_records_input: Any, unused: Any = None, *more: Any) -> None:
            pass

        def lease_lost(self) -> None:  # type: ignore[override]  # cannot be duck-typed
            pass

    assert style_of(Odd) == style_of(Odd()) == "kclpy"
    assert isinstance(adapt_processor(Odd()), KclpyProcessor)


def test_adapt_wraps_kclpy_processors_and_passes_sdk_ones_through() -> None:
    sdk = SdkStyle()
    assert adapt_processor(sdk) is sdk and adapt_processor(sdk, "sdk") is sdk
    assert style_of(KclpyProcessor) == "sdk"  # the wrapper is a RecordProcessor
    wrapped = adapt_processor(KclpyStyle())
    assert isinstance(wrapped, KclpyProcessor) and isinstance(wrapped.delegate, KclpyStyle)
    explicit = KclpyProcessor(KclpyStyle())
    assert adapt_processor(explicit, "kclpy") is explicit  # declared twice: fine
    assert isinstance(adapt_processor(KclpyStyle(), "kclpy"), KclpyProcessor)


@pytest.mark.parametrize(
    ("processor", "style", "message"),
    [
        (SdkStyle(), "kclpy", "SdkStyle, a kinesis.RecordProcessor, but processor_style='kclpy'"),
        (KclpyStyle(), "sdk", "KclpyStyle, an amazon-kclpy v3 processor, but processor_style='sdk'"),
        (SdkShapedButNotASubclass(), "auto", "process_records takes \\(records, checkpointer\\): subclass kinesis"),
        (TwoArgumentProcessRecords(), "auto", "process_records\\(\\) takes 2 arguments"),
        (KclpyV2Style(), "auto", "amazon-kclpy v1/v2 processor"),
        (MissingShardEnded(), "kclpy", "not a kinesis.RecordProcessor nor an amazon-kclpy v3 processor.*no shard_ended\\(\\)"),
        (object(), "auto", "returned object: not a kinesis.RecordProcessor nor"),
    ],
)
def test_a_processor_of_neither_or_the_wrong_style_is_a_named_error(processor: object, style: str, message: str) -> None:
    with pytest.raises(ProcessorStyleError, match=message):
        adapt_processor(processor, style, source="the processor factory of stream 'orders'")
    assert issubclass(ProcessorStyleError, ConfigurationError)


def test_kclpy_processor_refuses_what_it_cannot_wrap() -> None:
    with pytest.raises(ProcessorStyleError, match=r"is a kinesis\.RecordProcessor already"):
        KclpyProcessor(SdkStyle())  # type: ignore[arg-type]
    with pytest.raises(ProcessorStyleError, match="no lease_lost\\(\\); no shard_ended\\(\\)"):
        KclpyProcessor(KclpyV2Style())  # type: ignore[arg-type]


def test_the_worker_checks_factory_classes_and_the_style_when_built() -> None:
    config = WorkerConfig("leases", [StreamConfig("orders", "app")])
    kwargs: dict[str, Any] = {"kinesis_client": object(), "dynamodb_client": object()}  # never called
    Worker(config, KclpyStyle, **kwargs)
    Worker(config, KclpyStyle, processor_style="kclpy", **kwargs)
    Worker(config, KclpyProcessor.factory(KclpyStyle), processor_style="kclpy", **kwargs)
    with pytest.raises(ProcessorStyleError, match="the processor factory is SdkShapedButNotASubclass"):
        Worker(config, SdkShapedButNotASubclass, **kwargs)
    with pytest.raises(ProcessorStyleError, match="processor_style='sdk'"):
        Worker(config, KclpyStyle, processor_style="sdk", **kwargs)
    per_stream = WorkerConfig("leases", [StreamConfig("orders", "app", processor_factory=SdkStyle)])
    with pytest.raises(ProcessorStyleError, match="factory of stream 'orders' is SdkStyle"):
        Worker(per_stream, processor_style="kclpy", **kwargs)
    with pytest.raises(ConfigurationError, match="processor_style must be 'auto'"):
        Worker(config, SdkStyle, processor_style="java", **kwargs)


# --- the input objects -------------------------------------------------------------------

ARRIVAL = datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)


def rec(seq: str, sub: int = 0, data: bytes = b"hello", aggregated: bool = False) -> Record:
    return Record("orders", "shardId-000000000000", seq, sub, "pk-1", data, ARRIVAL, None, aggregated)


def test_records_look_like_amazon_kclpys() -> None:
    r = KclpyRecord(rec("42", data=b"\x00\xffbytes"))
    assert r.binary_data == b"\x00\xffbytes" and base64.b64decode(r.data) == b"\x00\xffbytes"
    assert isinstance(r.data, str)
    assert (r.sequence_number, r.sub_sequence_number, r.partition_key) == ("42", 0, "pk-1")
    assert r.approximate_arrival_timestamp == ARRIVAL and r.timestamp_millis == 1714564800250
    assert r.get("partitionKey") == "pk-1" and r.get("sequenceNumber") == "42" and r.get("data") == r.data
    with pytest.raises(KeyError):
        r.get("nope")


def test_initialize_input_names_the_checkpoint_or_the_initial_position() -> None:
    fresh = InitializeInput.of(InitializationInput("orders", "shardId-1", None, InitialPosition.TRIM_HORIZON))
    assert (fresh.shard_id, fresh.sequence_number, fresh.sub_sequence_number) == ("shardId-1", "TRIM_HORIZON", 0)
    assert fresh.pending_checkpoint is None and fresh.action == "initialize" and fresh.stream_name == "orders"
    resumed = InitializeInput.of(InitializationInput(
        "orders", "shardId-1", Position("77", 3), InitialPosition.LATEST, pending_checkpoint=Position("80")))
    assert (resumed.sequence_number, resumed.sub_sequence_number) == ("77", 3)
    assert resumed.pending_checkpoint == Position("80")


# --- the checkpointer --------------------------------------------------------------------


def test_checkpoint_arguments_as_kclpy_passes_them() -> None:
    sdk = InMemoryCheckpointer("orders", "shardId-0")
    kclpy = KclpyCheckpointer(sdk)
    batch = [rec("1"), rec("2", 0, aggregated=True), rec("2", 1, aggregated=True), rec("2", 2, aggregated=True), rec("3")]
    sdk.record_delivered(batch)
    kclpy.records_delivered(batch)
    kclpy.checkpoint("1")
    kclpy.checkpoint("2", 1)
    kclpy.checkpoint("2")  # no sub-sequence number: the whole aggregate
    kclpy.checkpoint()  # everything delivered
    assert [p for p, _ in sdk.history] == [Position("1"), Position("2", 1), Position("2", 2), Position("3")]


@pytest.mark.parametrize(
    ("args", "value", "message"),
    [
        (("0",), "IllegalArgumentException", "before the last checkpoint"),
        (("99",), "IllegalArgumentException", "largest position delivered"),
        (("not-a-number",), "IllegalArgumentException", "a sequence number must be a string"),
    ],
)
def test_bad_checkpoints_raise_illegal_argument(args: tuple[str], value: str, message: str) -> None:
    sdk = InMemoryCheckpointer("orders", "shardId-0", last_checkpoint=Position("1"))
    sdk.record_delivered([rec("2")])
    with pytest.raises(KclpyCheckpointError, match=message) as caught:
        KclpyCheckpointer(sdk).checkpoint(*args)
    assert caught.value.value == value and sdk.history == []


class FailingSink:
    """A coordinator stand-in whose writes raise ``error``."""

    def __init__(self, error: Exception):
        self.error = error

    def checkpoint(self, key: str, checkpoint: Any) -> Lease:
        raise self.error

    def prepare_checkpoint(self, key: str, checkpoint: Any) -> Lease:
        raise self.error


def _client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "UpdateItem")


def _unavailable(code: str, status: int) -> LeaseTableUnavailableError:
    try:
        raise LeaseTableUnavailableError("lease table 'leases': gave up") from _client_error(code, status)
    except LeaseTableUnavailableError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "value"),
    [
        (LeaseLostError("someone else holds it"), "ShutdownException"),
        (_unavailable("ProvisionedThroughputExceededException", 400), "ThrottlingException"),
        (_unavailable("InternalServerError", 500), "KinesisClientLibDependencyException"),
        (CorruptLeaseError("k", "bad"), "InvalidStateException"),
        (_client_error("ValidationException", 400), "KinesisClientLibDependencyException"),
    ],
)
def test_lease_table_failures_in_kclpys_vocabulary(error: Exception, value: str) -> None:
    for method in ("checkpoint", "prepare_checkpoint"):
        sdk = LeaseCheckpointer(FailingSink(error), "app/orders/shardId-0", "orders", "shardId-0")
        sdk.record_delivered([rec("5")])
        with pytest.raises(KclpyCheckpointError) as caught:
            getattr(KclpyCheckpointer(sdk), method)()
        assert caught.value.value == value and caught.value.__cause__ is error


def test_the_error_is_amazon_kclpys_checkpoint_error_when_it_is_importable(fake_amazon_kclpy: Any) -> None:
    sdk = InMemoryCheckpointer("orders", "shardId-0")
    sdk.mark_lease_lost()
    try:
        KclpyCheckpointer(sdk).checkpoint()
    except fake_amazon_kclpy.CheckpointError as exc:  # what existing kclpy code catches
        assert exc.value == "ShutdownException" and isinstance(exc, KclpyCheckpointError)
    else:
        pytest.fail("no CheckpointError")


def test_prepare_then_commit_through_the_kclpy_checkpointer() -> None:
    sdk = InMemoryCheckpointer("orders", "shardId-0", last_checkpoint=Position("1"))
    batch = [rec("2"), rec("3", 0, aggregated=True), rec("3", 1, aggregated=True)]
    sdk.record_delivered(batch)
    kclpy = KclpyCheckpointer(sdk)
    kclpy.records_delivered(batch)
    prepared = kclpy.prepare_checkpoint("3")
    assert prepared.pending_checkpoint == Position("3", 1) and sdk.prepared == [Position("3", 1)]
    assert sdk.history == []
    prepared.checkpoint()
    assert sdk.history == [(Position("3", 1), False)] and sdk.pending_checkpoint is None
    with pytest.raises(KclpyCheckpointError, match="before the last checkpoint") as caught:
        kclpy.prepare_checkpoint("2")
    assert caught.value.value == "IllegalArgumentException"


# --- the lifecycle the adapter drives ----------------------------------------------------


def test_the_adapter_calls_each_kclpy_method_with_its_input() -> None:
    log = Calls()
    processor = KclpyProcessor(KclpyStyle(log))
    sdk = InMemoryCheckpointer("orders", "shardId-0")
    processor.initialize(InitializationInput("orders", "shardId-0", None, InitialPosition.TRIM_HORIZON))
    sdk.record_delivered([rec("1"), rec("2")])
    processor.process_records([rec("1"), rec("2")], sdk, millis_behind_latest=12)
    sdk.record_delivered([rec("3")])
    processor.process_records([rec("3")], sdk)
    sdk.mark_shard_end()
    processor.shard_ended(sdk)
    names = [name for name, _ in log.calls]
    assert names == ["initialize", "process_records", "process_records", "shard_ended"]
    batch = log.calls[1][1]
    assert [r.sequence_number for r in batch.records] == ["1", "2"] and batch.millis_behind_latest == 12
    assert batch.action == "processRecords" and batch.checkpointer is log.calls[2][1].checkpointer
    assert sdk.history == [(Position("2"), False), (Position("3"), False), (Position("3"), True)]
    assert sdk.shard_end_checkpointed


def test_shutdown_requested_is_followed_by_lease_lost_as_in_kcl() -> None:
    log = Calls()
    processor = KclpyProcessor(KclpyStyle(log))
    sdk = InMemoryCheckpointer("orders", "shardId-0")
    sdk.record_delivered([rec("1")])
    processor.shutdown_requested(sdk)
    assert [name for name, _ in log.calls] == ["shutdown_requested", "lease_lost"]
    assert log.calls[1][1].action == "leaseLost" and sdk.history == [(Position("1"), False)]


def test_a_shutdown_exception_escaping_the_processor_is_the_lost_lease() -> None:
    processor = KclpyProcessor(KclpyStyle())
    sdk = InMemoryCheckpointer("orders", "shardId-0")
    sdk.record_delivered([rec("1")])
    sdk.mark_lease_lost()
    with pytest.raises(LeaseLostError) as caught:
        processor.process_records([rec("1")], sdk)
    assert isinstance(caught.value.__cause__, KclpyCheckpointError)
    with pytest.raises(KclpyCheckpointError, match="IllegalArgumentException"):
        KclpyProcessor(KclpyStyle(checkpoint_at="7")).process_records(
            [rec("1")], InMemoryCheckpointer("orders", "shardId-0"))


def test_pending_checkpoint_reaches_kclpys_initialize() -> None:
    log = Calls()
    processor = KclpyProcessor(KclpyStyle(log))
    processor.initialize(InitializationInput("orders", "shardId-0", Position("5"), InitialPosition.LATEST,
                                             pending_checkpoint=Position("9", 1)))
    init = log.calls[0][1]
    assert init.pending_checkpoint == Position("9", 1) and init.sequence_number == "5"
    assert Checkpoint.of(init.pending_checkpoint) == Checkpoint("9", 1)
