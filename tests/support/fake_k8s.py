"""A fake Kubernetes API server on 127.0.0.1 for tests.

It speaks the real wire format (Kubernetes JSON over HTTP/1.1, chunked watch
streams) so the official ``kubernetes`` client runs against it unmodified; only
``Configuration.host`` differs from production. It serves:

* pods (ownerReferences, Ready conditions, deletionTimestamp) and
  EndpointSlices (``discovery.k8s.io/v1``): get, list with ``labelSelector``
  (=, ==, !=, in, notin, exists, !exists), watch from a ``resourceVersion`` with
  BOOKMARKs and ``410 Gone`` for expired versions;
* list semantics of a real API server: ``limit``/``continue`` pagination over a
  consistent snapshot (``410`` once a continue token expired, ``400`` for a
  resourceVersion next to a token), ``resourceVersion="0"`` served "from the
  watch cache" (with ``legacy_watch_cache=True`` it ignores ``limit``, as API
  servers before 1.34 do), ``resourceVersionMatch`` checked, gzip for bodies of
  128 KiB or more when the client sends ``Accept-Encoding: gzip``;
* Services and their EndpointSlices, kept in step with the pods by an emulated
  EndpointSlice controller (``tests/support/fake_k8s_slices.py``);
* ReplicaSets, Deployments, StatefulSets and ``statefulsets/scale``: get;
* RBAC: with ``rbac_rules`` (a Role's rules), anything else gets the API
  server's 403;
* faults: error statuses, delays and dropped connections, per verb/resource;
* a record of every request (verb, API group, resource, name, query, status,
  bytes sent, whether gzip was asked for).

``realistic_pods=True`` gives pods the fields a real pod carries (managedFields,
container statuses, volumes, env...: about 5.5 KB of JSON each) for benchmarks.
"""

from __future__ import annotations

import base64
import bisect
import copy
import gzip
import json
import random
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.fake_k8s_slices import SERVICE_LABEL, EndpointSliceController

_CORE = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|services)(?:/(?P<name>[^/]+))?/?$")
_APPS = re.compile(
    r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/(?P<res>replicasets|deployments|statefulsets)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>scale))?)?/?$"
)
_DISCOVERY = re.compile(
    r"^/apis/discovery\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/(?P<res>endpointslices)"
    r"(?:/(?P<name>[^/]+))?/?$")
_ROUTES = ((_CORE, ""), (_APPS, "apps"), (_DISCOVERY, "discovery.k8s.io"))
_WATCHED = ("pods", "endpointslices")
_LIST_KINDS = {"pods": ("PodList", "v1"), "endpointslices": ("EndpointSliceList",
                                                           "discovery.k8s.io/v1")}
GZIP_THRESHOLD = 128 * 1024  # the API server compresses bodies at least this large
_MAX_SNAPSHOTS = 64  # paginated lists in progress; older continue tokens get 410
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_TIMESTAMP = "2026-01-01T00:00:00Z"


class FakeClock:
    """A monotonic clock that moves only when told: ``clock()``, ``clock.advance(s)``."""

    def __init__(self, start: float = 1000.0):
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


@dataclass
class Request:
    """One request the fake server answered."""

    verb: str  # get, list, watch
    api_group: str  # "", "apps" or "discovery.k8s.io"
    resource: str  # pods, services, endpointslices, replicasets, ..., statefulsets/scale
    namespace: str
    name: str | None
    query: Mapping[str, str]
    status: int  # 0: dropped, or answered late (a delay fault)
    gzip: bool = False  # the client sent Accept-Encoding: gzip
    bytes: int = 0  # body bytes sent (compressed if so); a watch's grow while it streams


@dataclass
class Fault:
    """Fail or slow down matching requests; ``times=None`` means until cleared."""

    status: int | None = None
    delay: float = 0.0
    drop: bool = False
    times: int | None = None
    verb: str | None = None
    resource: str | None = None
    query_has: str | None = None  # only requests with this query parameter (e.g. "continue")

    def matches(self, verb: str, resource: str, query: Mapping[str, str] | None = None) -> bool:
        return (self.verb in (None, verb)) and (self.resource in (None, resource)) and (
            self.query_has is None or self.query_has in (query or {})) and (
            self.times is None or self.times > 0)


@dataclass
class _Event:
    rv: int
    type: str
    obj: dict[str, Any]
    resource: str = "pods"
    data: bytes = b""  # the event as the watch stream sends it (BOOKMARKs: built per watch)


@dataclass
class _WatchState:
    generation: int = 0
    open: int = 0
    events: list[_Event] = field(default_factory=list)
    rvs: list[int] = field(default_factory=list)  # events' rvs, for bisect


@dataclass
class _Snapshot:
    """A paginated list in progress: the items as of its resourceVersion."""

    key: tuple[str, str, str]  # resource, namespace, labelSelector
    rv: int
    items: list[bytes]
    id: int = 0


# --- label selectors -------------------------------------------------------------------


def parse_selector(text: str) -> list[tuple[str, str, frozenset[str]]]:
    """Parse a labelSelector into (key, op, values) requirements."""
    reqs: list[tuple[str, str, frozenset[str]]] = []
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for raw in (p.strip() for p in parts):
        if not raw:
            continue
        m = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", raw)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append((m.group(1), m.group(2), values))
        elif "!=" in raw:
            k, v = raw.split("!=", 1)
            reqs.append((k.strip(), "!=", frozenset([v.strip()])))
        elif "==" in raw or "=" in raw:
            k, v = raw.split("==", 1) if "==" in raw else raw.split("=", 1)
            reqs.append((k.strip(), "=", frozenset([v.strip()])))
        elif raw.startswith("!"):
            reqs.append((raw[1:].strip(), "!exists", frozenset()))
        else:
            reqs.append((raw, "exists", frozenset()))
    return reqs


def selector_matches(reqs: Iterable[tuple[str, str, frozenset[str]]],
                     labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy every requirement."""
    for key, op, values in reqs:
        has = key in labels
        value = labels.get(key)
        ok = {
            "=": has and value in values,
            "in": has and value in values,
            "!=": not has or value not in values,
            "notin": not has or value not in values,
            "exists": has,
            "!exists": not has,
        }[op]
        if not ok:
            return False
    return True


def _status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message, "reason": reason,
                            "code": code}
    if details:
        body["details"] = details
    return body


_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
            410: "Expired", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}


class FakeKubernetes:
    """The fake API server and its objects. Use as a context manager or start()/stop()."""

    def __init__(
        self,
        namespace: str = "default",
        *,
        rbac_rules: list[dict[str, Any]] | None = None,
        service_account: str = "orders-consumer",
        bookmark_interval: float | None = None,
        seed: int = 7,
        legacy_watch_cache: bool = False,
        realistic_pods: bool = False,
        gzip_threshold: int = GZIP_THRESHOLD,
    ):
        self.namespace = namespace
        self.rbac_rules = rbac_rules
        self.service_account = service_account
        self.bookmark_interval = bookmark_interval
        self.legacy_watch_cache = legacy_watch_cache
        self.realistic_pods = realistic_pods
        self.gzip_threshold = gzip_threshold
        self._rand = random.Random(seed)
        self._lock = threading.Condition()
        self._rv = 100
        self._compacted = 0
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            "pods": {}, "services": {}, "endpointslices": {}, "replicasets": {},
            "deployments": {}, "statefulsets": {}}
        self._item_json: dict[str, dict[tuple[str, str], bytes]] = {r: {} for r in _WATCHED}
        self._snapshots: dict[int, _Snapshot] = {}
        self._next_snapshot = 1
        self._slices = EndpointSliceController(
            put=lambda obj, event: self._put("endpointslices", obj, event),
            remove=lambda ns, name: self._remove("endpointslices", ns, name),
            new_name=self._unique_name, new_uid=self._uid)
        self._watch = _WatchState()
        self._faults: list[Fault] = []
        self._forbidden: set[tuple[str, str]] = set()
        self.requests: list[Request] = []
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeKubernetes:
        handler = _make_handler(self)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-k8s", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeKubernetes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def api_client(self) -> Any:
        """An official client configured as in production, except for the host."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    # -- requests seen ----------------------------------------------------------------------

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        """How many requests matched (any status)."""
        with self._lock:
            return sum(1 for r in self.requests
                       if verb in (None, r.verb) and resource in (None, r.resource))

    def bytes_served(self, verb: str | None = None, resource: str | None = None) -> int:
        """Body bytes sent for the matching requests (as sent: compressed when gzip)."""
        with self._lock:
            return sum(r.bytes for r in self.requests
                       if verb in (None, r.verb) and resource in (None, r.resource))

    def matching(self, verb: str | None = None, resource: str | None = None) -> list[Request]:
        """The matching requests, oldest first."""
        with self._lock:
            return [r for r in self.requests
                    if verb in (None, r.verb) and resource in (None, r.resource)]

    def permissions_used(self) -> set[tuple[str, str, str]]:
        """(api group, resource, verb) of every request answered."""
        with self._lock:
            return {(r.api_group, r.resource, r.verb) for r in self.requests}

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out (by any object)."""
        with self._lock:
            return self._rv

    @property
    def open_watches(self) -> int:
        """Watch streams currently open."""
        with self._lock:
            return self._watch.open

    # -- faults -------------------------------------------------------------------------------

    def fail(self, status: int | None = None, *, times: int | None = None, verb: str | None = None,
             resource: str | None = None, delay: float = 0.0, drop: bool = False,
             query_has: str | None = None) -> Fault:
        """Answer matching requests with ``status`` (after ``delay``), or drop the connection."""
        fault = Fault(status=status, delay=delay, drop=drop, times=times, verb=verb,
                      resource=resource, query_has=query_has)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def forbid(self, verb: str, resource: str) -> None:
        """Revoke one permission (on top of ``rbac_rules``)."""
        with self._lock:
            self._forbidden.add((verb, resource))

    def allow(self, verb: str, resource: str) -> None:
        with self._lock:
            self._forbidden.discard((verb, resource))

    def expire_watches(self) -> None:
        """Compact history: open watches get ``410 Gone``, and so does any older resourceVersion.

        Continue tokens of lists in progress expire too (their snapshot is gone).
        """
        with self._lock:
            self._compacted = self._rv + 1
            self._watch.generation += 1
            self._watch.events.clear()
            self._watch.rvs.clear()
            self._snapshots.clear()
            self._lock.notify_all()

    def expire_continue_tokens(self) -> None:
        """Every continue token handed out so far now gets ``410 Gone``."""
        with self._lock:
            self._snapshots.clear()

    def send_bookmark(self) -> None:
        """Ask open watches (that allow bookmarks) to send a BOOKMARK now."""
        with self._lock:
            self._rv += 1
            self._append_event(_Event(self._rv, "BOOKMARK", {}, resource=""))

    # -- objects ------------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _uid(self) -> str:
        return "%08x-%04x-4%03x-8%03x-%012x" % (  # noqa: UP031
            self._rand.getrandbits(32), self._rand.getrandbits(16), self._rand.getrandbits(12),
            self._rand.getrandbits(12), self._rand.getrandbits(48))

    def _unique_name(self, base: str) -> str:
        while True:
            name = base + "".join(self._rand.choice(_SUFFIX_CHARS) for _ in range(5))
            if all((self.namespace, name) not in objs for objs in self._objects.values()):
                return name

    def _append_event(self, event: _Event) -> None:
        if event.type != "BOOKMARK":
            event.data = json.dumps({"type": event.type, "object": event.obj}).encode() + b"\n"
        self._watch.events.append(event)
        self._watch.rvs.append(event.rv)
        self._lock.notify_all()

    def _put(self, resource: str, obj: dict[str, Any], event: str | None = None) -> None:
        """Store an object (never changed in place afterwards: updates store a new dict)."""
        meta = obj["metadata"]
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        key = (meta["namespace"], meta["name"])
        self._objects[resource][key] = obj
        if resource in _WATCHED:
            item = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            self._item_json[resource][key] = json.dumps(item).encode()
            if event:
                self._append_event(_Event(rv, event, obj, resource))
        if resource == "pods":
            self._slices.pod_changed(obj)

    def _remove(self, resource: str, namespace: str, name: str) -> None:
        """Delete an object: a DELETED event carrying its last state at a new resourceVersion."""
        obj = copy.deepcopy(self._objects[resource].pop((namespace, name)))
        self._item_json.get(resource, {}).pop((namespace, name), None)
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        if resource in _WATCHED:
            self._append_event(_Event(rv, "DELETED", obj, resource))
        if resource == "pods":
            self._slices.pod_changed(None, namespace=namespace, name=name)

    def _get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        try:
            return self._objects[resource][(namespace or self.namespace, name)]
        except KeyError:
            raise KeyError(f"no {resource} {name!r} in the fake cluster") from None

    def _owner_ref(self, kind: str, name: str, uid: str) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
                "controller": True, "blockOwnerDeletion": True}

    def _template(self, labels: Mapping[str, str]) -> dict[str, Any]:
        return {"metadata": {"labels": dict(labels)},
                "spec": {"containers": [{"name": "consumer", "image": "example/consumer:1"}]}}

    def add_pod(self, name: str, labels: Mapping[str, str], *, owner: tuple[str, str] | None = None,
                ready: bool = True) -> str:
        """A Running pod; ``owner`` is (kind, name) of its controller."""
        with self._lock:
            refs = []
            if owner is not None:
                kind, oname = owner
                resource = {"ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}[kind]
                refs.append(self._owner_ref(kind, oname, self._get(resource, oname)["metadata"]["uid"]))
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "uid": self._uid(),
                             "labels": dict(labels), "ownerReferences": refs,
                             "creationTimestamp": _TIMESTAMP},
                "spec": {"containers": [{"name": "consumer", "image": "example/consumer:1"}],
                         "serviceAccountName": self.service_account, "nodeName": "node-1",
                         "terminationGracePeriodSeconds": 30},
                "status": {"phase": "Running", "podIP": self._ip(),
                           "conditions": self._conditions(ready)},
            }
            if self.realistic_pods:
                _pad_pod(pod)
            self._put("pods", pod, "ADDED")
        return name

    def put_raw_pod(self, pod: dict[str, Any]) -> None:
        """Store ``pod`` exactly as given (malformed ones included: no validation), with an
        ADDED event; ``metadata.namespace`` and ``metadata.name`` must be there for the key."""
        with self._lock:
            self._put("pods", pod, "ADDED")

    def _ip(self) -> str:
        n = self._rand.getrandbits(16)
        return f"10.{n >> 8}.{n & 255}.{self._rand.randint(2, 250)}"

    @staticmethod
    def _conditions(ready: bool) -> list[dict[str, Any]]:
        flag = "True" if ready else "False"
        return [
            {"type": "Initialized", "status": "True", "lastTransitionTime": _TIMESTAMP},
            {"type": "Ready", "status": flag, "lastTransitionTime": _TIMESTAMP},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": _TIMESTAMP},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _TIMESTAMP},
        ]

    def set_ready(self, name: str, ready: bool = True) -> None:
        """Flip the pod's Ready condition (a readiness probe passing or failing)."""
        with self._lock:
            pod = copy.deepcopy(self._get("pods", name))
            pod["status"]["conditions"] = self._conditions(ready)
            self._put("pods", pod, "MODIFIED")

    def terminate(self, name: str) -> None:
        """Start graceful deletion: set deletionTimestamp (the pod may still report Ready)."""
        with self._lock:
            pod = copy.deepcopy(self._get("pods", name))
            pod["metadata"]["deletionTimestamp"] = _TIMESTAMP
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
            self._put("pods", pod, "MODIFIED")

    def delete_pod(self, name: str) -> None:
        """The pod is gone."""
        with self._lock:
            self._remove("pods", self.namespace, name)

    # -- Services and EndpointSlices ------------------------------------------------------------

    def add_service(self, name: str, selector: Mapping[str, str] | None, *,
                    headless: bool = True, publish_not_ready: bool = False,
                    max_per_slice: int = 100) -> None:
        """A Service; the emulated controller gives it EndpointSlices for its pods.

        ``selector=None``: a Service without a selector, which gets no managed slices.
        """
        with self._lock:
            uid = self._uid()
            svc = {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": self.namespace, "uid": uid,
                             "labels": {"app": name}, "creationTimestamp": _TIMESTAMP},
                "spec": {"selector": dict(selector) if selector else None,
                         "clusterIP": "None" if headless else "10.96.0.10",
                         "clusterIPs": ["None" if headless else "10.96.0.10"],
                         "type": "ClusterIP", "publishNotReadyAddresses": publish_not_ready,
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP",
                                    "targetPort": 8080}]},
                "status": {"loadBalancer": {}},
            }
            self._put("services", svc)
            if not selector:
                return
            pods = [p for (ns, _), p in sorted(self._objects["pods"].items())
                    if ns == self.namespace]
            self._slices.add_service(self.namespace, name, uid, selector, publish_not_ready,
                                     max_per_slice, pods)

    def delete_service(self, name: str) -> None:
        """The Service and (garbage-collected) its EndpointSlices are gone."""
        with self._lock:
            svc = self._objects["services"].pop((self.namespace, name))
            if svc["spec"]["selector"]:
                self._slices.delete_service(self.namespace, name)

    def reslice(self, service: str, max_per_slice: int) -> list[str]:
        """Repack the Service's endpoints into slices of ``max_per_slice`` (split or merge):
        new slices are written before the old ones are deleted. Returns the new slices."""
        with self._lock:
            return self._slices.reslice(self.namespace, service, max_per_slice)

    def put_endpoint_slice(self, obj: dict[str, Any], event: str = "ADDED") -> None:
        """Store an EndpointSlice as given (hand-written, malformed, ...), announced as ``event``.

        ``metadata.namespace`` defaults to the fake's namespace; a slice without a name is
        announced to watchers but cannot be listed.
        """
        with self._lock:
            meta = obj.setdefault("metadata", {}) if isinstance(obj.get("metadata"), dict) \
                else None
            if meta is not None and meta.get("name"):
                meta.setdefault("namespace", self.namespace)
                self._put("endpointslices", obj, event)
                return
            rv = self._next_rv()
            self._append_event(_Event(rv, event, obj, "endpointslices"))

    def delete_endpoint_slice(self, name: str) -> None:
        with self._lock:
            self._remove("endpointslices", self.namespace, name)

    def endpoint_slices(self, service: str) -> list[dict[str, Any]]:
        """The Service's EndpointSlices as stored (copies)."""
        with self._lock:
            return [copy.deepcopy(o) for (ns, _), o in sorted(self._objects["endpointslices"]
                                                               .items())
                    if ns == self.namespace
                    and (o["metadata"].get("labels") or {}).get(SERVICE_LABEL) == service]

    def pod_names(self) -> list[str]:
        with self._lock:
            return sorted(name for (_, name) in self._objects["pods"])

    def add_deployment(self, name: str, *, replicas: int = 3, template_hash: str = "5d8f7c9b6",
                       ready: bool = True, selector: Mapping[str, Any] | None = None) -> list[str]:
        """A Deployment with one ReplicaSet and ``replicas`` pods; returns the pod names."""
        with self._lock:
            labels = {"app": name}
            dep = {
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": self.namespace, "uid": self._uid(),
                             "labels": labels, "creationTimestamp": _TIMESTAMP},
                "spec": {"replicas": replicas,
                         "selector": dict(selector) if selector else {"matchLabels": labels},
                         "template": self._template(labels),
                         "strategy": {"type": "RollingUpdate",
                                      "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
                "status": {"replicas": replicas},
            }
            self._put("deployments", dep)
        return self.add_replicaset(name, template_hash, replicas=replicas, ready=ready)

    def add_replicaset(self, deployment: str | None, template_hash: str, *, replicas: int = 0,
                       ready: bool = True, app: str | None = None) -> list[str]:
        """A ReplicaSet ``<deployment>-<hash>`` (owned by the Deployment if given) and its pods."""
        app = app or deployment
        assert app is not None
        with self._lock:
            labels = {"app": app, "pod-template-hash": template_hash}
            name = f"{app}-{template_hash}"
            refs = []
            if deployment is not None:
                dep_uid = self._get("deployments", deployment)["metadata"]["uid"]
                refs.append(self._owner_ref("Deployment", deployment, dep_uid))
            rs = {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": self.namespace, "uid": self._uid(),
                             "labels": labels, "ownerReferences": refs,
                             "creationTimestamp": _TIMESTAMP},
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                         "template": self._template(labels)},
                "status": {"replicas": replicas},
            }
            self._put("replicasets", rs)
        return [self.add_replicaset_pod(name, ready=ready) for _ in range(replicas)]

    def add_replicaset_pod(self, replicaset: str, *, ready: bool = False) -> str:
        """A new pod ``<replicaset>-<5 chars>`` of the ReplicaSet (not Ready by default)."""
        with self._lock:
            labels = self._get("replicasets", replicaset)["spec"]["selector"]["matchLabels"]
            name = self._unique_name(f"{replicaset}-")
            return self.add_pod(name, labels, owner=("ReplicaSet", replicaset), ready=ready)

    def add_statefulset(self, name: str, *, replicas: int = 3, ready: bool = True) -> list[str]:
        """A StatefulSet and its pods ``<name>-0 .. <name>-<replicas-1>``."""
        with self._lock:
            labels = {"app": name}
            sts = {
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": self.namespace, "uid": self._uid(),
                             "labels": labels, "creationTimestamp": _TIMESTAMP},
                "spec": {"replicas": replicas, "serviceName": name,
                         "selector": {"matchLabels": labels}, "template": self._template(labels)},
                "status": {"replicas": replicas},
            }
            self._put("statefulsets", sts)
            return [self.add_pod(f"{name}-{i}", labels, owner=("StatefulSet", name), ready=ready)
                    for i in range(replicas)]

    def scale_statefulset(self, name: str, replicas: int) -> None:
        """Change spec.replicas (what the scale subresource reports); pods are separate."""
        with self._lock:
            sts = copy.deepcopy(self._get("statefulsets", name))
            sts["spec"]["replicas"] = replicas
            self._put("statefulsets", sts)

    # -- serving ------------------------------------------------------------------------------

    def _allowed(self, verb: str, group: str, resource: str) -> bool:
        if (verb, resource) in self._forbidden:
            return False
        if self.rbac_rules is None:
            return True
        return any(group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
                   and verb in rule.get("verbs", []) for rule in self.rbac_rules)

    def _take_fault(self, verb: str, resource: str,
                    query: Mapping[str, str] | None = None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(verb, resource, query):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        match, group = next(((m, g) for m, g in ((r.match(parts.path), g) for r, g in _ROUTES)
                             if m is not None), (None, ""))
        if handler.command != "GET" or match is None:
            self._send(handler, 404, _status(404, "NotFound", f"the server could not find "
                                             f"the requested resource ({parts.path})"))
            return
        m = match
        namespace, name = m.group("ns"), m.group("name")
        sub = m.groupdict().get("sub")
        resource = m.group("res") + ("/scale" if sub else "")
        watch = query.get("watch", "").lower() in ("true", "1")
        verb = "get" if name else ("watch" if watch else "list")
        gzip_ok = "gzip" in (handler.headers.get("Accept-Encoding") or "").lower()
        request: Request | None = None

        def record(status: int) -> None:
            nonlocal request
            if request is not None:
                return
            request = Request(verb, group, resource, namespace, name, query, status, gzip_ok)
            with self._lock:
                self.requests.append(request)

        def send(code: int, body: Mapping[str, Any] | bytes) -> None:
            record(code)
            assert request is not None
            counted = request

            def count(size: int) -> None:  # before sending: the client may look right after
                with self._lock:
                    counted.bytes += size

            self._send(handler, code, body, gzip_ok=gzip_ok, on_size=count)

        if not self._allowed(verb, group, resource):
            msg = (f'{resource.split("/")[0]}{(" " + repr(name)) if name else ""} is forbidden: '
                   f'User "system:serviceaccount:{namespace}:{self.service_account}" cannot '
                   f'{verb} resource "{resource}" in API group "{group}" in the namespace '
                   f'"{namespace}"')
            send(403, _status(403, "Forbidden", msg, kind=resource.split("/")[0], name=name or ""))
            return
        fault = self._take_fault(verb, resource, query)
        if fault is not None:
            if fault.delay:
                if fault.status is None and not fault.drop:
                    record(0)  # a slow answer: recorded on arrival (status 0: late)
                if self._stopping.wait(fault.delay):
                    return
            if fault.drop:
                record(0)
                handler.close_connection = True
                return
            if fault.status is not None:
                code = fault.status
                send(code, _status(code, _REASONS.get(code, "Unknown"), f"injected fault {code}"))
                return
        if verb == "watch":
            record(200)
            assert request is not None
            self._serve_watch(handler, resource, namespace, query, request)
            return
        if verb == "list":
            code, body = self._list(resource, namespace, query)
            send(code, body)
            return
        base = resource.split("/")[0]
        with self._lock:
            obj = self._objects[base].get((namespace, name or ""))
            obj = copy.deepcopy(obj) if obj is not None else None
        if obj is None:
            send(404, _status(404, "NotFound", f'{base} "{name}" not found', name=name, kind=base))
            return
        if resource == "statefulsets/scale":
            obj = self._scale(obj)
        send(200, obj)

    @staticmethod
    def _scale(sts: dict[str, Any]) -> dict[str, Any]:
        labels = sts["spec"]["selector"]["matchLabels"]
        meta = sts["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
                "spec": {"replicas": sts["spec"]["replicas"]},
                "status": {"replicas": sts["status"]["replicas"],
                           "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}}

    def _matching(self, resource: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        reqs = parse_selector(selector)
        return [o for (ns, _), o in sorted(self._objects[resource].items())
                if ns == namespace and selector_matches(reqs, o["metadata"].get("labels") or {})]

    def _list(self, resource: str, namespace: str,
              query: Mapping[str, str]) -> tuple[int, dict[str, Any] | bytes]:
        """A list response as a real API server gives it (see the module docstring)."""
        selector = query.get("labelSelector", "")
        rv_text = query.get("resourceVersion")
        match = query.get("resourceVersionMatch")
        token = query.get("continue")
        try:
            limit = int(query["limit"]) if query.get("limit") else 0
        except ValueError:
            return 400, _status(400, "BadRequest", f"invalid limit {query['limit']!r}")
        if match and not rv_text:
            return 400, _status(400, "BadRequest", "resourceVersionMatch is forbidden unless "
                                "resourceVersion is provided")
        if match and match not in ("NotOlderThan", "Exact"):
            return 400, _status(400, "BadRequest", f"unsupported resourceVersionMatch {match!r}")
        if match == "Exact" and rv_text == "0":
            return 400, _status(400, "BadRequest",
                                'resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        if token and (match or rv_text not in (None, "", "0")):
            return 400, _status(400, "BadRequest", "specifying resource version is not allowed "
                                "when using continue")
        with self._lock:
            if token:
                decoded = _decode_token(token)
                if decoded is None:
                    return 400, _status(400, "BadRequest", "continue key is not valid")
                snap_id, start = decoded
                snap = self._snapshots.get(snap_id)
                if snap is None:
                    return 410, _status(
                        410, "Expired", "The provided continue parameter is too old to display "
                        "a consistent list result. You can start a new list without the "
                        "continue parameter.")
                if snap.key != (resource, namespace, selector):
                    return 400, _status(400, "BadRequest", "continue token does not match the "
                                        "request's resource, namespace and labelSelector")
                return 200, self._page(resource, snap, start, limit)
            cached = rv_text == "0"
            if cached and self.legacy_watch_cache:
                limit = 0  # older API servers serve rv=0 from the watch cache, ignoring limit
            keys = [(ns, n) for (ns, n), o in sorted(self._objects[resource].items())
                    if ns == namespace
                    and selector_matches(parse_selector(selector), o["metadata"].get("labels")
                                         or {})]
            items = [self._item_json[resource][k] for k in keys]
            snap = _Snapshot((resource, namespace, selector), self._rv, items)
            if limit and len(items) > limit:
                snap.id = self._next_snapshot
                self._next_snapshot += 1
                self._snapshots[snap.id] = snap
                while len(self._snapshots) > _MAX_SNAPSHOTS:  # the oldest tokens expire
                    del self._snapshots[min(self._snapshots)]
            return 200, self._page(resource, snap, 0, limit)

    def _page(self, resource: str, snap: _Snapshot, start: int, limit: int) -> bytes:
        kind, api_version = _LIST_KINDS[resource]
        end = len(snap.items) if not limit else min(len(snap.items), start + limit)
        meta: dict[str, Any] = {"resourceVersion": str(snap.rv)}
        if end < len(snap.items):
            meta["continue"] = _encode_token(snap.id, end)
            meta["remainingItemCount"] = len(snap.items) - end
        return (b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[%s]}' % (
            kind.encode(), api_version.encode(), json.dumps(meta).encode(),
            b",".join(snap.items[start:end])))

    def _send(self, handler: BaseHTTPRequestHandler, code: int,
              body: Mapping[str, Any] | bytes, *, gzip_ok: bool = False,
              on_size: Callable[[int], None] | None = None) -> None:
        """Send a JSON response; ``on_size`` hears the body's size (as sent) first."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        encoded = gzip_ok and len(data) >= self.gzip_threshold
        if encoded:
            data = gzip.compress(data, compresslevel=1)  # the API server's level
        if on_size is not None:
            on_size(len(data))
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            if encoded:
                handler.send_header("Content-Encoding", "gzip")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            handler.close_connection = True

    def _watch_events(self, resource: str, namespace: str, query: Mapping[str, str],
                      client_gone: Callable[[], bool] = lambda: False
                      ) -> Iterator[bytes]:
        """Event lines for one watch request, blocking for new ones until its timeout."""
        reqs = parse_selector(query.get("labelSelector", ""))
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        interval = self.bookmark_interval if bookmarks else None
        deadline = time.monotonic() + float(query.get("timeoutSeconds", "1800"))
        rv_text = query.get("resourceVersion", "")
        kind, api_version = _LIST_KINDS[resource]
        kind = kind[:-len("List")]
        with self._lock:
            generation = self._watch.generation
            too_old = rv_text not in ("", "0") and int(rv_text) < self._compacted
            if rv_text in ("", "0"):  # "from now": synthetic ADDED events for the current state
                start = self._rv
                initial = self._matching(resource, namespace, query.get("labelSelector", ""))
            else:
                start, initial = int(rv_text), []
        if too_old:
            yield _line(self._gone(rv_text))
            return
        for obj in initial:
            yield _line({"type": "ADDED", "object": obj})
        last_bookmark = time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= deadline or client_gone():
                return
            bookmark_due = interval is not None and now - last_bookmark >= interval
            with self._lock:
                expired = self._watch.generation != generation
                first = bisect.bisect_right(self._watch.rvs, start)
                pending = self._watch.events[first:]
                current = self._rv
                if not expired and not pending and not bookmark_due:
                    wait = min(deadline - now, 0.1)  # look for a closed client now and then
                    if interval is not None:
                        wait = min(wait, max(0.001, last_bookmark + interval - now))
                    self._lock.wait(wait)
                    continue
            if expired:
                yield _line(self._gone(str(start)))
                return
            if not pending:  # a bookmark is due and nothing happened in (start, current]
                start, last_bookmark = current, time.monotonic()
                yield _line(self._bookmark(kind, api_version, current))
                continue
            for event in pending:
                start = event.rv
                if event.type == "BOOKMARK":
                    if bookmarks:
                        last_bookmark = time.monotonic()
                        yield _line(self._bookmark(kind, api_version, event.rv))
                    continue
                if event.resource != resource:
                    continue
                meta = event.obj.get("metadata") if isinstance(event.obj, dict) else None
                meta = meta if isinstance(meta, dict) else {}
                if meta.get("namespace", namespace) == namespace and selector_matches(
                        reqs, meta.get("labels") or {}):
                    yield event.data

    @staticmethod
    def _bookmark(kind: str, api_version: str, rv: int) -> dict[str, Any]:
        return {"type": "BOOKMARK",
                "object": {"kind": kind, "apiVersion": api_version,
                           "metadata": {"resourceVersion": str(rv)}}}

    @staticmethod
    def _gone(rv: str) -> dict[str, Any]:
        return {"type": "ERROR", "object": _status(
            410, "Expired", f"too old resource version: {rv}")}

    def _serve_watch(self, handler: BaseHTTPRequestHandler, resource: str, namespace: str,
                     query: Mapping[str, str], request: Request) -> None:
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            handler.wfile.flush()
            with self._lock:
                self._watch.open += 1
            try:
                for data in self._watch_events(resource, namespace, query,
                                               lambda: _client_gone(handler)):
                    with self._lock:
                        request.bytes += len(data)
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            finally:
                with self._lock:
                    self._watch.open -= 1
        except OSError:
            handler.close_connection = True


def _line(event: Mapping[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


def _encode_token(snapshot: int, start: int) -> str:
    raw = json.dumps({"v": "fake.k8s/1", "snapshot": snapshot, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str) -> tuple[int, int] | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["snapshot"]), int(data["start"])
    except (ValueError, KeyError, TypeError):
        return None


def _pad_pod(pod: dict[str, Any]) -> None:
    """Fields a real pod carries (about 5.5 KB of JSON in all), for realistic list sizes."""
    name = pod["metadata"]["name"]
    image = "registry.example.com/orders-consumer:1.0.0"
    pod["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/restartedAt": _TIMESTAMP,
        "prometheus.io/scrape": "true", "prometheus.io/port": "9102"}
    pod["metadata"]["generateName"] = name.rsplit("-", 1)[0] + "-"
    pod["metadata"]["managedFields"] = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": _TIMESTAMP, "fieldsType": "FieldsV1", "fieldsV1": {
             "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {},
                                                                "f:pod-template-hash": {}},
                            "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
             "f:spec": {"f:containers": {"k:{\"name\":\"consumer\"}": {
                 ".": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                 "f:ports": {}, "f:readinessProbe": {}, "f:resources": {}}},
                 "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                 "f:securityContext": {}, "f:serviceAccount": {},
                 "f:terminationGracePeriodSeconds": {}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": _TIMESTAMP,
         "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
             "f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {},
                                                        "f:lastTransitionTime": {},
                                                        "f:status": {}, "f:type": {}}},
             "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
             "f:podIPs": {".": {}, "k:{\"ip\":\"x\"}": {".": {}, "f:ip": {}}},
             "f:startTime": {}}}}]
    container = pod["spec"]["containers"][0]
    container.update({
        "image": image, "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                "fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                {"name": "AWS_REGION", "value": "eu-west-1"},
                {"name": "STREAM_NAME", "value": "orders"}],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"},
                  {"containerPort": 9102, "name": "metrics", "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"},
                           "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1,
                           "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080, "scheme": "HTTP"},
                          "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1,
                          "failureThreshold": 3},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                      "limits": {"memory": "512Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                          "name": "kube-api-access-x7k2p", "readOnly": True}]})
    pod["spec"].update({
        "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "preemptionPolicy":
        "PreemptLowerPriority", "priority": 0, "restartPolicy": "Always",
        "schedulerName": "default-scheduler", "securityContext": {},
        "serviceAccount": pod["spec"]["serviceAccountName"],
        "tolerations": [
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "tolerationSeconds": 300},
            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable",
             "operator": "Exists", "tolerationSeconds": 300}],
        "volumes": [{"name": "kube-api-access-x7k2p", "projected": {
            "defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}],
                               "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1",
                                                         "fieldPath": "metadata.namespace"},
                                            "path": "namespace"}]}}]}}]})
    status = pod["status"]
    status.update({
        "hostIP": "10.128.0.17", "hostIPs": [{"ip": "10.128.0.17"}],
        "podIPs": [{"ip": status["podIP"]}], "qosClass": "Burstable", "startTime": _TIMESTAMP,
        "containerStatuses": [{
            "containerID": "containerd://" + "0123456789abcdef" * 4, "image": image,
            "imageID": "registry.example.com/orders-consumer@sha256:" + "ab" * 32,
            "lastState": {}, "name": "consumer", "ready": True, "restartCount": 0,
            "started": True, "state": {"running": {"startedAt": _TIMESTAMP}},
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                              "name": "kube-api-access-x7k2p", "readOnly": True,
                              "recursiveReadOnly": "Disabled"}]}]})


def _client_gone(handler: BaseHTTPRequestHandler) -> bool:
    """Whether the client closed its end of a streaming connection (it never sends more)."""
    sock = handler.connection
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _make_handler(fake: FakeKubernetes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def setup(self) -> None:
            super().setup()
            # headers and body go out in separate writes: without this, Nagle's algorithm
            # and the client's delayed ACK add ~40 ms to every response
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            fake.handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def load_role_rules(path: str) -> list[dict[str, Any]]:
    """The rules of the (single) Role in a manifest file."""
    import yaml

    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    roles = [d for d in docs if d.get("kind") == "Role"]
    assert len(roles) == 1, f"expected exactly one Role in {path}, found {len(roles)}"
    return list(roles[0]["rules"])
