"""The member list derived from pods, and a version that changes exactly when it changes."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from hashring.membership.k8s_members import SortedMembers
from hashring.membership.k8s_pods import is_member, pod_name, statefulset_ordinal


class PodView:
    """Pods seen by a list or a watch; ``members`` is the sorted names of the member pods.

    ``version`` is an int that grows by one exactly when ``members`` changes, never
    on a refresh that finds the same members (new resourceVersions, new pods that
    are not Ready yet, ...). A watch event costs O(log N) (one name in a sorted
    list), a re-list O(N log N).
    """

    def __init__(self, statefulset: str | None = None):
        self._statefulset = statefulset
        self._lock = threading.Lock()
        self._eligible: dict[str, bool] = {}  # every pod seen: Ready and not terminating?
        self._replicas: int | None = None
        self._members = SortedMembers()
        self.resource_version = ""

    @property
    def members(self) -> tuple[str, ...]:
        """The sorted names of the member pods."""
        return self._members.members

    @property
    def version(self) -> int:
        """Grows by one exactly when ``members`` changes."""
        return self._members.version

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
            self._members.replace(n for n, ok in eligible.items() if ok and self._counts(n))

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED) in O(log N)."""
        name = pod_name(pod)
        rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        deleted = event_type == "DELETED"
        ok = not deleted and is_member(pod)
        with self._lock:
            if deleted:
                self._eligible.pop(name, None)
            else:
                self._eligible[name] = ok
            if rv:
                self.resource_version = rv
            with self._members.begin() as change:
                if ok and self._counts(name):
                    change.add(name)
                else:
                    change.discard(name)

    def bookmark(self, resource_version: str) -> None:
        """Remember a BOOKMARK's resourceVersion (where the next watch resumes)."""
        with self._lock:
            if resource_version:
                self.resource_version = resource_version

    def set_replicas(self, replicas: int | None) -> None:
        """A StatefulSet's desired replica count: ordinals at or above it drop out."""
        with self._lock:
            if replicas == self._replicas:
                return
            self._replicas = replicas
            self._members.replace(n for n, ok in self._eligible.items() if ok and self._counts(n))

    def _counts(self, name: str) -> bool:
        """Whether an eligible pod counts (StatefulSets: an ordinal below the replica count)."""
        sts = self._statefulset
        if sts is None:
            return True
        ordinal = statefulset_ordinal(name, sts)
        return ordinal is not None and (self._replicas is None or ordinal < self._replicas)
