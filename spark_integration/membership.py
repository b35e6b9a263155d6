"""Group mode's member list: the ``hashring`` Membership the options name.

``membership=kubernetes`` builds :class:`hashring.KubernetesMembership` from the
``kubernetes*`` options and reads the member list once, when the query starts, so a
misconfiguration (no API configuration, wrong namespace or pod name, missing RBAC, an
unreachable API server) fails the query at start with the membership's own error
(:class:`hashring.errors.KubernetesConfigurationError`,
:class:`~hashring.errors.KubernetesPermissionError`,
:class:`~hashring.errors.OwnPodNotFoundError`, :class:`~hashring.errors.PodOwnerError` or
:class:`~hashring.errors.KubernetesAPIError`), with a note naming the Spark options to fix.
Once running, API errors no longer fail the query: the last good list is served for
``kubernetesMaxStaleness``; after that the lease loop logs the error on every tick, keeps
renewing (and reading) the shards it holds, and plans nothing new until the API answers.
"""

from __future__ import annotations

import logging

from hashring import Membership, StaticMembership
from hashring.errors import ConfigurationError, MembershipError
from hashring.membership.kubernetes import KubernetesMembership
from kinesis.lease_loop import LeaseTable
from spark_integration.options import GroupOptions

log = logging.getLogger(__name__)

_OPTIONS_HINT = (
    "kinesis source, group mode with membership=kubernetes: the member list could not be read "
    "when the query started. The options involved: memberId (this driver's pod name; default "
    "POD_NAME, then HOSTNAME), kubernetesNamespace (default POD_NAMESPACE, then the service "
    "account's namespace file), kubeconfig (outside a cluster), kubernetesMode, "
    "kubernetesLabelSelector; the RBAC it needs is in examples/k8s/rbac.yaml."
)


def open_kubernetes_membership(group: GroupOptions) -> KubernetesMembership:
    """A ``KubernetesMembership`` for this driver's pod, after one successful read.

    Raises the membership's error (with a note on the Spark options) if the list cannot be
    read; logs a warning if this pod is not among the members (not Ready, terminating, or
    ``memberId`` is not its name), since it then takes no shards.
    """
    k8s = group.kubernetes
    assert k8s is not None
    membership: KubernetesMembership | None = None
    try:
        membership = KubernetesMembership(
            k8s.mode,
            namespace=k8s.namespace,
            pod_name=group.member_id,
            label_selector=k8s.label_selector,
            kubeconfig=k8s.kubeconfig,
            ttl=k8s.refresh_interval_s,
            max_staleness=k8s.max_staleness_s,
        )
        members = membership.members()
    except BaseException as exc:
        if membership is not None:
            membership.close()
        if isinstance(exc, ConfigurationError | MembershipError):
            exc.add_note(_OPTIONS_HINT)
        raise
    if group.member_id not in members:
        log.warning(
            "%s: this pod is not among the members of %r (%s): it takes no shards until it is "
            "Ready and listed. Check that memberId is this pod's name and that the pod is "
            "Ready and not terminating.",
            group.member_id, membership, ", ".join(members) or "none",
        )
    else:
        log.info("%s: kubernetes members %s", group.member_id, ", ".join(members))
    return membership


def build_membership(group: GroupOptions, table: LeaseTable) -> Membership:
    """The membership of a ``static`` or ``dynamodb`` group (Kubernetes: see above)."""
    if group.membership == "kubernetes":
        return open_kubernetes_membership(group)
    if group.membership == "static":
        return StaticMembership(list(group.members), group.member_id)
    from kinesis.lease_loop import DynamoDBMembership

    return DynamoDBMembership(table, group.member_id, member_timeout=group.lease_duration_s)


def close_membership(membership: Membership) -> None:
    """Release what the membership holds (the Kubernetes API client)."""
    if isinstance(membership, KubernetesMembership):
        membership.close()
