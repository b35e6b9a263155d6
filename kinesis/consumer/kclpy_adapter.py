"""Runs an amazon-kclpy v3 record processor on the Worker: :class:`KclpyProcessor`.

A kclpy v3 processor (``amazon_kclpy.v3.processor.RecordProcessorBase``, or any class with
its five methods) takes one input object per call. :class:`KclpyProcessor` is an SDK
:class:`~kinesis.consumer.processor.RecordProcessor` that builds those inputs
(:mod:`kinesis.consumer.kclpy_inputs`) and a kclpy checkpointer
(:mod:`kinesis.consumer.kclpy_checkpointer`) and calls the kclpy processor:

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

The Worker wraps kclpy processors by itself (see :mod:`kinesis.consumer.processor_style`);
``KclpyProcessor.factory(MyProcessor)`` declares one explicitly.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from kinesis.consumer.kclpy_checkpointer import SHUTDOWN, KclpyCheckpointer, KclpyCheckpointError
from kinesis.consumer.kclpy_inputs import (
    InitializeInput,
    KclpyRecord,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from kinesis.consumer.processor import Checkpointer, InitializationInput, RecordProcessor
from kinesis.consumer.records import Record as SdkRecord
from kinesis.errors import LeaseLostError, ProcessorStyleError

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
