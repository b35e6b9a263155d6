"""``Handoffs``: the graceful hand-offs of one member, from request to write.

Each round walks the held leases in key order (:meth:`Handoffs.run`): the decisions say
where each belongs and whether a hand-off may start now; starting one asks the listener
(``on_handoff_requested``) to stop processing. Until its completion is done the lease keeps
being renewed (past ``handoff_timeout`` too, which only logs); then one conditional write
passes the lease, with its checkpoint, to the planned owner, or releases it
(:meth:`Handoffs.complete`, also called between rounds as soon as a listener is done). If
by then the plan gives the key back to this member, the listener is told
``on_lease_acquired`` again instead.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import replace

from kinesis.lease_loop import decisions
from kinesis.lease_loop.decisions import Snapshot
from kinesis.lease_loop.holder import Handoff, Held, LeaseHolder
from kinesis.lease_loop.lease_listener import GuardedListener, completion_done
from kinesis.lease_loop.write_pool import WritePool, raise_first

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


class Handoffs:
    """Hand-off bookkeeping over ``holder`` (see the module docs); ``wake`` interrupts the
    coordinator's wait between rounds when a completion may be done."""

    def __init__(self, holder: LeaseHolder, listener: GuardedListener, pool: WritePool, member_id: str,
                 wake: threading.Event, absent: Callable[[str], None]):
        self._holder = holder
        self._listener = listener
        self._pool = pool
        self._me = member_id
        self._wake = wake
        self._absent = absent  # a target found without a session row (no hand-off to it for a while)

    def run(self, snap: Snapshot, fresh: AbstractSet[str]) -> None:
        """Start, retarget and finish the hand-offs of this round's plan; ``fresh`` keys (taken
        this round under an older plan) are judged on the next round."""
        held = self._holder.items()
        snap = replace(snap, held=frozenset(k for k, _ in held), offers=self._holder.offers(held))
        budget = decisions.handoff_budget(snap)
        ready: list[tuple[str, Held, str | None]] = []
        for key, h in held:
            if h.gone or key in fresh:
                continue
            target = decisions.handoff_target(snap, key)
            if h.handoff is None:
                start = decisions.start_handoff(snap, budget, target)
                if start is None:
                    continue
                if target is not None and not self._holder.table.has_session(target):
                    self._absent(target)  # not started yet, or never runs: ask no processor to stop
                    continue
                counted, budget = start
                self._request(h, target, counted, snap.now)
            handoff = h.handoff
            assert handoff is not None
            handoff.target = target
            handoff.failed = False
            if not completion_done(handoff.completion):
                if not handoff.warned and decisions.handoff_overdue(snap, handoff.requested_at):
                    handoff.warned = True
                    self._holder.count("handoff_timeouts")
                    log.warning(
                        "%s: listener has not finished hand-off of %s after %.1f s; still renewing",
                        self._me, key, snap.now - handoff.requested_at,
                    )
                continue
            ready.append((key, h, target))
            budget = budget.finished(handoff.counted)
        self.complete(ready)

    def _request(self, h: Held, target: str | None, counted: bool, now: float) -> None:
        completion = self._listener.request_handoff(h.lease) if h.started else None
        self._holder.begin_handoff(h, Handoff(completion, now, target, counted=counted))
        if isinstance(completion, concurrent.futures.Future):
            completion.add_done_callback(lambda _: self._wake.set())
        self._wake.set()  # the loop looks at pending completions often from now on
        self._holder.count("handoffs_requested")

    def complete(self, ready: list[tuple[str, Held, str | None]]) -> None:
        """Finish hand-offs whose listener is done: resume (the plan changed back), or write
        the hand-off / release of each, all at once."""
        writes: list[tuple[str, Held, str | None]] = []
        for key, h, target in ready:
            if target == self._me:  # the plan changed back: resume processing
                if self._resume(h):
                    continue
                target = None
            writes.append((key, h, target))
        done = self._pool.run([functools.partial(self._holder.hand_off, *w) for w in writes])
        for (key, h, target), gone in zip(writes, done, strict=True):
            if gone is True:
                self._holder.forget(key, h)
            elif gone is None and target is not None:  # the target's session row went: keep it
                log.info("%s: %s has no session row any more: keeping %s", self._me, target, key)
                self._absent(target)
                if not self._resume(h):
                    self._holder.drop(key, h)
        raise_first(done)

    def _resume(self, h: Held) -> bool:
        """Call a hand-off off and process the lease again; False if the listener refused."""
        self._holder.begin_handoff(h, None)
        self._holder.count("handoffs_resumed")
        return self._listener.call("on_lease_acquired", h.lease)
