"""Peer-to-peer placement of stream-consumer leases.

Every member hashes (consumer name, shard id) with :func:`key_hash` and places
the key on the sorted list of live members; only the owner tries to acquire the
lease. See README.md for the full picture.
"""

from hashring.balance import Assignment, plan_assignment
from hashring.errors import (
    ConfigurationError,
    HashRingError,
    InvalidKeyError,
    InvalidLoadsError,
    InvalidMembersError,
    InvalidReplicasError,
    InvalidWeightsError,
    MembershipError,
    MembershipUnavailableError,
    UnknownStrategyError,
)
from hashring.hashing import key_hash, member_hash, string_key_hash
from hashring.loads import LoadReport, balance_loads, load_report
from hashring.membership import KubernetesMembership, Membership, StaticMembership
from hashring.placement import STRATEGIES, chore_owners, owners_of
from hashring.ring import HashRing, Role
from hashring.stable import stable_assignment, watched_by_successors

__version__ = "0.1.0"

__all__ = [
    "STRATEGIES",
    "Assignment",
    "ConfigurationError",
    "HashRing",
    "HashRingError",
    "InvalidKeyError",
    "InvalidLoadsError",
    "InvalidMembersError",
    "InvalidReplicasError",
    "InvalidWeightsError",
    "KubernetesMembership",
    "LoadReport",
    "Membership",
    "MembershipError",
    "MembershipUnavailableError",
    "Role",
    "StaticMembership",
    "UnknownStrategyError",
    "balance_loads",
    "chore_owners",
    "key_hash",
    "load_report",
    "member_hash",
    "owners_of",
    "plan_assignment",
    "stable_assignment",
    "string_key_hash",
    "watched_by_successors",
]
