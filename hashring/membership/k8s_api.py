"""The Kubernetes API calls membership makes, each retried and translated into clear errors.

Calls per mode (this is exactly what the example Role in ``examples/k8s/rbac.yaml`` grants):

* ``replicaset``: get own pod, get its ReplicaSet, list (and watch) pods;
* ``deployment``: the same plus get the ReplicaSet's Deployment;
* ``statefulset``: get own pod, get ``statefulsets/scale``, list (and watch) pods;
* ``label_selector``: list (and watch) pods only.
"""

from __future__ import annotations

import json
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

from hashring.errors import KubernetesAPIError, MembershipError, PodOwnerError
from hashring.membership.k8s_errors import ApiCall, translate
from hashring.membership.k8s_errors import is_transient as _is_transient
from hashring.membership.k8s_pods import controller_of, selector_string

log = logging.getLogger("hashring.membership.kubernetes")

T = TypeVar("T")

MODES = ("deployment", "replicaset", "statefulset", "label_selector")

PERMISSIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    # (verb, resource, api group)
    "replicaset": (("get", "pods", ""), ("list", "pods", ""), ("get", "replicasets", "apps")),
    "deployment": (("get", "pods", ""), ("list", "pods", ""), ("get", "replicasets", "apps"),
                   ("get", "deployments", "apps")),
    "statefulset": (("get", "pods", ""), ("list", "pods", ""),
                    ("get", "statefulsets/scale", "apps")),
    "label_selector": (("list", "pods", ""),),
}


def permissions(mode: str, watch: bool) -> tuple[tuple[str, str, str], ...]:
    """The (verb, resource, api group) triples a mode calls."""
    extra = (("watch", "pods", ""),) if watch else ()
    return PERMISSIONS[mode] + extra


@dataclass(frozen=True)
class Target:
    """Which pods are members: resolved once from the own pod and cached."""

    selector: str
    replicaset: str | None = None
    deployment: str | None = None
    statefulset: str | None = None
    replicas: int | None = None  # the StatefulSet's scale when it was resolved


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
        sleep: Callable[[float], None] = time.sleep,
    ):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
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

    def resolve(self, pod_name: str, label_selector: str | None) -> Target:
        """Follow the own pod's owners to the selector the mode uses (the Knock procedure)."""
        if self.mode == "label_selector":
            assert label_selector is not None
            return Target(selector=label_selector)
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

    def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """(pods as JSON dicts, the list's resourceVersion) in one request."""

        def fetch() -> tuple[list[dict[str, Any]], str]:
            resp = self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False,
                _request_timeout=self.request_timeout)
            try:
                body = json.loads(resp.data)
            finally:
                resp.release_conn()
            if not isinstance(body, dict) or not isinstance(body.get("items", []), list):
                raise KubernetesAPIError(f"unexpected pod list from the API: {str(body)[:200]}")
            rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
            return list(body.get("items") or []), rv

        return self.call(self._call("list", "pods", "", None), fetch)

    def watch_pods(
        self, watcher: Any, selector: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request: (event type, raw object) until the server ends it.

        Raises the client's ``ApiException`` (status 410 when the resourceVersion
        is too old); the caller decides whether to re-list.
        """
        stream = watcher.stream(
            self.core.list_namespaced_pod,
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
        return self._call("watch", "pods", "", None)


def _describe(owner: tuple[str, str] | None) -> str:
    return "nothing (no controller ownerReference)" if owner is None else f"{owner[0]} {owner[1]!r}"


def _nonempty(selector: str, kind: str, name: str) -> str:
    if not selector:
        raise PodOwnerError(
            f"{kind} {name!r} has an empty selector, which would match every pod in the "
            "namespace: give it a selector or use mode='label_selector'"
        )
    return selector
