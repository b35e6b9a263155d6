"""Watch mode: a background thread that keeps a view (pods or EndpointSlices) current.

Protocol (as client-go's reflector): list, then watch from the list's
resourceVersion; follow BOOKMARKs; when the server ends the watch, watch again
from the last resourceVersion; on ``410 Gone`` (the version is too old) list
again; on any other failure reconnect with exponential backoff and jitter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_when_event_set,
    wait_exponential,
    wait_random,
)

from hashring.errors import MembershipError
from hashring.membership.k8s_api import KubeAPI
from hashring.membership.k8s_errors import status_of
from hashring.membership.k8s_health import Freshness

log = logging.getLogger(__name__)


class View(Protocol):
    """What a watch keeps current: ``PodView`` or ``SliceView``."""

    resource_version: str

    def replace(self, items: Iterable[Mapping[str, Any]], resource_version: str) -> None: ...

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None: ...

    def bookmark(self, resource_version: str) -> None: ...


class ListWatcher:
    """Runs the list/watch loop on a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        api: KubeAPI,
        selector: str,
        view: View,
        freshness: Freshness,
        *,
        timeout_seconds: int,
        min_relist_interval: float,
        backoff: float,
        backoff_max: float,
    ):
        from kubernetes import watch

        self._api = api
        self._selector = selector
        self._view = view
        self._freshness = freshness
        self._timeout_seconds = timeout_seconds
        self._min_relist_interval = min_relist_interval
        self._stop = threading.Event()
        self._watch: Any = watch.Watch()
        self._need_list = False
        self._last_list = time.monotonic()
        self._retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=backoff, max=backoff_max) + wait_random(0, backoff),
            stop=stop_when_event_set(self._stop),
            sleep=self._sleep,
            before_sleep=self._failed,
            reraise=True,
        )
        self._thread = threading.Thread(target=self._run, name="hashring-k8s-watch", daemon=True)
        self.relists = 0
        self.watches = 0
        self.events = 0  # ADDED/MODIFIED/DELETED events applied

    def start(self) -> None:
        """Start watching from the view's resourceVersion (set by the initial list)."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and close the open watch connection.

        The client's ``Watch.stop()`` shuts the socket of the response it holds, but
        a request still being opened has no response yet (and ``stream()`` clears the
        stop flag when it starts), so the stop is repeated until the thread exits.
        """
        self._stop.set()
        self._watch.stop()
        if self._thread is threading.current_thread() or not self._thread.is_alive():
            return
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(0.05)
            self._watch.stop()

    @property
    def alive(self) -> bool:
        """Whether the watch thread is running."""
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._retrying(self._cycle)
            except Exception as exc:  # only reached once stop() was called
                log.debug("kubernetes watch loop stopped: %s", exc)
                return

    def _cycle(self) -> None:
        if self._need_list:
            self._relist()
        if not self._stop.is_set():
            self._watch_once()

    def _relist(self) -> None:
        wait = self._min_relist_interval - (time.monotonic() - self._last_list)
        if wait > 0 and self._stop.wait(wait):
            return
        self._last_list = time.monotonic()
        items, rv = self._api.list_members(self._selector)
        self._view.replace(items, rv)
        self._freshness.ok()
        self._need_list = False
        self.relists += 1

    def _watch_once(self) -> None:
        call = self._api.watch_call()
        self.watches += 1
        try:
            for event_type, obj in self._api.watch(
                self._watch, self._selector, self._view.resource_version, self._timeout_seconds
            ):
                if event_type == "BOOKMARK":
                    meta = obj.get("metadata") or {}
                    self._view.bookmark(str(meta.get("resourceVersion") or ""))
                elif event_type in ("ADDED", "MODIFIED", "DELETED"):
                    self._view.apply(event_type, obj)
                    self.events += 1
                self._freshness.ok()
                if self._stop.is_set():
                    self._watch.stop()
                    return
        except MembershipError:
            raise
        except Exception as exc:
            if status_of(exc) == 410:
                log.info("kubernetes watch expired (410 Gone, resourceVersion %s too old): "
                         "listing again", self._view.resource_version)
                self._need_list = True
                return
            if self._stop.is_set():
                return
            raise self._api.error(exc, call) from exc
        self._freshness.ok()  # the server ended the watch cleanly: the API is alive

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)  # stop() interrupts the backoff

    def _failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, MembershipError):
            self._freshness.failed(exc)
        delay = state.next_action.sleep if state.next_action else 0.0
        log.debug("kubernetes watch failed (%s); reconnecting in %.2fs", exc, delay)
