"""``KubernetesMembership``: the sorted list of Ready pods from the Kubernetes API, cached.

Modes (what "the fleet" is):

* ``deployment`` (default): own pod -> its ReplicaSet -> the Deployment, and the
  Deployment's selector. It matches the pods of the old *and* new ReplicaSets, so
  during a rolling update every pod sees the same list.
* ``replicaset``: the Knock procedure: own pod -> its ReplicaSet and that
  selector (which includes ``pod-template-hash``, so only that ReplicaSet's
  pods: during a rolling update the first new pod sees itself alone).
* ``statefulset``: the StatefulSet's pods ``<name>-<ordinal>``, limited to
  ordinals below the replica count of its ``scale`` subresource; pairs with the
  ``jump`` strategy.
* ``label_selector``: the pods matching a selector you give.
* ``endpointslice``: the EndpointSlices of a (headless) Service you name with
  ``service=``: the endpoint controller's digest of the pods' readiness, about
  20x smaller than the pods themselves, split over slices of 100 endpoints (see
  :mod:`hashring.membership.k8s_slices`). Needs no access to pods at all.

A pod is a member while it is Ready and has no ``deletionTimestamp``. The list
is cached for ``ttl`` seconds with one refresh in flight per process (or kept
current by a watch with ``watch=True``). Lists are paginated and served from
the API server's watch cache (:mod:`hashring.membership.k8s_paging`); a watch
costs bytes only for changes and bookmarks, and updates the sorted member list
in O(log N) per event. On API errors the last good list is
served for up to ``max_staleness`` seconds, then reads raise
:class:`~hashring.errors.StaleMembershipError`. It never returns an empty list
because of an error.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from cachetools import TTLCache

from hashring.errors import (
    KubernetesAPIError,
    KubernetesConfigurationError,
    MembershipError,
    MembershipUnavailableError,
)
from hashring.membership.k8s_api import MODES, KubeAPI, Target
from hashring.membership.k8s_config import (
    build_api_client,
    require_client,
    resolve_namespace,
    resolve_pod_name,
)
from hashring.membership.k8s_errors import NoEndpointSlicesError
from hashring.membership.k8s_health import Freshness
from hashring.membership.k8s_paging import DEFAULT_PAGE_SIZE
from hashring.membership.k8s_slices import SliceView
from hashring.membership.k8s_view import PodView
from hashring.membership.k8s_watch import ListWatcher

log = logging.getLogger(__name__)

_FRESH = "fresh"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class KubernetesMembership:
    """Members are the Ready, non-terminating pods of this pod's fleet; ``self_id`` is this pod.

    Args:
        mode: ``"deployment"`` (default), ``"replicaset"``, ``"statefulset"``,
            ``"label_selector"`` or ``"endpointslice"``.
        namespace: defaults to ``POD_NAMESPACE``, then the service account's
            namespace file.
        pod_name: this pod's name; defaults to ``POD_NAME``, then ``HOSTNAME``.
        label_selector: required with ``mode="label_selector"`` (a string such as
            ``"app=orders,tier in (a,b)"`` or a dict of labels); rejected otherwise.
        service: required with ``mode="endpointslice"``: the Service (headless, say)
            selecting the fleet's pods; members are its endpoints' pod names.
        api_client: a ``kubernetes.client.ApiClient``; by default the in-cluster
            config (falling back to ``~/.kube/config``), or ``kubeconfig`` when given.
        ttl: seconds a member list is served before the next read refreshes it
            (at most one list request per ``ttl`` per instance).
        max_staleness: seconds the last good list is served while the API fails;
            after that, reads raise :class:`~hashring.errors.StaleMembershipError`.
        watch: keep the list current with a watch (list, then watch from its
            resourceVersion, re-list on 410 Gone, reconnect with backoff) instead
            of polling.
        kubeconfig: path of a kubeconfig file to use instead of the in-cluster config.
        request_timeout: seconds per API request (connect and read).
        page_size: items per list request (``limit``); ``None`` lists everything in one
            request with no ``resourceVersion`` (a quorum read, as before pagination).
        compress: ask for gzip-compressed list responses (``Accept-Encoding: gzip``).
        retries: attempts per API call on timeouts, 429 and 5xx.
        retry_backoff: first backoff between attempts, doubling with jitter.
        clock: monotonic clock for the TTL and staleness (injectable for tests).

    Share one instance per process: every ``HashRing`` (one per consumer, say)
    over it reuses the same cached list.
    """

    def __init__(
        self,
        mode: str = "deployment",
        *,
        namespace: str | None = None,
        pod_name: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
        service: str | None = None,
        api_client: Any = None,
        ttl: float = 5.0,
        max_staleness: float = 60.0,
        watch: bool = False,
        kubeconfig: str | None = None,
        request_timeout: float = 5.0,
        retries: int = 3,
        retry_backoff: float = 0.2,
        page_size: int | None = DEFAULT_PAGE_SIZE,
        compress: bool = True,
        clock: Callable[[], float] | None = None,
    ):
        if mode not in MODES:
            raise KubernetesConfigurationError(
                f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
        selector = _check_selector(mode, label_selector)
        service = _check_service(mode, service)
        if page_size is not None and (isinstance(page_size, bool) or not isinstance(page_size, int)
                                      or page_size < 1):
            raise KubernetesConfigurationError(
                f"page_size must be an int >= 1 (items per list request) or None, got "
                f"{page_size!r}")
        if not isinstance(compress, bool):
            raise KubernetesConfigurationError(f"compress must be True or False, got {compress!r}")
        ttl = _positive("ttl", ttl)
        max_staleness = _positive("max_staleness", max_staleness)
        if max_staleness < ttl:
            raise KubernetesConfigurationError(
                f"max_staleness ({max_staleness:g}s) must be at least ttl ({ttl:g}s)")
        request_timeout = _positive("request_timeout", request_timeout)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise KubernetesConfigurationError(f"retries must be an int >= 1, got {retries!r}")
        if not isinstance(retry_backoff, int | float) or not retry_backoff >= 0:
            raise KubernetesConfigurationError(
                f"retry_backoff must be a number of seconds >= 0, got {retry_backoff!r}")
        if not isinstance(watch, bool):
            raise KubernetesConfigurationError(f"watch must be True or False, got {watch!r}")
        if api_client is not None and kubeconfig is not None:
            raise KubernetesConfigurationError("pass api_client= or kubeconfig=, not both")
        require_client()

        self.mode = mode
        self.ttl = ttl
        self.max_staleness = max_staleness
        self.watch = watch
        self._self_id = resolve_pod_name(pod_name)
        self.namespace = resolve_namespace(namespace)
        self._label_selector = selector
        self.service = service
        self._owns_client = api_client is None
        self._api_client = api_client if api_client is not None else build_api_client(kubeconfig)
        self._retry_backoff = float(retry_backoff)
        self._api = KubeAPI(
            self._api_client, self.namespace, mode, watch=watch,
            request_timeout=request_timeout, retries=retries, retry_backoff=retry_backoff,
            page_size=page_size, compress=compress,
        )
        self._clock: Callable[[], float] = clock if clock is not None else time.monotonic
        self._fresh: TTLCache[str, bool] = TTLCache(maxsize=1, ttl=ttl, timer=self._clock)
        self._fresh_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._health = Freshness(max_staleness, self._clock)
        self._target: Target | None = None
        self._view: PodView | SliceView | None = None
        self._watcher: ListWatcher | None = None
        self._scale_failing = False
        self._closed = False
        self._next_refresh = -math.inf  # when the TTL entry expires (mirrors self._fresh)
        self._fast_until = -math.inf  # reads before this need no lock and no TTL check

    # -- the Membership protocol -------------------------------------------------------

    @property
    def self_id(self) -> str:
        """This pod's name."""
        return self._self_id

    @property
    def version(self) -> int:
        """Grows by one exactly when the sorted member list changes.

        Cheap: one clock read; at most once per ``ttl`` a read refreshes (single-flight).
        """
        view = self._view
        if view is not None and self._clock() < self._fast_until:
            return view.version
        return self._current_slow().version

    @property
    def malformed_pods_skipped(self) -> int:
        """Malformed pods skipped (never members) so far; each is logged once."""
        view = self._view
        return view.malformed_skipped if isinstance(view, PodView) else 0

    def members(self) -> tuple[str, ...]:
        """The Ready, non-terminating member pods, sorted by name."""
        view = self._view
        if view is not None and self._clock() < self._fast_until:
            return view.members
        return self._current_slow().members

    # -- introspection and lifecycle ---------------------------------------------------

    @property
    def target(self) -> Target | None:
        """The resolved selector and owner names (None before the first read)."""
        return self._target

    @property
    def age(self) -> float | None:
        """Seconds since the last good contact with the API (None before the first)."""
        return self._health.age()

    @property
    def api(self) -> KubeAPI:
        """The API wrapper (its ``core``/``apps`` clients)."""
        return self._api

    def close(self) -> None:
        """Stop the watch (if any) and release the API client this instance created."""
        self._closed = True
        self._fast_until = -math.inf
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
        if self._owns_client:
            self._api_client.close()

    def __enter__(self) -> KubernetesMembership:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"KubernetesMembership(mode={self.mode!r}, namespace={self.namespace!r}, "
                f"self_id={self._self_id!r}, watch={self.watch})")

    # -- internals -----------------------------------------------------------------------

    # Hot path (version/members on every can_acquire_lease): one clock read while no refresh
    # is due and the data is young enough; otherwise the slow path below, gated by the TTL cache.

    def _current_slow(self) -> PodView | SliceView:
        if self._closed:
            raise MembershipUnavailableError("KubernetesMembership is closed")
        self._maybe_refresh()
        self._health.check()
        view = self._view
        assert view is not None  # a good read happened, so the view exists
        last_ok = self._health.last_ok
        if last_ok is not None and not self._closed:
            self._fast_until = min(self._next_refresh, last_ok + self.max_staleness)
        return view

    def _maybe_refresh(self) -> None:
        """Refresh when the TTL has expired; one refresh in flight, whatever the callers."""
        with self._fresh_lock:
            if _FRESH in self._fresh:
                return
        # With a list in hand, other callers serve it instead of queueing behind the refresh;
        # before the first list they wait for it.
        if not self._refresh_lock.acquire(blocking=self._health.last_ok is None):
            return
        try:
            with self._fresh_lock:
                if _FRESH in self._fresh:
                    return
            listed = False
            try:
                listed = self._refresh()
            except MembershipError as exc:
                self._health.failed(exc)
            except Exception as exc:
                self._health.failed(KubernetesAPIError(
                    f"unexpected failure reading Kubernetes membership: {exc!r}"))
                log.exception("unexpected failure reading Kubernetes membership")
            finally:
                with self._fresh_lock:  # success or not: the next attempt waits one ttl
                    self._next_refresh = self._clock() + self.ttl
                    self._fresh[_FRESH] = True
            if listed:  # after the TTL mark, so age < ttl implies the mark is no older
                self._health.ok()
                if self.watch and not self._closed and self._watcher is None:
                    self._start_watch()
        finally:
            self._refresh_lock.release()

    def _refresh(self) -> bool:
        """Resolve (once), read the scale (StatefulSets) and list; True if it listed."""
        replicas: int | None = None
        if self._target is None:
            target = self._api.resolve(self._self_id, self._label_selector, self.service)
            log.info("kubernetes membership (mode %s) for pod %s: selector %r%s", self.mode,
                     self._self_id, target.selector,
                     "".join(f", {k} {v}" for k, v in (("replicaset", target.replicaset),
                                                       ("deployment", target.deployment),
                                                       ("statefulset", target.statefulset),
                                                       ("service", target.service))
                             if v))
            self._view = (SliceView(target.service) if target.service is not None
                          else PodView(target.statefulset))
            self._target = target
            replicas = target.replicas
        elif self._target.statefulset is not None:
            replicas = self._read_scale(self._target.statefulset)
        target, view = self._target, self._view
        assert view is not None
        if self._watcher is not None:  # pods come from the watch; only the scale is polled
            if replicas is not None and isinstance(view, PodView):
                view.set_replicas(replicas)
            return False
        items, rv = self._api.list_members(target.selector)
        if isinstance(view, SliceView):
            if not items:
                self._no_slices(target)
            view.replace(items, rv)
        else:
            view.replace(items, rv, replicas=replicas)
        return True

    def _no_slices(self, target: Target) -> None:
        """No EndpointSlice for the Service: say whether the Service is gone or sliceless."""
        assert target.service is not None
        self._api.resolve_service(target.service)  # raises ServiceNotFoundError if gone
        raise NoEndpointSlicesError(
            f"Service {target.service!r} in namespace {self.namespace!r} has no EndpointSlices "
            f"(none labelled {target.selector}): the Service has no selector, or the "
            "EndpointSlice controller has not caught up yet. Give the Service a selector "
            "matching the consumer pods (see examples/k8s/service.yaml)")

    def _read_scale(self, statefulset: str) -> int | None:
        if self._watcher is None:
            return self._api.read_scale(statefulset)[0]
        # Watch mode: pod data stays fresh from the watch; a failed scale read keeps the
        # last replica count rather than marking the whole view stale.
        try:
            replicas = self._api.read_scale(statefulset)[0]
        except MembershipError as exc:
            if not self._scale_failing:
                self._scale_failing = True
                log.warning("cannot read StatefulSet %s scale, keeping the last replica "
                            "count: %s", statefulset, exc)
            return None
        if self._scale_failing:
            self._scale_failing = False
            log.info("reading StatefulSet %s scale works again", statefulset)
        return replicas

    def _start_watch(self) -> None:
        assert self._target is not None and self._view is not None
        backoff = max(self._retry_backoff, 0.05)
        watcher = ListWatcher(
            self._api, self._target.selector, self._view, self._health,
            timeout_seconds=max(1, min(300, int(self.max_staleness / 2))),
            min_relist_interval=self.ttl,
            backoff=backoff,
            backoff_max=max(backoff, min(30.0, self.max_staleness / 4)),
        )
        self._watcher = watcher
        watcher.start()


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        raise KubernetesConfigurationError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _check_service(mode: str, service: str | None) -> str | None:
    if mode != "endpointslice":
        if service is not None:
            raise KubernetesConfigurationError(
                f"service is only used with mode='endpointslice' (mode is {mode!r}): drop it, "
                "or set mode='endpointslice'")
        return None
    if not isinstance(service, str) or not service.strip():
        raise KubernetesConfigurationError(
            "mode='endpointslice' needs service=, the name of a Service selecting every pod "
            "of the fleet (a headless one: clusterIP: None), e.g. service='orders-consumer'")
    name = service.strip()
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise KubernetesConfigurationError(
            f"service={service!r} is not a Service name (a DNS label: lower-case letters, "
            "digits and '-', starting with a letter, at most 63 characters)")
    return name


def _check_selector(mode: str, selector: str | Mapping[str, str] | None) -> str | None:
    if mode != "label_selector":
        if selector is not None:
            raise KubernetesConfigurationError(
                f"label_selector is only used with mode='label_selector' (mode is {mode!r}): "
                "drop it, or set mode='label_selector'")
        return None
    if isinstance(selector, Mapping):
        if not selector or not all(isinstance(k, str) and k and isinstance(v, str)
                                   for k, v in selector.items()):
            raise KubernetesConfigurationError(
                f"label_selector as a dict must map label names to string values, got "
                f"{dict(selector)!r}")
        return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    if not isinstance(selector, str) or not selector.strip():
        raise KubernetesConfigurationError(
            "mode='label_selector' needs label_selector=, e.g. 'app=orders-consumer' "
            "(a selector matching every pod of the fleet)")
    return selector.strip()
