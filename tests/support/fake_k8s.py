"""A fake Kubernetes API server on 127.0.0.1 for tests.

It speaks the real wire format (Kubernetes JSON over HTTP/1.1, chunked watch
streams) so the official ``kubernetes`` client runs against it unmodified; only
``Configuration.host`` differs from production. It serves:

* pods (ownerReferences, Ready conditions, deletionTimestamp): get, list with
  ``labelSelector`` (=, ==, !=, in, notin, exists, !exists), watch from a
  ``resourceVersion`` with BOOKMARKs and ``410 Gone`` for expired versions;
* ReplicaSets, Deployments, StatefulSets and ``statefulsets/scale``: get;
* RBAC: with ``rbac_rules`` (a Role's rules), anything else gets the API
  server's 403;
* faults: error statuses, delays and dropped connections, per verb/resource;
* a record of every request (verb, API group, resource, name, query, status).
"""

from __future__ import annotations

import copy
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

_CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods)(?:/(?P<name>[^/]+))?/?$")
_APPS = re.compile(
    r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/(?P<res>replicasets|deployments|statefulsets)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>scale))?)?/?$"
)
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


@dataclass(frozen=True)
class Request:
    """One request the fake server answered."""

    verb: str  # get, list, watch
    api_group: str  # "" or "apps"
    resource: str  # pods, replicasets, deployments, statefulsets, statefulsets/scale
    namespace: str
    name: str | None
    query: Mapping[str, str]
    status: int  # 0: dropped, or answered late (a delay fault)


@dataclass
class Fault:
    """Fail or slow down matching requests; ``times=None`` means until cleared."""

    status: int | None = None
    delay: float = 0.0
    drop: bool = False
    times: int | None = None
    verb: str | None = None
    resource: str | None = None

    def matches(self, verb: str, resource: str) -> bool:
        return (self.verb in (None, verb)) and (self.resource in (None, resource)) and (
            self.times is None or self.times > 0)


@dataclass
class _Event:
    rv: int
    type: str
    obj: dict[str, Any]


@dataclass
class _WatchState:
    generation: int = 0
    open: int = 0
    events: list[_Event] = field(default_factory=list)


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
    ):
        self.namespace = namespace
        self.rbac_rules = rbac_rules
        self.service_account = service_account
        self.bookmark_interval = bookmark_interval
        self._rand = random.Random(seed)
        self._lock = threading.Condition()
        self._rv = 100
        self._compacted = 0
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            "pods": {}, "replicasets": {}, "deployments": {}, "statefulsets": {}}
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
             resource: str | None = None, delay: float = 0.0, drop: bool = False) -> Fault:
        """Answer matching requests with ``status`` (after ``delay``), or drop the connection."""
        fault = Fault(status=status, delay=delay, drop=drop, times=times, verb=verb,
                      resource=resource)
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
        """Compact history: open watches get ``410 Gone``, and so does any older resourceVersion."""
        with self._lock:
            self._compacted = self._rv + 1
            self._watch.generation += 1
            self._lock.notify_all()

    def send_bookmark(self) -> None:
        """Ask open watches (that allow bookmarks) to send a BOOKMARK now."""
        with self._lock:
            self._rv += 1
            self._watch.events.append(_Event(self._rv, "BOOKMARK", {}))
            self._lock.notify_all()

    # -- objects ------------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _uid(self) -> str:
        return "%08x-%04x-4%03x-8%03x-%012x" % (  # noqa: UP031
            self._rand.getrandbits(32), self._rand.getrandbits(16), self._rand.getrandbits(12),
            self._rand.getrandbits(12), self._rand.getrandbits(48))

    def _put(self, resource: str, obj: dict[str, Any], event: str | None = None) -> None:
        meta = obj["metadata"]
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._objects[resource][(meta["namespace"], meta["name"])] = obj
        if resource == "pods" and event:
            self._watch.events.append(_Event(rv, event, copy.deepcopy(obj)))
            self._lock.notify_all()

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
                "status": {"phase": "Running", "podIP": f"10.0.0.{self._rand.randint(2, 250)}",
                           "conditions": self._conditions(ready)},
            }
            self._put("pods", pod, "ADDED")
        return name

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
            pod = self._objects["pods"].pop((self.namespace, name))
            rv = self._next_rv()
            pod = copy.deepcopy(pod)
            pod["metadata"]["resourceVersion"] = str(rv)
            self._watch.events.append(_Event(rv, "DELETED", pod))
            self._lock.notify_all()

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
            while True:
                name = f"{replicaset}-" + "".join(self._rand.choice(_SUFFIX_CHARS)
                                                  for _ in range(5))
                if (self.namespace, name) not in self._objects["pods"]:
                    break
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

    def _take_fault(self, verb: str, resource: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(verb, resource):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        m_core, m_apps = _CORE.match(parts.path), _APPS.match(parts.path)
        m = m_core or m_apps
        if handler.command != "GET" or m is None:
            self._send(handler, 404, _status(404, "NotFound", f"the server could not find "
                                             f"the requested resource ({parts.path})"))
            return
        group = "" if m_core else "apps"
        namespace, name = m.group("ns"), m.group("name")
        resource = m.group("res") + ("/scale" if m_apps and m.group("sub") else "")
        watch = query.get("watch", "").lower() in ("true", "1")
        verb = "get" if name else ("watch" if watch else "list")

        recorded = False

        def record(status: int) -> None:
            nonlocal recorded
            if recorded:
                return
            recorded = True
            with self._lock:
                self.requests.append(Request(verb, group, resource, namespace, name, query, status))

        if not self._allowed(verb, group, resource):
            record(403)
            sub = f"{resource}" if "/" not in resource else resource
            msg = (f'{sub.split("/")[0]}{(" " + repr(name)) if name else ""} is forbidden: User '
                   f'"system:serviceaccount:{namespace}:{self.service_account}" cannot {verb} '
                   f'resource "{sub}" in API group "{group}" in the namespace "{namespace}"')
            self._send(handler, 403, _status(403, "Forbidden", msg,
                                             kind=resource.split("/")[0], name=name or ""))
            return
        fault = self._take_fault(verb, resource)
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
                record(fault.status)
                code = fault.status
                self._send(handler, code, _status(code, _REASONS.get(code, "Unknown"),
                                                  f"injected fault {code}"))
                return
        if verb == "watch":
            record(200)
            self._serve_watch(handler, namespace, query)
            return
        if verb == "list":
            record(200)
            self._send(handler, 200, self._list(namespace, query.get("labelSelector", "")))
            return
        base = resource.split("/")[0]
        with self._lock:
            obj = self._objects[base].get((namespace, name or ""))
            obj = copy.deepcopy(obj) if obj is not None else None
        if obj is None:
            record(404)
            self._send(handler, 404, _status(404, "NotFound", f'{base} "{name}" not found',
                                             name=name, kind=base))
            return
        record(200)
        if resource == "statefulsets/scale":
            obj = self._scale(obj)
        self._send(handler, 200, obj)

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

    def _matching_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        reqs = parse_selector(selector)
        return [copy.deepcopy(p) for (ns, _), p in sorted(self._objects["pods"].items())
                if ns == namespace
                and selector_matches(reqs, p["metadata"].get("labels") or {})]

    def _list(self, namespace: str, selector: str) -> dict[str, Any]:
        with self._lock:
            items = self._matching_pods(namespace, selector)
            for item in items:  # list items carry no kind/apiVersion, like the real API
                item.pop("kind", None)
                item.pop("apiVersion", None)
            return {"kind": "PodList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _send(self, handler: BaseHTTPRequestHandler, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            handler.close_connection = True

    def _watch_events(self, namespace: str, query: Mapping[str, str],
                      client_gone: Callable[[], bool] = lambda: False
                      ) -> Iterator[dict[str, Any]]:
        """Events for one watch request, blocking for new ones until its timeout."""
        reqs = parse_selector(query.get("labelSelector", ""))
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        interval = self.bookmark_interval if bookmarks else None
        deadline = time.monotonic() + float(query.get("timeoutSeconds", "1800"))
        rv_text = query.get("resourceVersion", "")
        with self._lock:
            generation = self._watch.generation
            too_old = rv_text not in ("", "0") and int(rv_text) < self._compacted
            if rv_text in ("", "0"):  # "from now": synthetic ADDED events for the current state
                start = self._rv
                initial = self._matching_pods(namespace, query.get("labelSelector", ""))
            else:
                start, initial = int(rv_text), []
        if too_old:
            yield self._gone(rv_text)
            return
        for pod in initial:
            yield {"type": "ADDED", "object": pod}
        last_bookmark = time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= deadline or client_gone():
                return
            bookmark_due = interval is not None and now - last_bookmark >= interval
            with self._lock:
                expired = self._watch.generation != generation
                pending = [e for e in self._watch.events if e.rv > start]
                current = self._rv
                if not expired and not pending and not bookmark_due:
                    wait = min(deadline - now, 0.1)  # look for a closed client now and then
                    if interval is not None:
                        wait = min(wait, max(0.001, last_bookmark + interval - now))
                    self._lock.wait(wait)
                    continue
            if expired:
                yield self._gone(str(start))
                return
            if not pending:  # a bookmark is due and nothing happened in (start, current]
                start, last_bookmark = current, time.monotonic()
                yield self._bookmark(current)
                continue
            for event in pending:
                start = event.rv
                if event.type == "BOOKMARK":
                    if bookmarks:
                        last_bookmark = time.monotonic()
                        yield self._bookmark(event.rv)
                    continue
                meta = event.obj["metadata"]
                if meta["namespace"] == namespace and selector_matches(
                        reqs, meta.get("labels") or {}):
                    yield {"type": event.type, "object": event.obj}

    @staticmethod
    def _bookmark(rv: int) -> dict[str, Any]:
        return {"type": "BOOKMARK",
                "object": {"kind": "Pod", "apiVersion": "v1",
                           "metadata": {"resourceVersion": str(rv)}}}

    @staticmethod
    def _gone(rv: str) -> dict[str, Any]:
        return {"type": "ERROR", "object": _status(
            410, "Expired", f"too old resource version: {rv}")}

    def _serve_watch(self, handler: BaseHTTPRequestHandler, namespace: str,
                     query: Mapping[str, str]) -> None:
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            handler.wfile.flush()
            with self._lock:
                self._watch.open += 1
            try:
                for event in self._watch_events(namespace, query,
                                                lambda: _client_gone(handler)):
                    data = json.dumps(event).encode() + b"\n"
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            finally:
                with self._lock:
                    self._watch.open -= 1
        except OSError:
            handler.close_connection = True


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
