"""Where a Worker's keyed processors run: one event loop thread and one bounded thread pool.

``async def process`` coroutines of every shard run on one event loop (a daemon thread): a
record waiting on I/O costs no thread, so thousands can be in flight. A plain ``process`` runs
on a thread pool of ``threads`` threads shared by every shard. Per-shard limits are the
runners' (:mod:`kinesis.consumer.keyed.runner`); the Worker-wide cap on pending payload bytes
is here, so many shards together cannot exhaust memory.

``asyncio`` is imported where it is used: a Worker without keyed or async processors never
loads it (about 15 ms of start-up CPU, docs/benchmarks.md "CPU per record").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

Done = Callable[[BaseException | None], None]


class CallCancelled(BaseException):
    """A record call the SDK cancelled before it ran (a hand-off, a lost lease, the Worker
    stopping): it never ran, so it is neither an attempt nor a completion."""


class KeyedExecutor:
    """Runs record calls for every keyed runner of one Worker (thread-safe)."""

    def __init__(self, *, threads: int = 32, max_pending_bytes: int = 256 * 1024 * 1024):
        self.threads = threads
        self.max_pending_bytes = max_pending_bytes
        import asyncio

        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="keyed-process")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="keyed-loop", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.pending_bytes = 0
        self._closed = False

    def _run_loop(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    # --- running calls ----------------------------------------------------------------

    def run_async(self, make: Callable[[], Awaitable[Any]], done: Done) -> Future[None] | None:
        """Run the coroutine ``make()`` on the loop; ``done(error or None)`` once it ends.
        Cancelling the returned future cancels the call: ``done`` then gets ``CallCancelled``.
        A ``CancelledError`` the coroutine raises itself (nobody cancelled its task) is an
        error like any other, reported as a RuntimeError."""
        import asyncio

        async def call() -> None:
            try:
                await make()
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # cancelled by the SDK
                raise RuntimeError(f"process raised CancelledError: {exc}") from exc

        def finished(future: Future[None]) -> None:
            done(CallCancelled() if future.cancelled() else future.exception())

        if self._closed:
            done(CallCancelled())
            return None
        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        future.add_done_callback(finished)
        return future

    def run_sync(self, call: Callable[[], Any], done: Done) -> Future[Any] | None:
        """Run ``call()`` on the pool; ``done(error or None)`` on the pool thread. Cancelling the
        returned future before it starts cancels the call (a running one cannot be stopped)."""

        def finished(future: Future[Any]) -> None:
            # a cancelled call never ran: reported as CallCancelled (a BaseException, unlike
            # concurrent.futures' CancelledError, so it never counts as a failed attempt)
            done(CallCancelled() if future.cancelled() else future.exception())

        try:
            future = self._pool.submit(call)
        except RuntimeError:  # the pool was shut down (the Worker stops): never ran
            done(CallCancelled())
            return None
        future.add_done_callback(finished)
        return future

    def run_blocking(self, awaitable: Awaitable[Any]) -> Any:
        """Await ``awaitable`` on the loop and wait for its result here (an async batch call)."""
        import asyncio

        async def call() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the loop thread after ``delay`` seconds (a retry's backoff)."""
        self._loop.call_soon_threadsafe(self._loop.call_later, delay, callback)

    # --- the Worker-wide byte cap -------------------------------------------------------

    def reserve(self, nbytes: int) -> None:
        with self._lock:
            self.pending_bytes += nbytes

    def release(self, nbytes: int) -> None:
        with self._changed:
            self.pending_bytes -= nbytes
            self._changed.notify_all()

    def wait_for_room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the Worker's pending bytes to fall under the cap."""
        with self._changed:
            return self._changed.wait_for(lambda: self.pending_bytes < self.max_pending_bytes or self._closed,
                                          timeout)

    def full(self) -> bool:
        return self.pending_bytes >= self.max_pending_bytes

    def close(self) -> None:
        """Stop the loop and the pool (the Worker stopped: every runner has finished)."""
        import asyncio

        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

        async def cancel_and_stop() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()  # a record still running is delivered again by the next owner
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)  # the cancellations reach their callers' futures
            self._loop.stop()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(cancel_and_stop(), self._loop)
            self._thread.join(5)
