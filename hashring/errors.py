"""Exceptions raised by :mod:`hashring`.

Every configuration error is also a :class:`ValueError`, so callers that only
know the standard library can still catch it; each message says what was wrong
and how to fix it.
"""

from __future__ import annotations


class HashRingError(Exception):
    """Base class of every error this package raises."""


class ConfigurationError(HashRingError, ValueError):
    """Invalid arguments: raised when an object is built, never mid-flight."""


class InvalidMembersError(ConfigurationError):
    """The member list is empty, has duplicates or names a member wrongly."""


class InvalidReplicasError(ConfigurationError):
    """``replicas`` is not a non-negative integer smaller than the member count."""


class UnknownStrategyError(ConfigurationError):
    """The placement strategy name is not one of the known names."""


class InvalidWeightsError(ConfigurationError):
    """A weight is missing, not a number, or not strictly positive."""


class InvalidLoadsError(ConfigurationError):
    """A key's load is not a finite number >= 0, or the load tolerance is not in (0, 1)."""


class InvalidKeyError(ConfigurationError):
    """A key (consumer name, shard id, or planner key) is not a usable string."""


class MembershipError(HashRingError):
    """The member list could not be obtained."""


class MembershipUnavailableError(MembershipError):
    """No member list newer than ``max_staleness`` could be obtained."""


# --- Kubernetes membership (hashring.membership.kubernetes) -------------------------------


class KubernetesNotInstalledError(ConfigurationError):
    """``KubernetesMembership`` was built without the ``kubernetes`` package installed."""


class KubernetesConfigurationError(ConfigurationError):
    """Bad ``KubernetesMembership`` arguments, or no pod name, namespace or API config found."""


class KubernetesPermissionError(MembershipError):
    """The API refused a call (401/403); the message names the missing RBAC verb and resource."""

    def __init__(self, message: str, *, status: int, verb: str, resource: str):
        super().__init__(message)
        self.status = status
        self.verb = verb
        self.resource = resource


class OwnPodNotFoundError(MembershipError):
    """This process's own pod does not exist: the pod name (POD_NAME/HOSTNAME) is wrong."""


class PodOwnerError(MembershipError):
    """The pod is not controlled by what the mode needs (e.g. no Deployment for ``deployment``)."""


class KubernetesAPIError(MembershipError):
    """Another API failure (unreachable, timeouts after retries, 5xx, unexpected status)."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class StaleMembershipError(MembershipUnavailableError):
    """The last good member list is older than ``max_staleness`` and refreshing keeps failing."""

    def __init__(self, message: str, *, age: float, last_error: BaseException | None):
        super().__init__(message)
        self.age = age
        self.last_error = last_error
