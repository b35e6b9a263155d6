"""The Kubernetes API calls membership makes, each retried and translated into clear errors.

Calls per mode (this is exactly what the example Role in ``examples/k8s/rbac.yaml`` grants):

* ``replicaset``: get own pod, get its ReplicaSet, list (and watch) pods;
* ``deployment``: the same plus get the ReplicaSet's Deployment;
* ``statefulset``: get own pod, get ``statefulsets/scale``, list (and watch) pods;
* ``label_selector``: list (and watch) pods only;
* ``endpointslice``: get the Service, list (and watch) its EndpointSlices
  (``discovery.k8s.io``); no pod is read at all.

Lists are paginated and served from the API server's watch cache
(:mod:`hashring.membership.k8s_paging`); watches decode events as plain JSON
(the client's model classes cost far more than the events are worth).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from hashring.errors import MembershipError, PodOwnerError
from hashring.membership.k8s_errors import ApiCall, translate
from hashring.membership.k8s_errors import is_transient as _is_transient
from hashring.membership.k8s_paging import DEFAULT_PAGE_SIZE, ListStats, list_all
from hashring.membership.k8s_pods import controller_of, selector_string
from hashring.membership.k8s_slices import SERVICE_NAME_LABEL

log = logging.getLogger(__name__)

T = TypeVar("T")

MODES = ("deployment", "replicaset", "statefulset", "label_selector", "endpointslice")
DISCOVERY = "discovery.k8s.io"

PERMISSIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    # (verb, resource, api group)
    "replicaset": (("get", "pods", ""), ("list", "pods", ""), ("get", "replicasets", "apps")),
    "deployment": (("get", "pods", ""), ("list", "pods", ""), ("get", "replicasets", "apps"),
                   ("get", "deployments", "apps")),
    "statefulset": (("get", "pods", ""), ("list", "pods", ""),
                    ("get", "statefulsets/scale", "apps")),
    "label_selector": (("list", "pods", ""),),
    "endpointslice": (("get", "services", ""), ("list", "endpointslices", DISCOVERY)),
}


def listed(mode: str) -> tuple[str, str]:
    """(resource, api group) a mode lists and watches."""
    return ("endpointslices", DISCOVERY) if mode == "endpointslice" else ("pods", "")


def permissions(mode: str, watch: bool) -> tuple[tuple[str, str, str], ...]:
    """The (verb, resource, api group) triples a mode calls."""
    extra = (("watch", *listed(mode)),) if watch else ()
    return PERMISSIONS[mode] + extra


@dataclass(frozen=True)
class Target:
    """Which pods are members: resolved once from the own pod and cached."""

    selector: str
    replicaset: str | None = None
    deployment: str | None = None
    statefulset: str | None = None
    replicas: int | None = None  # the StatefulSet's scale when it was resolved
    service: str | None = None  # endpointslice mode: the Service whose slices are read
    publish_not_ready: bool = False  # that Service's spec.publishNotReadyAddresses


class KubeAPI:
    """Thin wrapper over ``CoreV1Api``/``AppsV1Api`` bound to one namespace and mode."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        mode: str,
        *,
        watch: bool,
        request_timeout: float,
        retries: int,
        retry_backoff: float,
        page_size: int | None = DEFAULT_PAGE_SIZE,
        compress: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.discovery = client.DiscoveryV1Api(api_client)
        self.page_size = page_size
        self.compress = compress
        self.stats = ListStats()
        self.namespace = namespace
        self.mode = mode
        self.request_timeout = request_timeout
        self._retries = retries
        self._backoff = retry_backoff
        self._sleep = sleep
        self._needs = ", ".join(
            f"{verb} {res}" + (f" ({grp})" if grp else "") for verb, res, grp in
            permissions(mode, watch)
        )

    # -- plumbing ----------------------------------------------------------------------

    def error(self, exc: BaseException, call: ApiCall, attempts: int = 1) -> MembershipError:
        """Translate a client failure for ``call`` into a :class:`MembershipError`."""
        return translate(exc, call, mode=self.mode, needs=self._needs, attempts=attempts)

    def call(self, call: ApiCall, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries (timeouts, 5xx, 429) and translate the final failure."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.debug("retrying %s after %s (attempt %d)", call.describe(), exc,
                      state.attempt_number)

        retrying = Retrying(
            stop=stop_after_attempt(self._retries),
            wait=wait_exponential(multiplier=self._backoff, max=self._backoff * 20)
            + wait_random(0, self._backoff),
            retry=retry_if_exception(_is_transient),
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(fn)
        except MembershipError:
            raise
        except Exception as exc:
            attempts = int(retrying.statistics.get("attempt_number", 1))
            raise self.error(exc, call, attempts) from exc

    def _call(self, verb: str, resource: str, group: str, name: str | None) -> ApiCall:
        return ApiCall(verb, resource, group, self.namespace, name)

    # -- one-time lookups --------------------------------------------------------------

    def resolve(self, pod_name: str, label_selector: str | None,
                service: str | None = None) -> Target:
        """Follow the own pod's owners to the selector the mode uses (the Knock procedure).

        ``endpointslice`` mode reads the Service instead (the own pod is not needed).
        """
        if self.mode == "label_selector":
            assert label_selector is not None
            return Target(selector=label_selector)
        if self.mode == "endpointslice":
            assert service is not None
            return self.resolve_service(service)
        pod = self.call(
            self._call("get", "pods", "", pod_name),
            lambda: self.core.read_namespaced_pod(
                pod_name, self.namespace, _request_timeout=self.request_timeout),
        )
        owner = controller_of(pod.metadata.owner_references)
        if self.mode == "statefulset":
            if owner is None or owner[0] != "StatefulSet":
                raise PodOwnerError(
                    f"pod {pod_name!r} is controlled by {_describe(owner)}, not a StatefulSet: "
                    "use mode='deployment' (Deployments), 'replicaset' or 'label_selector'"
                )
            replicas, selector = self.read_scale(owner[1])
            return Target(selector=_nonempty(selector, "StatefulSet", owner[1]),
                          statefulset=owner[1], replicas=replicas)
        if owner is None or owner[0] != "ReplicaSet":
            raise PodOwnerError(
                f"pod {pod_name!r} is controlled by {_describe(owner)}, not a ReplicaSet: use "
                "mode='statefulset' for StatefulSets or mode='label_selector' for anything else"
            )
        rs_name = owner[1]
        rs = self.call(
            self._call("get", "replicasets", "apps", rs_name),
            lambda: self.apps.read_namespaced_replica_set(
                rs_name, self.namespace, _request_timeout=self.request_timeout),
        )
        if self.mode == "replicaset":
            selector = selector_string(rs.spec.selector)
            return Target(selector=_nonempty(selector, "ReplicaSet", rs_name),
                          replicaset=rs_name)
        dep_owner = controller_of(rs.metadata.owner_references)
        if dep_owner is None or dep_owner[0] != "Deployment":
            raise PodOwnerError(
                f"ReplicaSet {rs_name!r} (owner of pod {pod_name!r}) is controlled by "
                f"{_describe(dep_owner)}, not a Deployment: use mode='replicaset'"
            )
        dep_name = dep_owner[1]
        dep = self.call(
            self._call("get", "deployments", "apps", dep_name),
            lambda: self.apps.read_namespaced_deployment(
                dep_name, self.namespace, _request_timeout=self.request_timeout),
        )
        selector = selector_string(dep.spec.selector)
        return Target(selector=_nonempty(selector, "Deployment", dep_name),
                      replicaset=rs_name, deployment=dep_name)

    def read_scale(self, statefulset: str) -> tuple[int, str]:
        """(spec.replicas, status.selector) from the StatefulSet's scale subresource."""
        scale = self.call(
            self._call("get", "statefulsets/scale", "apps", statefulset),
            lambda: self.apps.read_namespaced_stateful_set_scale(
                statefulset, self.namespace, _request_timeout=self.request_timeout),
        )
        replicas = scale.spec.replicas if scale.spec and scale.spec.replicas is not None else 0
        selector = scale.status.selector if scale.status and scale.status.selector else ""
        return int(replicas), str(selector)

    # -- the list and the watch --------------------------------------------------------

    def resolve_service(self, service: str) -> Target:
        """Read the Service once: it must exist; its slices carry its name as a label."""
        svc = self.call(
            self._call("get", "services", "", service),
            lambda: self.core.read_namespaced_service(
                service, self.namespace, _request_timeout=self.request_timeout),
        )
        spec = svc.spec
        publish = bool(spec is not None and spec.publish_not_ready_addresses)
        if spec is None or not spec.selector:
            log.warning("Service %r has no selector: the EndpointSlice controller manages no "
                        "slices for it, so its members are whatever slices labelled %s=%s "
                        "someone else writes", service, SERVICE_NAME_LABEL, service)
        if publish:
            log.info("Service %r sets publishNotReadyAddresses: membership reads each "
                     "endpoint's serving condition (the pod's readiness), not ready", service)
        return Target(selector=f"{SERVICE_NAME_LABEL}={service}", service=service,
                      publish_not_ready=publish)

    # -- the list and the watch --------------------------------------------------------

    def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """(pods as JSON dicts, the list's resourceVersion), paginated from the watch cache."""
        return self._list(self.core.list_namespaced_pod, "pods", "", selector)

    def list_endpoint_slices(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """(EndpointSlices as JSON dicts, the list's resourceVersion), like :meth:`list_pods`."""
        return self._list(self.discovery.list_namespaced_endpoint_slice, "endpointslices",
                          DISCOVERY, selector)

    def list_members(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """What the mode lists: EndpointSlices in endpointslice mode, else pods."""
        if self.mode == "endpointslice":
            return self.list_endpoint_slices(selector)
        return self.list_pods(selector)

    def _list(self, method: Callable[..., Any], resource: str, group: str,
              selector: str) -> tuple[list[dict[str, Any]], str]:
        call = self._call("list", resource, group, None)

        def request(kwargs: dict[str, Any]) -> Any:
            return method(self.namespace, label_selector=selector, _preload_content=False,
                          _request_timeout=self.request_timeout, **kwargs)

        return list_all(request, lambda fn: self.call(call, fn), page_size=self.page_size,
                        compress=self.compress, stats=self.stats,
                        what=f"list {resource} ({selector})")

    def watch(
        self, watcher: Any, selector: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request on what the mode lists: (event type, raw object) until it ends.

        Raises the client's ``ApiException`` (status 410 when the resourceVersion
        is too old); the caller decides whether to re-list.
        """
        if self.mode == "endpointslice":
            method = self.discovery.list_namespaced_endpoint_slice
        else:
            method = self.core.list_namespaced_pod

        # The client's Watch turns every event into model objects when the function's
        # docstring names a return type; this wrapper has none, so events stay JSON dicts.
        def list_or_watch(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        stream = watcher.stream(
            list_or_watch,
            self.namespace,
            label_selector=selector,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _request_timeout=(self.request_timeout, timeout_seconds + self.request_timeout),
        )
        for event in stream:
            yield str(event["type"]), event["raw_object"]

    def watch_call(self) -> ApiCall:
        """The ApiCall describing a watch (for error messages)."""
        resource, group = listed(self.mode)
        return self._call("watch", resource, group, None)


def _describe(owner: tuple[str, str] | None) -> str:
    return "nothing (no controller ownerReference)" if owner is None else f"{owner[0]} {owner[1]!r}"


def _nonempty(selector: str, kind: str, name: str) -> str:
    if not selector:
        raise PodOwnerError(
            f"{kind} {name!r} has an empty selector, which would match every pod in the "
            "namespace: give it a selector or use mode='label_selector'"
        )
    return selector
