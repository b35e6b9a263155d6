"""Who is a member according to a Service's EndpointSlices (``discovery.k8s.io/v1``).

The EndpointSlice controller publishes one endpoint per pod selected by the
Service, in slices of at most 100 endpoints (``--max-endpoints-per-slice``),
labelled ``kubernetes.io/service-name=<service>``. An endpoint carries:

* ``conditions.serving``: the pod's Ready condition, whether or not it is terminating;
* ``conditions.terminating``: the pod has a ``deletionTimestamp``;
* ``conditions.ready``: ``serving and not terminating`` for ordinary Services, but
  **always true** when the Service sets ``publishNotReadyAddresses: true`` (it is
  the "route traffic here" flag, which that setting overrides);
* ``targetRef`` (kind Pod, name) and, for StatefulSet pods of a headless
  Service, ``hostname``.

An endpoint is a member when it is serving and not terminating: the same rule
as the pod modes (Ready, no ``deletionTimestamp``), and it holds with
``publishNotReadyAddresses`` either way because ``serving`` is read, not
``ready``. Only when ``serving`` is absent (API servers before 1.20) does
``ready`` stand in for it; an absent condition counts as true, as the API says
consumers should read an unknown state. The member id is ``targetRef.name``
(a pod name, so the ids match the pod modes and ``POD_NAME``), or ``hostname``
for endpoints without a Pod ``targetRef``.

During an update an endpoint can appear in two slices at once (the controller
moving it, or the IPv4 and IPv6 slices of a dual-stack Service): a name is a
member while at least one of its copies is serving and none is terminating
(termination is one-way, so one terminating copy is enough to drop it).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from hashring.membership.k8s_members import SortedMembers

log = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

MEMBER, NOT_READY, TERMINATING = 1, 0, -1
_PRECEDENCE = {TERMINATING: 2, MEMBER: 1, NOT_READY: 0}  # one slice naming a pod twice
_MAX_LOGGED = 1000  # distinct malformed-input warnings remembered (then logged again)


class MalformedEndpointSliceError(ValueError):
    """An EndpointSlice (or one of its endpoints) is not shaped as ``discovery.k8s.io/v1`` says.

    Raised by :func:`parse_slice`; :class:`SliceView` skips what is malformed and
    logs each distinct problem once instead of failing the member list.
    """


def slice_name(obj: object) -> str:
    """``metadata.name`` of an EndpointSlice, or raise :class:`MalformedEndpointSliceError`."""
    if not isinstance(obj, Mapping):
        raise MalformedEndpointSliceError(
            f"EndpointSlice is a {type(obj).__name__}, not a JSON object")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise MalformedEndpointSliceError("EndpointSlice without metadata.name")
    return name


def endpoint_state(endpoint: Mapping[str, Any]) -> int:
    """MEMBER, NOT_READY or TERMINATING for one endpoint's ``conditions``."""
    conditions = endpoint.get("conditions")
    if conditions is None:
        conditions = {}
    if not isinstance(conditions, Mapping):
        raise MalformedEndpointSliceError(f"conditions is {conditions!r}, not an object")
    values = {}
    for key in ("ready", "serving", "terminating"):
        value = conditions.get(key)
        if value is not None and not isinstance(value, bool):
            raise MalformedEndpointSliceError(f"conditions.{key} is {value!r}, not true/false")
        values[key] = value
    if values["terminating"]:
        return TERMINATING
    serving = values["serving"] if values["serving"] is not None else values["ready"]
    return NOT_READY if serving is False else MEMBER


def endpoint_name(endpoint: Mapping[str, Any]) -> str:
    """The member id: ``targetRef.name`` of a Pod, else ``hostname``."""
    ref = endpoint.get("targetRef")
    if ref is not None and not isinstance(ref, Mapping):
        raise MalformedEndpointSliceError(f"targetRef is {ref!r}, not an object")
    if ref is not None and ref.get("kind", "Pod") == "Pod":
        name = ref.get("name")
        if isinstance(name, str) and name:
            return name
    hostname = endpoint.get("hostname")
    if isinstance(hostname, str) and hostname:
        return hostname
    raise MalformedEndpointSliceError(
        "endpoint names no pod: it has neither targetRef (kind Pod, name) nor hostname")


def parse_slice(obj: Mapping[str, Any]) -> tuple[dict[str, int], list[str]]:
    """({member id: state}, problems) for one slice; malformed endpoints are left out.

    Raises :class:`MalformedEndpointSliceError` only when the slice as a whole is
    unusable (``endpoints`` not a list); ``problems`` describes skipped endpoints.
    """
    endpoints = obj.get("endpoints")
    if endpoints is None:  # an empty slice omits the field
        endpoints = []
    if not isinstance(endpoints, list):
        raise MalformedEndpointSliceError(f"endpoints is {type(endpoints).__name__}, not a list")
    states: dict[str, int] = {}
    problems: list[str] = []
    for i, endpoint in enumerate(endpoints):
        try:
            if not isinstance(endpoint, Mapping):
                raise MalformedEndpointSliceError(f"is {endpoint!r}, not an object")
            name, state = endpoint_name(endpoint), endpoint_state(endpoint)
        except MalformedEndpointSliceError as exc:
            problems.append(f"endpoints[{i}]: {exc}")
            continue
        old = states.get(name)
        if old is None or _PRECEDENCE[state] > _PRECEDENCE[old]:
            states[name] = state
    return states, problems


class SliceView:
    """The members named by a Service's EndpointSlices, kept per slice.

    A watch event replaces one slice: the cost is that slice's endpoints (at most
    100 by default) plus O(log N) per member that actually joins or leaves.
    ``version`` grows by one exactly when ``members`` changes.
    """

    def __init__(self, service: str):
        self.service = service
        self._lock = threading.Lock()
        self._slices: dict[str, dict[str, int]] = {}
        self._serving: Counter[str] = Counter()  # slices in which the name is a member
        self._terminating: Counter[str] = Counter()  # slices in which it is terminating
        self._members = SortedMembers()
        self._logged: set[str] = set()
        self._empty_warned = False
        self.resource_version = ""

    @property
    def members(self) -> tuple[str, ...]:
        """The sorted member ids (pod names)."""
        return self._members.members

    @property
    def version(self) -> int:
        """Grows by one exactly when ``members`` changes."""
        return self._members.version

    @property
    def slice_count(self) -> int:
        """How many slices the view holds."""
        return len(self._slices)

    def replace(self, slices: Iterable[Mapping[str, Any]], resource_version: str) -> None:
        """Every slice of the Service from a fresh list, in one version step."""
        parsed: dict[str, dict[str, int]] = {}
        for obj in slices:
            entry = self._parse(obj)
            if entry is not None:
                parsed[entry[0]] = entry[1]
        serving: Counter[str] = Counter()
        terminating: Counter[str] = Counter()
        for states in parsed.values():
            for name, state in states.items():
                if state == MEMBER:
                    serving[name] += 1
                elif state == TERMINATING:
                    terminating[name] += 1
        with self._lock:
            self._slices, self._serving, self._terminating = parsed, serving, terminating
            self.resource_version = resource_version
            self._members.replace(n for n in serving if not terminating[n])
            self._check_empty()

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED) for one slice."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        rv = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
        if event_type == "DELETED":
            try:
                entry: tuple[str, dict[str, int]] | None = (slice_name(obj), {})
            except MalformedEndpointSliceError as exc:
                self._warn_once(f"?: {exc}", obj)
                entry = None
        else:
            entry = self._parse(obj)
        with self._lock:
            if rv:
                self.resource_version = rv
            if entry is None:
                return
            name, new = entry
            old = self._slices.pop(name, {})
            if new or event_type != "DELETED":
                self._slices[name] = new
            touched = [n for n in old.keys() | new.keys() if old.get(n) != new.get(n)]
            for member in touched:
                self._count(old.get(member), -1, member)
                self._count(new.get(member), +1, member)
            with self._members.begin() as change:
                for member in touched:
                    if self._serving[member] > 0 and not self._terminating[member]:
                        change.add(member)
                    else:
                        change.discard(member)
                    if not self._serving[member]:
                        del self._serving[member]
                    if not self._terminating[member]:
                        del self._terminating[member]
            self._check_empty()

    def bookmark(self, resource_version: str) -> None:
        """Remember a BOOKMARK's resourceVersion (where the next watch resumes)."""
        with self._lock:
            if resource_version:
                self.resource_version = resource_version

    def _check_empty(self) -> None:
        """Warn once each time the Service loses its last slice."""
        if self._slices:
            self._empty_warned = False
        elif not self._empty_warned:
            self._empty_warned = True
            log.warning("Service %r has no EndpointSlices any more (deleted, or it lost its "
                        "selector): no members until they return", self.service)

    def _count(self, state: int | None, delta: int, name: str) -> None:
        if state == MEMBER:
            self._serving[name] += delta
        elif state == TERMINATING:
            self._terminating[name] += delta

    def _parse(self, obj: Mapping[str, Any]) -> tuple[str, dict[str, int]] | None:
        """(slice name, states), or None (logged once) if the slice is unusable."""
        try:
            name = slice_name(obj)
        except MalformedEndpointSliceError as exc:
            self._warn_once(f"?: {exc}", obj)
            return None
        try:
            states, problems = parse_slice(obj)
        except MalformedEndpointSliceError as exc:
            self._warn_once(f"{name}: {exc}", None)
            return name, {}  # what it said before no longer counts
        for problem in problems:
            self._warn_once(f"{name}: {problem}", None)
        return name, states

    def _warn_once(self, problem: str, obj: object) -> None:
        if problem in self._logged:
            return
        if len(self._logged) >= _MAX_LOGGED:
            self._logged.clear()
        self._logged.add(problem)
        shown = f" ({str(obj)[:200]})" if obj is not None else ""
        log.warning("EndpointSlice of Service %r skipped: %s%s; fix whatever writes it (the "
                    "EndpointSlice controller writes well-formed ones)", self.service, problem,
                    shown)
