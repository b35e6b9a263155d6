"""Turn Kubernetes client failures into specific, actionable :mod:`hashring` errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hashring.errors import (
    KubernetesAPIError,
    KubernetesPermissionError,
    MembershipError,
    OwnPodNotFoundError,
)

TRANSIENT_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})
"""Statuses worth retrying (0: the client could not connect or read)."""

EXAMPLE_RBAC = "examples/k8s/rbac.yaml"
EXAMPLE_SERVICE = "examples/k8s/service.yaml"


class ContinueExpiredError(KubernetesAPIError):
    """A paginated list's ``continue`` token expired (410): the list restarts from scratch."""


class ServiceNotFoundError(MembershipError):
    """``mode="endpointslice"``: the Service named by ``service=`` does not exist."""


class NoEndpointSlicesError(MembershipError):
    """``mode="endpointslice"``: the Service exists but has no EndpointSlices."""


@dataclass(frozen=True)
class ApiCall:
    """What a request was for: enough to name the RBAC rule it needs."""

    verb: str  # get, list, watch
    resource: str  # pods, services, replicasets, deployments, statefulsets/scale, endpointslices
    api_group: str  # "" (core), "apps" or "discovery.k8s.io"
    namespace: str
    name: str | None = None

    def describe(self) -> str:
        group = self.api_group or "core"
        target = f"{self.resource}/{self.name}" if self.name else self.resource
        return f"{self.verb} {target} ({group} API group) in namespace {self.namespace!r}"


def rbac_rule(verb: str, resource: str, api_group: str) -> str:
    """A Role rule granting one verb, as YAML flow text."""
    return f'{{apiGroups: ["{api_group}"], resources: ["{resource}"], verbs: ["{verb}"]}}'


def api_message(exc: Any) -> str:
    """The API server's own message from an ``ApiException`` body (a Status), if any."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            return body[:300]
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else type(exc).__name__


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an ``ApiException`` (0 for client-side failures), else None."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: timeouts, refused or dropped connections, 429 and 5xx."""
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES
    try:
        import urllib3.exceptions
    except ImportError:  # pragma: no cover - urllib3 always comes with kubernetes
        return isinstance(exc, OSError | ValueError)
    # ValueError: a truncated JSON body from a dropped connection.
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError | ValueError)


def translate(exc: BaseException, call: ApiCall, *, mode: str, needs: str,
              attempts: int = 1) -> MembershipError:
    """A :class:`MembershipError` naming what failed and how to fix it.

    ``needs`` lists every permission the membership mode uses, so one 403 tells
    the operator the whole Role, not just the first missing verb.
    """
    status = status_of(exc)
    detail = api_message(exc) if status else f"{type(exc).__name__}: {exc}"
    if status in (401, 403):
        if status == 401:
            msg = (
                f"Kubernetes API rejected the credentials (401 Unauthorized) for "
                f"{call.describe()}: the service account token is missing, expired or invalid. "
                "Check automountServiceAccountToken and the kubeconfig/API client you pass. "
            )
        else:
            msg = (
                f"Kubernetes API refused {call.describe()} (403 Forbidden): the pod's service "
                f"account lacks RBAC verb {call.verb!r} on resource {call.resource!r}. Add the "
                f"Role rule {rbac_rule(call.verb, call.resource, call.api_group)}. "
            )
        msg += (
            f"KubernetesMembership(mode={mode!r}) needs: {needs} (see {EXAMPLE_RBAC}). "
            f"API said: {detail}"
        )
        return KubernetesPermissionError(msg, status=status, verb=call.verb,
                                         resource=call.resource)
    if status == 404 and call.resource == "pods" and call.name:
        return OwnPodNotFoundError(
            f"own pod {call.name!r} not found in namespace {call.namespace!r}: HOSTNAME/POD_NAME "
            "is probably wrong (HOSTNAME differs from the pod name when spec.hostname is set or "
            "the name is over 63 characters), or the namespace is. Set POD_NAME and "
            "POD_NAMESPACE from the downward API (fieldRef metadata.name / metadata.namespace) "
            "or pass pod_name= and namespace=. API said: " + detail
        )
    if status == 404 and call.resource == "services" and call.name:
        return ServiceNotFoundError(
            f"Service {call.name!r} not found in namespace {call.namespace!r}: "
            f"KubernetesMembership(mode='endpointslice') reads the EndpointSlices of the "
            f"Service named by service=. Create it (a headless Service selecting the "
            f"consumer pods, see {EXAMPLE_SERVICE}) or fix service=/namespace=. API said: "
            + detail
        )
    if status == 404:
        return KubernetesAPIError(
            f"{call.describe()} returned 404 Not Found: the owner was deleted or the "
            f"namespace is wrong. API said: {detail}",
            status=404,
        )
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if status in TRANSIENT_STATUSES or status is None:
        return KubernetesAPIError(
            f"Kubernetes API unavailable for {call.describe()}{tried}: {detail}",
            status=status,
        )
    return KubernetesAPIError(
        f"Kubernetes API failed {call.describe()} with HTTP {status}: {detail}", status=status
    )
