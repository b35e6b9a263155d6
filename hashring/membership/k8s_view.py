"""The member list derived from pods, and a version that changes exactly when it changes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from hashring.membership.k8s_pods import is_member, pod_name, statefulset_ordinal

log = logging.getLogger("hashring.membership.kubernetes")


class PodView:
    """Pods seen by a list or a watch; ``members`` is the sorted names of the member pods.

    ``version`` is an int that grows by one exactly when ``members`` changes, never
    on a refresh that finds the same members (new resourceVersions, new pods that
    are not Ready yet, ...).
    """

    def __init__(self, statefulset: str | None = None):
        self._statefulset = statefulset
        self._lock = threading.Lock()
        self._eligible: dict[str, bool] = {}
        self._replicas: int | None = None
        self.members: tuple[str, ...] = ()
        self.version = 0
        self.resource_version = ""

    def replace(self, pods: Iterable[Mapping[str, Any]], resource_version: str, *,
                replicas: int | None = None) -> None:
        """Replace every pod with a fresh list (a poll or a re-list), in one version step.

        ``replicas`` (StatefulSets) updates the replica count in the same step.
        """
        eligible = {pod_name(p): is_member(p) for p in pods}
        with self._lock:
            self._eligible = eligible
            self.resource_version = resource_version
            if replicas is not None:
                self._replicas = replicas
            self._recompute()

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED)."""
        name = pod_name(pod)
        rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if event_type == "DELETED":
                self._eligible.pop(name, None)
            else:
                self._eligible[name] = is_member(pod)
            if rv:
                self.resource_version = rv
            self._recompute()

    def bookmark(self, resource_version: str) -> None:
        """Remember a BOOKMARK's resourceVersion (where the next watch resumes)."""
        with self._lock:
            if resource_version:
                self.resource_version = resource_version

    def set_replicas(self, replicas: int | None) -> None:
        """A StatefulSet's desired replica count: ordinals at or above it drop out."""
        with self._lock:
            self._replicas = replicas
            self._recompute()

    def _recompute(self) -> None:
        sts, replicas = self._statefulset, self._replicas
        names = []
        for name, ok in self._eligible.items():
            if not ok:
                continue
            if sts is not None:
                ordinal = statefulset_ordinal(name, sts)
                if ordinal is None or (replicas is not None and ordinal >= replicas):
                    continue
            names.append(name)
        members = tuple(sorted(names))
        if members != self.members:
            old = set(self.members)
            self.members = members
            self.version += 1
            log.info(
                "kubernetes members changed (version %d, %d members): joined %s, left %s",
                self.version, len(members), sorted(set(members) - old),
                sorted(old - set(members)),
            )
