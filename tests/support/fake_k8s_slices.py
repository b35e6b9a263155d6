"""The fake API server's EndpointSlice controller: Services' slices follow their pods.

Like kube-controller-manager's controller (simplified): one endpoint per
selected pod with an IP, at most ``max_per_slice`` endpoints per slice (100 by
default), a new pod goes into the first slice with room, an update rewrites only
the slice holding the pod, a Service selecting nothing keeps one empty slice.
Endpoint conditions follow the Kubernetes rules: ``serving`` = the pod is Ready,
``terminating`` = it has a deletionTimestamp, ``ready`` = serving and not
terminating, or always true with ``publishNotReadyAddresses``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

SERVICE_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER = "endpointslice-controller.k8s.io"


@dataclass
class _Service:
    namespace: str
    name: str
    uid: str
    selector: dict[str, str]
    publish_not_ready: bool
    max_per_slice: int
    slices: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> endpoints
    uids: dict[str, str] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)  # pod name -> slice name


def pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


class EndpointSliceController:
    """Keeps each Service's EndpointSlices in step with its pods (call under the fake's lock).

    ``put(obj, event)`` stores and announces a slice; ``remove(namespace, name)``
    deletes one; ``new_name(base)`` and ``new_uid()`` make names like the real ones.
    """

    def __init__(self, put: Callable[[dict[str, Any], str], None],
                 remove: Callable[[str, str], None], new_name: Callable[[str], str],
                 new_uid: Callable[[], str]):
        self._put = put
        self._remove = remove
        self._new_name = new_name
        self._new_uid = new_uid
        self.services: dict[tuple[str, str], _Service] = {}

    # -- services ---------------------------------------------------------------------------

    def add_service(self, namespace: str, name: str, uid: str, selector: Mapping[str, str],
                    publish_not_ready: bool, max_per_slice: int,
                    pods: list[dict[str, Any]]) -> None:
        svc = _Service(namespace, name, uid, dict(selector), publish_not_ready, max_per_slice)
        self.services[(namespace, name)] = svc
        for pod in pods:
            self.pod_changed(pod)
        if not svc.slices:  # a Service selecting nothing still gets one (empty) slice
            self._write(svc, self._new_slice(svc), [], "ADDED")

    def delete_service(self, namespace: str, name: str) -> None:
        svc = self.services.pop((namespace, name))
        for slice_name in list(svc.slices):
            self._remove(namespace, slice_name)

    def reslice(self, namespace: str, name: str, max_per_slice: int) -> list[str]:
        """Repack every endpoint into new slices of ``max_per_slice``: new ones are written
        first, the old ones deleted after, so a watcher sees each endpoint twice meanwhile."""
        svc = self.services[(namespace, name)]
        endpoints = [ep for eps in svc.slices.values() for ep in eps]
        old = list(svc.slices)
        svc.max_per_slice = max_per_slice
        created = []
        for i in range(0, max(len(endpoints), 1), max_per_slice):
            chunk = endpoints[i:i + max_per_slice]
            slice_name = self._new_slice(svc)
            self._write(svc, slice_name, chunk, "ADDED")
            created.append(slice_name)
            for ep in chunk:
                svc.where[ep["targetRef"]["name"]] = slice_name
        for slice_name in old:
            del svc.slices[slice_name]
            self._remove(namespace, slice_name)
        return created

    # -- pods -------------------------------------------------------------------------------

    def pod_changed(self, pod: Mapping[str, Any] | None, *, namespace: str = "",
                    name: str = "") -> None:
        """A pod was added, changed or (``pod=None``) deleted."""
        if pod is not None:
            meta = pod["metadata"]
            namespace, name = meta["namespace"], meta["name"]
        for svc in self.services.values():
            if svc.namespace != namespace:
                continue
            desired = self._endpoint(svc, pod) if pod is not None else None
            current = svc.where.get(name)
            if desired is None:
                if current is not None:
                    self._drop(svc, current, name)
            elif current is not None:
                eps = svc.slices[current]
                i = next(i for i, ep in enumerate(eps) if ep["targetRef"]["name"] == name)
                if eps[i] != desired:
                    self._write(svc, current, [*eps[:i], desired, *eps[i + 1:]], "MODIFIED")
            else:
                target = next((s for s, eps in svc.slices.items()
                               if len(eps) < svc.max_per_slice), None)
                if target is None:
                    target = self._new_slice(svc)
                    self._write(svc, target, [desired], "ADDED")
                else:
                    self._write(svc, target, [*svc.slices[target], desired], "MODIFIED")
                svc.where[name] = target

    def _drop(self, svc: _Service, slice_name: str, pod: str) -> None:
        del svc.where[pod]
        eps = [ep for ep in svc.slices[slice_name] if ep["targetRef"]["name"] != pod]
        if eps or len(svc.slices) == 1:
            self._write(svc, slice_name, eps, "MODIFIED")
        else:
            del svc.slices[slice_name]
            self._remove(svc.namespace, slice_name)

    def _endpoint(self, svc: _Service, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in svc.selector.items()):
            return None
        if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
            return None
        serving = pod_ready(pod)
        terminating = bool(meta.get("deletionTimestamp"))
        ready = svc.publish_not_ready or (serving and not terminating)
        endpoint: dict[str, Any] = {
            "addresses": [status["podIP"]],
            "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
            "targetRef": {"kind": "Pod", "name": meta["name"], "namespace": meta["namespace"],
                          "uid": meta["uid"]},
            "nodeName": spec.get("nodeName", "node-1"),
            "zone": "zone-a",
        }
        if spec.get("hostname"):
            endpoint["hostname"] = spec["hostname"]
        return endpoint

    def _new_slice(self, svc: _Service) -> str:
        name = self._new_name(f"{svc.name}-")
        svc.uids[name] = self._new_uid()
        svc.slices[name] = []
        return name

    def _write(self, svc: _Service, slice_name: str, endpoints: list[dict[str, Any]],
               event: str) -> None:
        svc.slices[slice_name] = endpoints
        obj = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": slice_name, "namespace": svc.namespace, "uid": svc.uids[slice_name],
                "generateName": f"{svc.name}-",
                "labels": {SERVICE_LABEL: svc.name, MANAGED_BY_LABEL: CONTROLLER},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": svc.name,
                                     "uid": svc.uid, "controller": True,
                                     "blockOwnerDeletion": True}],
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "addressType": "IPv4",
            # the API serializes an empty slice's endpoints as null
            "endpoints": list(endpoints) if endpoints else None,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }
        self._put(obj, event)
