"""``WritePool``: the DynamoDB writes of one round, sent at once.

Renewals, takes, adoptions and hand-off writes of a round run on up to ``threads`` writer
threads, so a round costs about one round trip however many leases move. Used by the round
only (under the coordinator's round lock), which also shuts it down.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any


class WritePool:
    """Runs calls on lazily started writer threads named ``lease-writer-<member>``."""

    def __init__(self, threads: int, member_id: str):
        self._threads = threads
        self._name = f"lease-writer-{member_id}"
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run ``calls`` at once; their results (or exceptions), in order."""
        if len(calls) <= 1 or self._threads == 1:
            out: list[Any] = []
            for call in calls:
                try:
                    out.append(call())
                except Exception as exc:
                    out.append(exc)
            return out
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
        futures = [self._executor.submit(call) for call in calls]
        return [f.exception() or f.result() for f in futures]

    def shutdown(self) -> None:
        """Stop the writer threads (without waiting for them)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)


def raise_first(results: list[Any]) -> None:
    """Re-raise the first unexpected exception a writer thread returned."""
    for r in results:
        if isinstance(r, BaseException):
            raise r
