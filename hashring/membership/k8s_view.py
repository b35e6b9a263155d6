"""The member list derived from pods, and a version that changes exactly when it changes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from hashring.membership.k8s_members import SortedMembers
from hashring.membership.k8s_pods import is_member, pod_name, pod_problem, statefulset_ordinal

log = logging.getLogger(__name__)
_MAX_LOGGED = 1000  # distinct malformed pods remembered (then logged again)


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
        self.malformed_skipped = 0
        """Malformed pods skipped so far (each list or event that carried one counts)."""
        self._logged: set[tuple[str, str]] = set()

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
        eligible = {pod_name(p): is_member(p) for p in pods if self._usable(p)}
        with self._lock:
            self._eligible = eligible
            self.resource_version = resource_version
            if replicas is not None:
                self._replicas = replicas
            self._members.replace(n for n, ok in eligible.items() if ok and self._counts(n))

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED) in O(log N)."""
        if not self._usable(pod):
            return
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

    def _usable(self, pod: Mapping[str, Any]) -> bool:
        """False for a malformed pod: counted, logged once per pod and problem, skipped."""
        problem = pod_problem(pod)
        if problem is None:
            return True
        self.malformed_skipped += 1
        key = (pod_name(pod), problem)
        if key not in self._logged:
            if len(self._logged) >= _MAX_LOGGED:
                self._logged.clear()
            self._logged.add(key)
            log.warning("malformed pod %r skipped (not a member): %s; fix whatever serves or "
                        "rewrites it (an admission webhook, a proxy)", key[0] or "?", problem)
        return False

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
