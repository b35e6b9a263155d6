"""Pure helpers over Kubernetes JSON: who counts as a member, selectors as strings.

Pods are handled as the plain JSON dicts the API returns (a list's ``items`` or
a watch event's object), which avoids the client's slow model deserialisation
on every refresh.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_ORDINAL = re.compile(r"^(?P<base>.+)-(?P<ordinal>0|[1-9][0-9]*)$")


def pod_problem(pod: object) -> str | None:
    """Why ``pod`` is too malformed to be a member (None when it is well-formed).

    The API server validates pods, so this only happens behind a broken proxy, admission
    webhook or fake; such a pod is skipped (never a member) instead of failing the list.
    """
    if not isinstance(pod, Mapping):
        return f"a list item is a {type(pod).__name__}, not an object"
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        return "metadata.name is missing or not a non-empty string"
    status = pod.get("status")
    if status is not None and not isinstance(status, Mapping):
        return f"status is a {type(status).__name__}, not an object"
    conditions = (status or {}).get("conditions")
    if conditions is not None and (
        not isinstance(conditions, list) or not all(isinstance(c, Mapping) for c in conditions)
    ):
        return "status.conditions is not a list of objects"
    return None


def is_member(pod: Mapping[str, Any]) -> bool:
    """A pod is a member while its Ready condition is True and it is not terminating.

    A pod with ``metadata.deletionTimestamp`` drops out at once (its leases must be
    handed off), even though it may still report Ready until its containers stop.
    A malformed pod (:func:`pod_problem`) is never a member.
    """
    if pod_problem(pod) is not None:
        return False
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_name(pod: Mapping[str, Any]) -> str:
    """The pod's ``metadata.name`` ("" when it has none)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def statefulset_ordinal(name: str, statefulset: str) -> int | None:
    """The ordinal of ``<statefulset>-<i>``, or None if the name is not one of its pods."""
    m = _ORDINAL.match(name)
    if m is None or m.group("base") != statefulset:
        return None
    return int(m.group("ordinal"))


def member_names(
    pods: Iterable[Mapping[str, Any]],
    *,
    statefulset: str | None = None,
    replicas: int | None = None,
) -> tuple[str, ...]:
    """The sorted names of the member pods.

    With ``statefulset``, only ``<statefulset>-<i>`` pods count, and with
    ``replicas`` only ordinals below it (pods above a scale-in target drop out
    before the controller even starts deleting them).
    """
    names = []
    for pod in pods:
        if not is_member(pod):
            continue
        name = pod_name(pod)
        if statefulset is not None:
            ordinal = statefulset_ordinal(name, statefulset)
            if ordinal is None or (replicas is not None and ordinal >= replicas):
                continue
        names.append(name)
    return tuple(sorted(set(names)))


def selector_string(selector: Any) -> str:
    """Render a ``V1LabelSelector`` (model or JSON dict) as a ``labelSelector`` query string."""
    if isinstance(selector, Mapping):
        labels = selector.get("matchLabels") or {}
        exprs = [
            (e.get("key"), e.get("operator"), e.get("values") or [])
            for e in selector.get("matchExpressions") or ()
        ]
    else:
        labels = getattr(selector, "match_labels", None) or {}
        exprs = [
            (e.key, e.operator, e.values or [])
            for e in getattr(selector, "match_expressions", None) or ()
        ]
    parts = [f"{k}={v}" for k, v in sorted(labels.items())]
    for key, op, values in exprs:
        joined = ",".join(sorted(values))
        if op == "In":
            parts.append(f"{key} in ({joined})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({joined})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise ValueError(f"unknown label selector operator {op!r} for key {key!r}")
    return ",".join(parts)


def controller_of(owner_references: Iterable[Any] | None) -> tuple[str, str] | None:
    """(kind, name) of the controlling owner reference (model or dict), if any."""
    for ref in owner_references or ():
        if isinstance(ref, Mapping):
            controller, kind, name = ref.get("controller"), ref.get("kind"), ref.get("name")
        else:
            controller, kind, name = ref.controller, ref.kind, ref.name
        if controller:
            return str(kind), str(name)
    return None
