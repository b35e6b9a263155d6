"""Runs an amazon-kclpy v3 record processor on the Worker: :class:`KclpyProcessor`.

A kclpy v3 processor (``amazon_kclpy.v3.processor.RecordProcessorBase``, or any class with
its five methods) takes one input object per call. :class:`KclpyProcessor` is an SDK
:class:`~kinesis.consumer.shard.processor.RecordProcessor` that builds those inputs
(:mod:`kinesis.consumer.kclpy`) and a kclpy checkpointer
(:mod:`kinesis.consumer.kclpy`) and calls the kclpy processor:

================================ ==================================================
the Worker calls                 the kclpy processor hears
================================ ==================================================
``initialize(init)``             ``initialize(InitializeInput)``
``process_records(records, cp)`` ``process_records(ProcessRecordsInput)``
``shard_ended(cp)``              ``shard_ended(ShardEndedInput)`` (call ``checkpoint()``)
``shutdown_requested(cp)``       ``shutdown_requested(ShutdownRequestedInput)``, then
                                 ``lease_lost(LeaseLostInput)`` (as KCL 2 does)
``lease_lost()``                 ``lease_lost(LeaseLostInput)``
================================ ==================================================

A ``ShutdownException`` checkpoint error that escapes the kclpy processor is the lost lease
(:class:`~kinesis.errors.LeaseLostError`) to the Worker, as if the SDK checkpointer had raised.

The Worker wraps kclpy processors by itself (see :mod:`kinesis.consumer.kclpy`);
``KclpyProcessor.factory(MyProcessor)`` declares one explicitly.

amazon-kclpy's ``Checkpointer`` over the SDK's: same calls, errors in kclpy's vocabulary.

``checkpoint(sequence_number=None, sub_sequence_number=None)`` and
``prepare_checkpoint(...)`` (two-phase checkpoints, which kclpy itself does not offer) raise
:class:`KclpyCheckpointError`, whose ``.value`` is the name KCL's MultiLangDaemon would send:

========================================= ==============================================
``ShutdownException``                     the lease is lost (another member owns the
                                          shard): stop, do not retry
``ThrottlingException``                   the lease table throttled the write past the
                                          retries: back off and retry
``KinesisClientLibDependencyException``   the lease table failed otherwise (5xx, network,
                                          permissions): retry later
``InvalidStateException``                 the lease table is missing, has the wrong
                                          schema, or the row is corrupt: do not retry
``IllegalArgumentException``              the position is behind the last checkpoint,
                                          beyond the last record delivered, or not a
                                          sequence number
========================================= ==============================================

When amazon-kclpy is importable, the error is also an ``amazon_kclpy.kcl.CheckpointError``,
so ``except kcl.CheckpointError`` in existing processors catches it.

The objects an amazon-kclpy v3 processor receives, built from the SDK's own.

Same names and attributes as ``amazon_kclpy.messages`` (``InitializeInput``,
``ProcessRecordsInput``, ``LeaseLostInput``, ``ShardEndedInput``, ``ShutdownRequestedInput``
and ``Record``), so a processor written for amazon-kclpy reads them unchanged. Additions, all
optional to use: ``InitializeInput.pending_checkpoint`` (two-phase checkpoints, as KCL's
``InitializationInput.pendingCheckpointSequenceNumber``), ``InitializeInput.stream_name`` and
``KclpyRecord.record`` (the SDK :class:`~kinesis.consumer.retrieval.records.Record`).

Which processor interface a processor implements, and the adapter it needs.

Two shapes run on the Worker:

* ``"sdk"``: a :class:`kinesis.RecordProcessor` subclass (``process_records(records,
  checkpointer, millis_behind_latest=None)``), used as it is;
* ``"kclpy"``: an amazon-kclpy v3 processor, wrapped in
  :class:`~kinesis.consumer.kclpy.KclpyProcessor`: a subclass of
  ``amazon_kclpy.v3.processor.RecordProcessorBase`` (when amazon-kclpy is importable), or any
  other class whose ``initialize``, ``process_records``, ``lease_lost``, ``shard_ended`` and
  ``shutdown_requested`` each take one input argument.

The rule is unambiguous: a ``kinesis.RecordProcessor`` is always ``"sdk"`` (whatever its
signatures), anything else is ``"kclpy"`` if it has that shape, and otherwise
:class:`~kinesis.errors.ProcessorStyleError` says what is missing for either.
``Worker(..., processor_style="sdk" | "kclpy")`` declares the style instead of ``"auto"``:
a processor of the other style is then refused with the same error.
"""

from __future__ import annotations

import base64
import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

import botocore.exceptions

from kinesis.consumer.retrieval.positions import Position
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.retrieval.records import Record as SdkRecord
from kinesis.consumer.shard.processor import (
    Checkpointer,
    InitializationInput,
    PreparedCheckpointer,
    RecordProcessor,
)
from kinesis.errors import (
    CheckpointError,
    ConfigurationError,
    CorruptLeaseError,
    InvalidCheckpointError,
    InvalidSequenceNumberError,
    KinesisHashRingError,
    LeaseLostError,
    LeaseTableNotFoundError,
    LeaseTableSchemaError,
    LeaseTableUnavailableError,
    ProcessorStyleError,
)

T = TypeVar("T")

SHUTDOWN = "ShutdownException"
THROTTLING = "ThrottlingException"
DEPENDENCY = "KinesisClientLibDependencyException"
INVALID_STATE = "InvalidStateException"
ILLEGAL_ARGUMENT = "IllegalArgumentException"

_THROTTLING_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "Throttling", "RequestLimitExceeded"}
)


class KclpyCheckpointError(CheckpointError):
    """A checkpoint failed; ``value`` names why in kclpy's vocabulary (see the module docs)."""

    def __init__(self, value: str, message: str = ""):
        super().__init__(f"{value}: {message}" if message else value)
        self.value = value
        self.message = message

    def __str__(self) -> str:
        return f"{self.value}: {self.message}" if self.message else self.value


def kclpy_checkpoint_error(
    value: str, message: str = "", also: type[Exception] | None = None
) -> KclpyCheckpointError:
    """A :class:`KclpyCheckpointError`, also an ``amazon_kclpy.kcl.CheckpointError`` when
    amazon-kclpy is importable, and an ``also`` (the SDK error it translates) if given."""
    return _error_class(tuple(b for b in (also, _kclpy_error_base()) if b is not None))(value, message)


def _kclpy_error_base() -> type[Exception] | None:
    try:
        kcl = importlib.import_module("amazon_kclpy.kcl")
    except ImportError:
        return None
    base = getattr(kcl, "CheckpointError", None)
    return base if isinstance(base, type) and issubclass(base, Exception) else None


_ERROR_CLASSES: dict[tuple[type[Exception], ...], type[KclpyCheckpointError]] = {}


def _error_class(bases: tuple[type[Exception], ...]) -> type[KclpyCheckpointError]:
    if not bases:
        return KclpyCheckpointError
    with _ERROR_CLASSES_LOCK:
        if bases not in _ERROR_CLASSES:
            _ERROR_CLASSES[bases] = type(
                "KclpyCheckpointError", (KclpyCheckpointError, *bases), {"__module__": __name__}
            )
        return _ERROR_CLASSES[bases]


_ERROR_CLASSES_LOCK = threading.Lock()


def translate(exc: BaseException) -> KclpyCheckpointError:
    """The kclpy error for an SDK checkpoint failure (see the module docs)."""
    if isinstance(exc, LeaseLostError):
        return kclpy_checkpoint_error(SHUTDOWN, str(exc))
    if isinstance(exc, CorruptLeaseError):  # the table is corrupt, not the argument
        return kclpy_checkpoint_error(INVALID_STATE, str(exc))
    if isinstance(exc, InvalidSequenceNumberError):
        return kclpy_checkpoint_error(ILLEGAL_ARGUMENT, str(exc), InvalidSequenceNumberError)
    if isinstance(exc, CheckpointError | InvalidCheckpointError | ConfigurationError):
        return kclpy_checkpoint_error(ILLEGAL_ARGUMENT, str(exc))
    if isinstance(exc, LeaseTableUnavailableError):
        cause = exc.__cause__
        code = cause.response.get("Error", {}).get("Code") if isinstance(
            cause, botocore.exceptions.ClientError) else None
        return kclpy_checkpoint_error(THROTTLING if code in _THROTTLING_CODES else DEPENDENCY, str(exc))
    if isinstance(exc, LeaseTableNotFoundError | LeaseTableSchemaError):
        return kclpy_checkpoint_error(INVALID_STATE, str(exc))
    return kclpy_checkpoint_error(DEPENDENCY, f"{type(exc).__name__}: {exc}")


_TRANSLATED = (KinesisHashRingError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)


def _translated(call: Callable[[], T]) -> T:
    try:
        return call()
    except KclpyCheckpointError:
        raise
    except _TRANSLATED as exc:
        raise translate(exc) from exc


class KclpyPreparedCheckpointer:
    """kclpy's view of a prepared checkpoint: ``checkpoint()`` commits it."""

    def __init__(self, prepared: PreparedCheckpointer):
        self._prepared = prepared

    @property
    def pending_checkpoint(self) -> Position:
        """The prepared position (``.sequence_number``, ``.sub_sequence_number``)."""
        return self._prepared.pending_checkpoint

    def checkpoint(self) -> None:
        """Commit the prepared checkpoint; raises :class:`KclpyCheckpointError`."""
        _translated(self._prepared.checkpoint)


class KclpyCheckpointer:
    """amazon-kclpy's ``Checkpointer`` for one shard lease, over the SDK's :class:`Checkpointer`."""

    def __init__(self, checkpointer: Checkpointer):
        self.checkpointer = checkpointer
        """The SDK checkpointer underneath (fenced by the lease)."""
        self._last_sub: dict[str, int] = {}
        self._lock = threading.Lock()

    def records_delivered(self, records: Iterable[Record]) -> None:
        """Note the last sub-record of each KPL aggregate (for ``sub_sequence_number=None``)."""
        with self._lock:
            for r in records:
                if r.aggregated:
                    self._last_sub[r.sequence_number] = max(r.sub_sequence_number,
                                                            self._last_sub.get(r.sequence_number, 0))

    def checkpoint(self, sequence_number: str | None = None, sub_sequence_number: int | None = None) -> None:
        """Checkpoint at ``sequence_number`` (default: the last record delivered; in
        ``shard_ended``: the end of the shard). ``sub_sequence_number=None`` means the last
        sub-record of that sequence number (the whole KPL aggregate), as kclpy documents.
        Raises :class:`KclpyCheckpointError`."""
        if sequence_number is None:
            _translated(self.checkpointer.checkpoint)
        else:
            position = self._position(sequence_number, sub_sequence_number)
            _translated(lambda: self.checkpointer.checkpoint(position))
        self._forget_checkpointed()

    def prepare_checkpoint(
        self, sequence_number: str | None = None, sub_sequence_number: int | None = None
    ) -> KclpyPreparedCheckpointer:
        """Record a pending checkpoint (KCL's ``prepareCheckpoint``); the result's
        ``checkpoint()`` commits it. Same arguments and errors as :meth:`checkpoint`."""
        if sequence_number is None:
            prepared = _translated(self.checkpointer.prepare_checkpoint)
        else:
            position = self._position(sequence_number, sub_sequence_number)
            prepared = _translated(lambda: self.checkpointer.prepare_checkpoint(position))
        return KclpyPreparedCheckpointer(prepared)

    def _position(self, sequence_number: Any, sub_sequence_number: int | None) -> Position:
        seq = str(sequence_number) if isinstance(sequence_number, int) else sequence_number
        if sub_sequence_number is None:
            with self._lock:
                sub_sequence_number = self._last_sub.get(seq, 0) if isinstance(seq, str) else 0
        return _translated(lambda: Position(seq, sub_sequence_number))

    def _forget_checkpointed(self) -> None:
        last = getattr(self.checkpointer, "last_checkpoint", None)
        if not isinstance(last, Position):
            return
        with self._lock:
            for seq, sub in list(self._last_sub.items()):
                if Position(seq, sub) <= last:  # the whole aggregate is checkpointed
                    del self._last_sub[seq]


class KclpyRecord:
    """One user record, shaped like ``amazon_kclpy.messages.Record``."""

    __slots__ = ("record",)

    def __init__(self, record: SdkRecord):
        self.record = record
        """The SDK record this one shows."""

    @property
    def binary_data(self) -> bytes:
        """The record's bytes."""
        return self.record.data

    @property
    def data(self) -> str:
        """The record's bytes, base64-encoded (as the MultiLangDaemon hands them to kclpy)."""
        return base64.b64encode(self.record.data).decode("ascii")

    @property
    def sequence_number(self) -> str:
        return self.record.sequence_number

    @property
    def sub_sequence_number(self) -> int:
        """The index inside a KPL aggregate (0 for a plain record)."""
        return self.record.sub_sequence_number

    @property
    def partition_key(self) -> str:
        return self.record.partition_key

    @property
    def approximate_arrival_timestamp(self) -> datetime | None:
        """When Kinesis accepted the record (timezone-aware; kclpy gives local naive time)."""
        return self.record.approximate_arrival_timestamp

    @property
    def timestamp_millis(self) -> int | None:
        """:attr:`approximate_arrival_timestamp` in milliseconds since the Unix epoch."""
        ts = self.record.approximate_arrival_timestamp
        return None if ts is None else int(ts.timestamp() * 1000)

    def get(self, field: str) -> Any:
        """A field by its MultiLangDaemon JSON name (``data``, ``partitionKey``, ...)."""
        fields = {
            "data": self.data,
            "partitionKey": self.partition_key,
            "sequenceNumber": self.sequence_number,
            "subSequenceNumber": self.sub_sequence_number,
            "approximateArrivalTimestamp": self.timestamp_millis,
        }
        if field not in fields:
            raise KeyError(field)
        return fields[field]

    def __repr__(self) -> str:
        return f"Record({self.sequence_number}/{self.sub_sequence_number}, key={self.partition_key!r})"


@dataclass(frozen=True)
class InitializeInput:
    """What ``initialize(initialize_input)`` is told about the shard it now owns."""

    shard_id: str
    sequence_number: str
    """The checkpoint the processor starts after, or the initial position's name
    (``TRIM_HORIZON``, ``LATEST``, ``AT_TIMESTAMP``) for a shard never checkpointed, as KCL."""
    sub_sequence_number: int
    pending_checkpoint: Position | None = None
    """A checkpoint a previous owner prepared and did not commit (``.sequence_number``,
    ``.sub_sequence_number``), or None."""
    stream_name: str = ""
    action: str = "initialize"

    @classmethod
    def of(cls, init: InitializationInput) -> InitializeInput:
        """From the SDK's :class:`~kinesis.consumer.shard.processor.InitializationInput`."""
        start = init.checkpoint or init.initial_position  # an initial position's number is its name
        return cls(init.shard_id, start.sequence_number, start.sub_sequence_number, init.pending_checkpoint,
                   init.stream_name)


@dataclass(frozen=True)
class ProcessRecordsInput:
    """One batch for ``process_records(process_records_input)`` (never empty)."""

    records: Sequence[KclpyRecord]
    checkpointer: KclpyCheckpointer
    millis_behind_latest: int | None = None
    action: str = "processRecords"


@dataclass(frozen=True)
class LeaseLostInput:
    """``lease_lost(lease_lost_input)``: another member owns the shard; checkpoints fail."""

    action: str = "leaseLost"


@dataclass(frozen=True)
class ShardEndedInput:
    """``shard_ended(shard_ended_input)``: call ``checkpointer.checkpoint()`` to finish the shard."""

    checkpointer: KclpyCheckpointer
    action: str = "shardEnded"


@dataclass(frozen=True)
class ShutdownRequestedInput:
    """``shutdown_requested(shutdown_requested_input)``: checkpoint what is done (hand-off or stop)."""

    checkpointer: KclpyCheckpointer
    action: str = "shutdownRequested"


KCLPY_METHODS = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")
"""The methods of amazon-kclpy's v3 ``RecordProcessorBase``; each takes one input object."""


class KclpyRecordProcessor(Protocol):
    """The amazon-kclpy v3 record processor interface (``amazon_kclpy.v3.processor``)."""

    def initialize(self, initialize_input: Any) -> Any: ...

    def process_records(self, process_records_input: Any) -> Any: ...

    def lease_lost(self, lease_lost_input: Any) -> Any: ...

    def shard_ended(self, shard_ended_input: Any) -> Any: ...

    def shutdown_requested(self, shutdown_requested_input: Any) -> Any: ...


def kclpy_base_class() -> type | None:
    """``amazon_kclpy.v3.processor.RecordProcessorBase`` if amazon-kclpy is importable."""
    try:
        module = importlib.import_module("amazon_kclpy.v3.processor")
    except ImportError:
        return None
    base = getattr(module, "RecordProcessorBase", None)
    return base if isinstance(base, type) else None


def is_kclpy_subclass(cls: type) -> bool:
    """True if ``cls`` subclasses amazon-kclpy's v3 ``RecordProcessorBase`` (when importable)."""
    base = kclpy_base_class()
    return base is not None and issubclass(cls, base)


def kclpy_shape_problems(processor: object) -> list[str]:
    """Why ``processor`` (an instance or a class) is not shaped like a kclpy v3 processor;
    empty if it is: the five methods, each callable with exactly one input argument."""
    is_class = isinstance(processor, type)
    problems = []
    for name in KCLPY_METHODS:
        method = getattr(processor, name, None)
        if method is None:
            problems.append(f"no {name}()")
        elif not callable(method):
            problems.append(f"{name} is not a method")
        else:
            unbound = is_class and not isinstance(inspect.getattr_static(processor, name), staticmethod)
            problem = _one_argument_problem(name, method, unbound=unbound)
            if problem:
                problems.append(problem)
    return problems


def _one_argument_problem(name: str, method: Callable[..., Any], *, unbound: bool) -> str | None:
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return None  # no signature to read (a builtin): let the call decide
    positional_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if unbound and params and params[0].kind in positional_kinds:
        params = params[1:]  # self
    positional = [p for p in params if p.kind in positional_kinds]
    required = [p.name for p in positional if p.default is inspect.Parameter.empty]
    if any(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty for p in params):
        return f"{name}() has required keyword-only arguments"
    if len(required) > 1:
        return f"{name}() takes {len(required)} arguments ({', '.join(required)}), not one input"
    if not positional and not any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return f"{name}() takes no input argument"
    return None


class KclpyProcessor(RecordProcessor):
    """An amazon-kclpy v3 processor as an SDK :class:`RecordProcessor` (see the module docs)."""

    def __init__(self, delegate: KclpyRecordProcessor):
        name = type(delegate).__name__
        if isinstance(delegate, RecordProcessor):
            raise ProcessorStyleError(
                f"{name} is a kinesis.RecordProcessor already: pass it to the Worker as it is, "
                "KclpyProcessor wraps amazon-kclpy v3 processors"
            )
        if not is_kclpy_subclass(type(delegate)):
            problems = kclpy_shape_problems(delegate)
            if problems:
                raise ProcessorStyleError(
                    f"{name} is not an amazon-kclpy v3 record processor: {'; '.join(problems)} "
                    f"(it needs {', '.join(KCLPY_METHODS)}, each taking one input object)"
                )
        self.delegate = delegate
        """The amazon-kclpy processor."""
        self._checkpointer: KclpyCheckpointer | None = None

    @classmethod
    def factory(cls, delegate_factory: Callable[[], KclpyRecordProcessor]) -> Callable[[], KclpyProcessor]:
        """A processor factory for the Worker: ``KclpyProcessor.factory(MyKclpyProcessor)``."""
        return lambda: cls(delegate_factory())

    def kclpy_checkpointer(self, checkpointer: Checkpointer) -> KclpyCheckpointer:
        """The kclpy checkpointer over ``checkpointer`` (one per lease: the same every call)."""
        if self._checkpointer is None or self._checkpointer.checkpointer is not checkpointer:
            self._checkpointer = KclpyCheckpointer(checkpointer)
        return self._checkpointer

    def initialize(self, init: InitializationInput) -> None:
        self.delegate.initialize(InitializeInput.of(init))

    def process_records(
        self,
        records: list[SdkRecord],
        checkpointer: Checkpointer,
        millis_behind_latest: int | None = None,
    ) -> None:
        kclpy = self.kclpy_checkpointer(checkpointer)
        kclpy.records_delivered(records)
        batch = ProcessRecordsInput([KclpyRecord(r) for r in records], kclpy, millis_behind_latest)
        with _lost_lease_as_lease_lost_error():
            self.delegate.process_records(batch)

    def lease_lost(self) -> None:
        self.delegate.lease_lost(LeaseLostInput())

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        with _lost_lease_as_lease_lost_error():
            self.delegate.shard_ended(ShardEndedInput(self.kclpy_checkpointer(checkpointer)))

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        try:
            with _lost_lease_as_lease_lost_error():
                self.delegate.shutdown_requested(ShutdownRequestedInput(self.kclpy_checkpointer(checkpointer)))
        finally:
            self.delegate.lease_lost(LeaseLostInput())  # KCL 2: the lease is gone after the hand-off

    def __repr__(self) -> str:
        return f"KclpyProcessor({self.delegate!r})"


@contextmanager
def _lost_lease_as_lease_lost_error() -> Iterator[None]:
    try:
        yield
    except KclpyCheckpointError as exc:
        if exc.value == SHUTDOWN:
            raise LeaseLostError(str(exc)) from exc
        raise


PROCESSOR_STYLES = ("auto", "sdk", "kclpy")


def check_style(style: object) -> str:
    """``style`` if it is one of :data:`PROCESSOR_STYLES`, else ConfigurationError."""
    if style not in PROCESSOR_STYLES:
        raise ConfigurationError(
            f"processor_style must be 'auto' (detect), 'sdk' (kinesis.RecordProcessor) or 'kclpy' "
            f"(amazon-kclpy v3 processors), got {style!r}"
        )
    return str(style)


def style_of(processor: object) -> str | None:
    """``"sdk"``, ``"kclpy"`` or None (neither) for a processor instance or class."""
    cls = processor if isinstance(processor, type) else type(processor)
    if issubclass(cls, RecordProcessor):
        return "sdk"
    if is_kclpy_subclass(cls) or not kclpy_shape_problems(processor):
        return "kclpy"
    return None


def adapt_processor(processor: object, style: str = "auto", *, source: str = "the processor factory") -> RecordProcessor:
    """The :class:`RecordProcessor` the Worker drives for ``processor`` (a kclpy one wrapped).

    Raises :class:`ProcessorStyleError` naming ``source`` if it fits neither shape or not
    the declared ``style``.
    """
    found = _checked_style(processor, check_style(style), source)
    if found == "sdk":
        assert isinstance(processor, RecordProcessor)
        return processor
    return KclpyProcessor(processor)  # type: ignore[arg-type]  # shape checked above


def check_factory(factory: Any, style: str = "auto", *, source: str = "the processor factory") -> None:
    """Check a processor factory that is a class when the Worker is built (no processor is
    made); other callables are checked on the first processor they return."""
    check_style(style)
    if isinstance(factory, type):
        _checked_style(factory, style, source)


def _checked_style(processor: object, style: str, source: str) -> str:
    found = style_of(processor)
    cls = processor if isinstance(processor, type) else type(processor)
    what = f"{source} {'is' if processor is cls else 'returned'} {cls.__name__}"
    if found is None:
        raise ProcessorStyleError(
            f"{what}: not a kinesis.RecordProcessor nor an amazon-kclpy v3 processor. {_neither(processor)}"
        )
    if style != "auto" and found != style and not (style == "kclpy" and issubclass(cls, KclpyProcessor)):
        if found == "sdk":
            raise ProcessorStyleError(
                f"{what}, a kinesis.RecordProcessor, but processor_style='kclpy': pass "
                "processor_style='sdk' or 'auto', or an amazon-kclpy v3 processor"
            )
        raise ProcessorStyleError(
            f"{what}, an amazon-kclpy v3 processor, but processor_style='sdk': pass "
            "processor_style='kclpy' or 'auto' (it is then wrapped in KclpyProcessor), or subclass "
            "kinesis.RecordProcessor"
        )
    return found


def _neither(processor: object) -> str:
    problems = kclpy_shape_problems(processor)
    hint = ""
    if hasattr(processor, "shutdown") and not hasattr(processor, "lease_lost"):
        hint = (" It looks like an amazon-kclpy v1/v2 processor (shutdown(...)): port it to the v3 "
                "interface, where shutdown becomes lease_lost(input) and shard_ended(input).")
    elif _looks_like_sdk(processor):
        hint = " Its process_records takes (records, checkpointer): subclass kinesis.RecordProcessor."
    return (
        "Subclass kinesis.RecordProcessor (process_records(records, checkpointer, "
        "millis_behind_latest=None)), or give it amazon-kclpy v3's "
        f"{', '.join(KCLPY_METHODS)} taking one input object each (as an amazon-kclpy v3 "
        f"processor it has: {'; '.join(problems)}).{hint}"
    )


def _looks_like_sdk(processor: object) -> bool:
    method = getattr(processor, "process_records", None)
    if method is None or not callable(method):
        return False
    try:
        names = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return False
    return "checkpointer" in names
