"""Group mode (``leaseTable``): several Spark applications share the shards through a lease table.

Parses ``leaseTable``, ``applicationName``, ``memberId``, ``membership`` (static, kubernetes or
dynamodb) with ``members`` / ``replicas`` / ``leaseDuration``, and the ``kubernetes*`` options
of ``membership=kubernetes``. An option of a mode that is not chosen is refused, naming the
option that chooses it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from spark_integration.option_values import duration_option, fail, int_option

MembershipKind = Literal["static", "kubernetes", "dynamodb"]
KUBERNETES_ONLY = ("kubernetesNamespace", "kubeconfig", "kubernetesMode",
                   "kubernetesLabelSelector", "kubernetesRefreshInterval",
                   "kubernetesMaxStaleness")
GROUP_ONLY = ("applicationName", "memberId", "membership", "members", "replicas",
              "leaseDuration", *KUBERNETES_ONLY)
"""Options that only mean something with ``leaseTable``."""
#: KubernetesMembership modes (hashring.membership.k8s_api.MODES), spelled as options.
KUBERNETES_MODES = ("deployment", "replicaset", "statefulset", "label_selector")

_TABLE_NAME = re.compile(r"^[a-zA-Z0-9_.-]{3,255}$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class KubernetesOptions:
    """``membership=kubernetes``: how to build ``hashring.KubernetesMembership``.

    ``None`` fields use its defaults (namespace: ``POD_NAMESPACE``, then the service
    account's namespace file; API client: in-cluster config, then ``~/.kube/config``).
    """

    namespace: str | None = None
    kubeconfig: str | None = None
    mode: str = "deployment"
    label_selector: str | None = None
    refresh_interval_s: float = 5.0
    max_staleness_s: float = 60.0


@dataclass(frozen=True)
class GroupOptions:
    """Group mode: several Spark applications share the shards through a DynamoDB lease table."""

    lease_table: str
    application_name: str
    member_id: str
    membership: MembershipKind
    members: tuple[str, ...] = ()
    replicas: int = 0
    lease_duration_s: float = 10.0
    kubernetes: KubernetesOptions | None = None


def group_options(opts: Mapping[str, str], *, streaming: bool) -> GroupOptions | None:
    table = opts.get("leasetable")
    if not table:
        present = [n for n in GROUP_ONLY if opts.get(n.lower())]
        if present:
            raise fail(present[0], "is a group-mode option: set 'leaseTable' too "
                       "(the DynamoDB table the applications share)")
        return None
    if not streaming:
        raise fail("leaseTable", "group mode is for streaming queries "
                   "(spark.readStream); a batch read takes every shard")
    if not _TABLE_NAME.match(table):
        raise fail("leaseTable", f"{table!r} is not a valid DynamoDB table name "
                   "(3-255 characters from a-z, A-Z, 0-9, '_', '.', '-')")
    app = opts.get("applicationname", "")
    if not app.strip():
        raise fail("applicationName", "is required in group mode: the consumer name every "
                   "application of the group shares (it is part of every lease key)")
    app = app.strip()
    if "/" in app or app.startswith("__") or any(c.isspace() for c in app):
        raise fail("applicationName", f"{app!r} may not contain '/' or whitespace nor start "
                   "with '__': it is the first part of every lease key "
                   "'<application>/<stream>/<shardId>'; pick a name like 'orders-app'")
    kind = (opts.get("membership") or "dynamodb").strip().lower()
    if kind not in ("static", "kubernetes", "dynamodb"):
        raise fail("membership", f"{kind!r} is not one of static, kubernetes, dynamodb")
    member = (opts.get("memberid") or "").strip() or _default_member_id(kind)
    if any(c.isspace() for c in member):
        raise fail("memberId", f"{member!r} may not contain whitespace: it names this application "
                   "in the lease table and in 'members'; use e.g. 'orders-driver-1'")
    members: tuple[str, ...] = ()
    if kind == "static":
        raw = opts.get("members") or ""
        members = tuple(sorted({m.strip() for m in raw.split(",") if m.strip()}))
        if not members:
            raise fail("members", "is required with membership=static: a comma-separated "
                       "list of every application's memberId")
        if member not in members:
            raise fail("memberId", f"{member!r} is not in 'members' ({', '.join(members)})")
    elif opts.get("members"):
        raise fail("members", "is only used with membership=static")
    kubernetes = None
    if kind == "kubernetes":
        kubernetes = _kubernetes(opts)
    else:
        present = [n for n in KUBERNETES_ONLY if opts.get(n.lower())]
        if present:
            raise fail(present[0], f"is only used with membership=kubernetes (membership is "
                       f"{kind!r})")
    replicas = int_option(opts, "replicas", 0, low=0, high=10)
    lease = duration_option(opts, "leaseDuration", 10.0, low=0.3)
    return GroupOptions(
        lease_table=table,
        application_name=app.strip(),
        member_id=member,
        membership=kind,  # type: ignore[arg-type]
        members=members,
        replicas=replicas or 0,
        lease_duration_s=lease,
        kubernetes=kubernetes,
    )


def _default_member_id(kind: str) -> str:
    """``memberId`` when unset: the host name; with Kubernetes, the pod name as
    ``KubernetesMembership`` finds it (``POD_NAME``, then ``HOSTNAME``)."""
    if kind == "kubernetes":
        for var in ("POD_NAME", "HOSTNAME"):
            value = os.environ.get(var, "").strip()
            if value:
                return value
    return socket.gethostname()


def _kubernetes(opts: Mapping[str, str]) -> KubernetesOptions:
    namespace = (opts.get("kubernetesnamespace") or "").strip() or None
    if namespace is not None and not _NAMESPACE.match(namespace):
        raise fail("kubernetesNamespace", f"{namespace!r} is not a Kubernetes namespace name "
                   "(lower-case letters, digits and '-', at most 63 characters)")
    kubeconfig = (opts.get("kubeconfig") or "").strip() or None
    if kubeconfig is not None:
        kubeconfig = os.path.expanduser(kubeconfig)
        if not os.path.isfile(kubeconfig):
            raise fail("kubeconfig", f"{kubeconfig!r} is not a file on the driver: give the "
                       "path of a kubeconfig file, or leave it unset inside a pod (the "
                       "in-cluster service account is used)")
    selector = (opts.get("kuberneteslabelselector") or "").strip() or None
    mode_text = (opts.get("kubernetesmode") or "").strip().lower()
    mode = mode_text or ("label_selector" if selector else "deployment")
    if mode not in KUBERNETES_MODES:
        raise fail("kubernetesMode", f"{mode_text!r} is not one of "
                   f"{', '.join(KUBERNETES_MODES)}")
    if mode == "label_selector" and selector is None:
        raise fail("kubernetesLabelSelector", "is required with kubernetesMode=label_selector: "
                   "a selector matching every driver pod of the group, e.g. 'app=orders-spark'")
    if mode != "label_selector" and selector is not None:
        raise fail("kubernetesLabelSelector", f"is only used with kubernetesMode=label_selector "
                   f"(kubernetesMode is {mode!r}): drop one of them")
    refresh = duration_option(opts, "kubernetesRefreshInterval", 5.0, low=0.001)
    stale = duration_option(opts, "kubernetesMaxStaleness", max(60.0, refresh), low=0.001)
    if stale < refresh:
        raise fail("kubernetesMaxStaleness", f"{stale:g} s is less than "
                   f"kubernetesRefreshInterval ({refresh:g} s): the member list is refreshed "
                   "once per interval, so it must be allowed to be at least that old")
    return KubernetesOptions(namespace=namespace, kubeconfig=kubeconfig, mode=mode,
                             label_selector=selector, refresh_interval_s=refresh,
                             max_staleness_s=stale)
