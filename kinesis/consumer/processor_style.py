"""Which processor interface a processor implements, and the adapter it needs.

Two shapes run on the Worker:

* ``"sdk"``: a :class:`kinesis.RecordProcessor` subclass (``process_records(records,
  checkpointer, millis_behind_latest=None)``), used as it is;
* ``"kclpy"``: an amazon-kclpy v3 processor, wrapped in
  :class:`~kinesis.consumer.kclpy_adapter.KclpyProcessor`: a subclass of
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

import inspect
from typing import Any

from kinesis.consumer.kclpy_adapter import (
    KCLPY_METHODS,
    KclpyProcessor,
    is_kclpy_subclass,
    kclpy_shape_problems,
)
from kinesis.consumer.processor import RecordProcessor
from kinesis.errors import ConfigurationError, ProcessorStyleError

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
