"""The generic lease loop: fenced DynamoDB leases placed on a hash ring, peer to peer.

Keys are opaque strings and checkpoints ordered values (:mod:`.checkpoints` is shaped like
KCL's: sequence numbers and the ``TRIM_HORIZON`` / ``LATEST`` / ``SHARD_END`` sentinels);
:mod:`kinesis.consumer` builds the Kinesis consumer on top of it. The map:

* :mod:`.coordinator`: :class:`LeaseCoordinator`; a round is read -> snapshot -> decisions ->
  writes, on its own thread (its loop and lifecycle are here too);
* :mod:`.round_reads`: what a round reads (a full scan, or scoped reads) and the plan it makes
  (:mod:`.plan`: the published plan that keeps scoped plans sticky);
* :mod:`.decisions`: the take and hand-off rules, pure functions of a round's snapshot;
  :mod:`.observations`: what a member saw of the table from round to round;
* :mod:`.writes`: a round's takes, adoptions and hand-offs; :mod:`.holder`: the leases one
  member holds, its session renewals and checkpoints (the state threads share);
* :mod:`.table`: every row and call on the DynamoDB table, the fenced writes
  (:class:`~.table.leases.LeaseTable`);
* :mod:`.membership`: member lists kept in the table (heartbeat rows, or a published list);
* :mod:`.settings`, :mod:`.timing`: a coordinator's arguments (and the keys it plans) and
  every duration, checked once; :mod:`.lease_listener`: what a coordinator tells its user,
  and its status.
"""

from kinesis.lease_loop.checkpoints import SHARD_END, Checkpoint
from kinesis.lease_loop.coordinator import (
    Completion,
    CoordinatorStatus,
    LeaseCoordinator,
    LeaseListener,
    NullListener,
)
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease, LeaseState, TableSnapshot

__all__ = [
    "SHARD_END",
    "Checkpoint",
    "Completion",
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

from kinesis.deprecation import alias_modules

MOVED_MODULES = {
    "kinesis.lease_loop.acquisitions": "kinesis.lease_loop.writes",
    "kinesis.lease_loop.clock": "kinesis.lease_loop.timing",
    "kinesis.lease_loop.coordinator_settings": "kinesis.lease_loop.settings",
    "kinesis.lease_loop.handoffs": "kinesis.lease_loop.writes",
    "kinesis.lease_loop.lease_model": "kinesis.lease_loop.table.model",
    "kinesis.lease_loop.lease_timing": "kinesis.lease_loop.timing",
    "kinesis.lease_loop.leases": "kinesis.lease_loop.table.leases",
    "kinesis.lease_loop.lifecycle": "kinesis.lease_loop.coordinator",
    "kinesis.lease_loop.manifest_store": "kinesis.lease_loop.table.manifests",
    "kinesis.lease_loop.member_list": "kinesis.lease_loop.membership",
    "kinesis.lease_loop.member_rows": "kinesis.lease_loop.table.sessions",
    "kinesis.lease_loop.planner": "kinesis.lease_loop.round_reads",
    "kinesis.lease_loop.published_plan": "kinesis.lease_loop.plan",
    "kinesis.lease_loop.resource_keys": "kinesis.lease_loop.settings",
    "kinesis.lease_loop.round_loop": "kinesis.lease_loop.coordinator",
    "kinesis.lease_loop.round_record": "kinesis.lease_loop.lease_listener",
    "kinesis.lease_loop.scoped_reads": "kinesis.lease_loop.round_reads",
    "kinesis.lease_loop.session_membership": "kinesis.lease_loop.membership",
    "kinesis.lease_loop.session_rows": "kinesis.lease_loop.table.sessions",
    "kinesis.lease_loop.table_calls": "kinesis.lease_loop.table.calls",
    "kinesis.lease_loop.table_reads": "kinesis.lease_loop.table.reads",
    "kinesis.lease_loop.table_setup": "kinesis.lease_loop.table.leases",
    "kinesis.lease_loop.write_pool": "kinesis.lease_loop.holder",
    "kinesis.lease_loop.write_rules": "kinesis.lease_loop.table.rules",
}
"""Modules of 0.2 and the module each moved or merged into (importable for one release)."""

alias_modules(MOVED_MODULES)
