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


class InvalidKeyError(ConfigurationError):
    """A key (consumer name, shard id, or planner key) is not a usable string."""


class MembershipError(HashRingError):
    """The member list could not be obtained."""


class MembershipUnavailableError(MembershipError):
    """No member list newer than ``max_staleness`` could be obtained."""
