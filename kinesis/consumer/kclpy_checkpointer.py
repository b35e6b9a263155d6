"""amazon-kclpy's ``Checkpointer`` over the SDK's: same calls, errors in kclpy's vocabulary.

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
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import botocore.exceptions

from kinesis.consumer.positions import Position
from kinesis.consumer.prepared_checkpointer import PreparedCheckpointer
from kinesis.consumer.processor import Checkpointer
from kinesis.consumer.records import Record
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
