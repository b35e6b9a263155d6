"""The liveness bounds the simulator holds the lease protocol to, per disturbance kind.

Every bound is the longest a ready key may stay unprocessed after a disturbance's effect
ends (a crash: the kill; a pause, a lag, a fault: when it ends), in seconds for the
scenario's timing (:class:`Timing`); :func:`table` gives them in lease durations for the
docs. Within a bound the fleet may still be moving keys; after the last bound has passed,
every ready key must be held by a running member and processed, with gaps no longer than
:attr:`Timing.gap` (a graceful hand-off in flight).

Scenarios whose members keep the member list themselves (``membership="session"``) are held
to the same bounds, with no allowance: a newcomer publishes itself at its first tick and the
others plan with it from their next session renewal, but no key waits on that (it is handed
to the newcomer gracefully once planned); a dead member's watcher removes it a lease duration
after its session stopped, but its keys are taken over by their backups within the takeover
bound either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.fleetsim.schedule import Event, Scenario


@dataclass(frozen=True)
class Timing:
    """The durations of a scenario's members (the lease loop's defaults for its lease duration)."""

    lease_duration: float
    replicas: int
    shard_sync_interval: float

    @property
    def tick(self) -> float:
        return self.lease_duration / 3

    @property
    def scan(self) -> float:
        return self.tick / 3

    @property
    def backup_check(self) -> float:
        return self.lease_duration / 2

    @property
    def orphan(self) -> float:
        return self.lease_duration + (self.replicas + 1) * self.lease_duration

    @property
    def adopt(self) -> float:
        return self.tick

    @property
    def manifest_poll(self) -> float:
        return self.shard_sync_interval / 2

    @property
    def gap(self) -> float:
        """A key moved gracefully is unprocessed for at most this long: an offer not adopted is
        withdrawn by the first round of its maker ``adopt_timeout`` after it (rounds every
        ``scan_interval``), and a processor starts at its next batch (every ``scan_interval``)."""
        return self.adopt + 2 * self.scan

    @property
    def takeover(self) -> float:
        """A dead holder's keys are processed elsewhere within this (watcher, or orphan)."""
        if self.replicas == 0:
            return self.orphan + self.backup_check + self.tick
        return self.lease_duration + self.backup_check + self.tick


def timing(scenario: Scenario) -> Timing:
    return Timing(scenario.lease_duration, scenario.replicas, shard_sync_interval(scenario))


def shard_sync_interval(scenario: Scenario) -> float:
    return 4 * scenario.lease_duration


def bound(kind: str, t: Timing) -> float:
    """Seconds after ``kind``'s effect ends within which every ready key is processed."""
    if kind in ("sigterm", "join"):
        return t.gap + t.tick
    if kind in ("lag", "chore_split"):
        return t.adopt + t.tick + t.gap
    if kind in ("crash", "unlist", "restart", "pause", "throttle", "ambiguous", "deny", "corrupt", "legacy",
                "duplicate"):
        return t.takeover + t.gap
    if kind == "phantom":  # keys planned for it, offers to it, and (worker) a chore it was ranked for
        return t.orphan + t.backup_check + t.tick + t.gap + t.manifest_poll
    if kind == "reshard":  # the chore owner sees the split at its next listing (unless the parent ends on it)
        return t.shard_sync_interval + t.manifest_poll + t.takeover + t.gap
    if kind == "wall_step":
        return t.manifest_poll + t.takeover + t.gap
    raise ValueError(kind)


def effect_end(event: Event) -> float:
    """When ``event``'s effect ends (the moment its bound counts from)."""
    if event.kind in ("pause",):
        return event.at + float(event.arg("seconds", 0.0))
    if event.kind in ("lag", "throttle", "ambiguous", "chore_split"):
        return event.at + float(event.arg("for", 0.0)) + (float(event.arg("seconds", 0.0)) if event.kind == "lag" else 0.0)
    if event.kind == "join":
        return event.at + float(event.arg("listed_after", 0.0))
    return event.at


def settled_at(scenario: Scenario) -> float:
    """From this moment on every ready key must stay processed (gaps up to ``Timing.gap``)."""
    t = timing(scenario)
    start = 3 * t.lease_duration  # the fleet's own start-up
    if scenario.phantoms:  # listed from the start, never running: their chores and keys move
        start = max(start, bound("phantom", t) + (t.manifest_poll if scenario.provider == "worker" else 0.0))
    return max([start, *(effect_end(e) + bound(e.kind, t) for e in scenario.events)])


def table(t: Timing) -> dict[str, float]:
    """Each kind's bound in lease durations (for the docs and the coverage report)."""
    kinds = ("sigterm", "join", "lag", "crash", "pause", "phantom", "throttle", "ambiguous", "deny", "corrupt",
             "legacy", "wall_step", "reshard", "duplicate", "chore_split")
    return {k: round(bound(k, t) / t.lease_duration, 2) for k in kinds}
