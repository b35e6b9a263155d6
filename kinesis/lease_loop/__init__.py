"""The generic lease loop: fenced DynamoDB leases placed on a hash ring, peer to peer.

Nothing here knows about Kinesis records: keys are opaque strings and checkpoints ordered
values. ``kinesis.consumer`` builds the Kinesis consumer on top of it.
"""

from kinesis.lease_loop.coordinator import (
    CoordinatorStatus,
    LeaseCoordinator,
    LeaseListener,
    NullListener,
)
from kinesis.lease_loop.lease_model import Lease, LeaseState, TableSnapshot
from kinesis.lease_loop.leases import LeaseTable
from kinesis.lease_loop.membership import DynamoDBMembership
from kinesis.lease_loop.session_membership import SessionMembership

__all__ = [
    "CoordinatorStatus",
    "DynamoDBMembership",
    "Lease",
    "LeaseCoordinator",
    "LeaseListener",
    "LeaseState",
    "LeaseTable",
    "NullListener",
    "SessionMembership",
    "TableSnapshot",
]
