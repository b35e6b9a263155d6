"""Group mode: wait, on the driver, until a stopped query has handed its leases on.

``query.stop()`` returns before the hand-off is written: PySpark stops the source's
driver-side Python process with SIGTERM and does not wait for it, and that process hands the
leases on in the background (:mod:`spark_integration.sigterm`). Outside a container it
finishes even if the driver exits; in a container everything dies with the main process, so a
driver that exits on SIGTERM (pod deletion) should stop its queries and call
:func:`wait_for_handover` first::

    query.stop()
    wait_for_handover(options, timeout=20)   # the same options the query was given
    spark.stop()
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from kinesis.lease_loop.table.leases import LeaseTable
from spark_integration.clients import client
from spark_integration.errors import InvalidOptionError
from spark_integration.options import parse_options

#: How often the lease table is read while waiting.
POLL_INTERVAL_S = 0.2


def held_leases(options: Mapping[str, str]) -> list[str]:
    """The lease keys this application (``memberId``) holds now in its group's table."""
    opts = parse_options(options, streaming=True)
    group = opts.group
    if group is None:
        raise InvalidOptionError(
            "wait_for_handover needs the group-mode options of the query (leaseTable, "
            "applicationName, memberId, ...): option 'leaseTable' is not set", "leaseTable")
    table = LeaseTable(client("dynamodb", opts), group.lease_table)
    prefix = f"{group.application_name}/"
    return sorted(key for key, lease in table.scan().leases.items()
                  if key.startswith(prefix) and lease.owner == group.member_id)


def wait_for_handover(options: Mapping[str, str], timeout: float = 30.0) -> list[str]:
    """Wait until this application holds no lease of its group, at most ``timeout`` seconds.

    ``options`` are the source options of the stopped query. Returns the lease keys still
    held when the time is up (empty: every lease was handed on or released); those expire
    after ``leaseDuration``.
    """
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    deadline = time.monotonic() + timeout
    while True:
        held = held_leases(options)
        remaining = deadline - time.monotonic()
        if not held or remaining <= 0:
            return held
        time.sleep(min(POLL_INTERVAL_S, remaining))
