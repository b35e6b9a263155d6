"""The placement simulator: load balance and key movement of every strategy.

For K keys (one consumer, Kinesis-style shard ids) and a fleet of N pods, each
strategy places every key, then follows the membership changes of a scenario
(:func:`hashring.sim.fleet.timeline`), and the simulator counts:

* **load**: keys per member after the scenario (peak, minimum, average,
  peak/average, max - min) and the worst max - min of any state on the way;
* **moved**: keys whose primary owner changed, summed over every change
  (``moves per key`` = moved / K);
* **optimum**: the least any strategy could move in the scenario:

  - ``steady``: 0.
  - ``scale-out`` (N -> N+1): ``floor(K / (N+1))``: a balanced placement gives
    the newcomer at least that many keys, and every one of them moved.
  - ``scale-in`` (N -> N-1) and ``crash`` (one member vanishes): the keys the
    leaver held (in the strategy's own placement): they must move.
  - ``rolling-deploy`` of a Deployment (maxSurge=1, maxUnavailable=0, N new
    pods replace N old ones): K, i.e. 1.0 per key (every key ends on a new
    pod). For a StatefulSet (the ``jump`` strategy; pods restart in place
    under the same name): 0, since the names do not change.

  ``balanced_optimum`` is the least a strategy that keeps the fleet balanced
  (max - min <= 1) after every change can move: ``floor(K/(N+1))`` for a join,
  ``floor(K/N)`` for a leave; for a Deployment rolling deploy
  ``max(K, 2 N floor(K/(N+1)))`` (each of the N joins hands the newcomer its
  share, each of the N leavers gives its share away, and a leaver's keys can
  only partly go to new pods without unbalancing them); for a StatefulSet
  rolling restart ``2 N floor(K/N)`` (each restarting pod's keys go away
  while it is not Ready and come back).

Strategies (:data:`hashring.sim.placers.SIM_STRATEGIES`): ``range`` (Knock),
``rendezvous``, ``jump`` (on StatefulSet names ``worker-<i>``), ``ketama``
(baseline ring, ``vnodes`` points per member), ``balanced``
(:func:`hashring.plan_assignment` with the current owners carried over
between steps) and ``stable`` (:func:`hashring.stable_assignment`, from the
member list and the keys alone). Every other strategy runs on Deployment pod names.

``hashring simulate`` (:mod:`hashring.cli`) prints these results as tables or
JSON; ``benchmarks/bench_placement.py`` runs the full grid.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hashring.errors import ConfigurationError
from hashring.ketama import DEFAULT_VNODES, check_vnodes
from hashring.sim.fleet import (
    SCENARIOS,
    SimulationSizeError,
    Timeline,
    UnknownScenarioError,
    check_member_count,
    check_scenario,
    timeline,
)
from hashring.sim.placers import SIM_STRATEGIES, Placer, SimKeys, make_placer

__all__ = [
    "DEFAULT_KEYS",
    "DEFAULT_MEMBERS",
    "SCENARIOS",
    "SIM_STRATEGIES",
    "Check",
    "GridReport",
    "ScenarioResult",
    "SimulationSizeError",
    "UnknownScenarioError",
    "run_grid",
    "run_timeline",
    "simulate",
]

DEFAULT_KEYS = (64, 400, 2000)
DEFAULT_MEMBERS = (10, 20, 50)
DEFAULT_CONSUMER = "orders"
PLANNER_MOVE_TOLERANCE = 1.05
"""The balanced planner may move at most this multiple of the optimum on a join or leave."""


@dataclass(frozen=True)
class ScenarioResult:
    """What one strategy did in one scenario for K keys and N starting members."""

    scenario: str
    strategy: str
    workload: str
    keys: int
    members: int
    final_members: int
    steps: int
    peak: int
    minimum: int
    average: float
    worst_spread: int
    moved: int
    optimum: int
    balanced_optimum: int
    note: str

    @property
    def spread(self) -> int:
        """Largest minus smallest load after the scenario (max - min)."""
        return self.peak - self.minimum

    @property
    def peak_to_average(self) -> float:
        """Peak load over the average load after the scenario."""
        return self.peak / self.average

    @property
    def moved_fraction(self) -> float:
        """Moves over K (for a rolling deploy: moves per key)."""
        return self.moved / self.keys

    @property
    def optimum_fraction(self) -> float:
        """The optimum over K."""
        return self.optimum / self.keys

    @property
    def balanced_optimum_fraction(self) -> float:
        """The balanced optimum over K."""
        return self.balanced_optimum / self.keys

    @property
    def moved_over_optimum(self) -> float | None:
        """Moves over the optimum; None when the optimum is 0."""
        return self.moved / self.optimum if self.optimum else None

    @property
    def moved_over_balanced_optimum(self) -> float | None:
        """Moves over the balanced optimum; None when it is 0."""
        return self.moved / self.balanced_optimum if self.balanced_optimum else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields, derived ratios included."""
        out = asdict(self)
        out.update(
            spread=self.spread,
            peak_to_average=round(self.peak_to_average, 4),
            moved_fraction=round(self.moved_fraction, 4),
            optimum_fraction=round(self.optimum_fraction, 4),
            balanced_optimum_fraction=round(self.balanced_optimum_fraction, 4),
            moved_over_optimum=_round(self.moved_over_optimum),
            moved_over_balanced_optimum=_round(self.moved_over_balanced_optimum),
        )
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


@dataclass(frozen=True)
class Check:
    """A pass/fail statement about the results (e.g. the issue's planner bounds)."""

    name: str
    passed: bool
    detail: str


def _loads(owners: Sequence[str], members: Sequence[str]) -> list[int]:
    counts = Counter(owners)
    return [counts.get(m, 0) for m in members]


def _optimum(tl: Timeline, k: int, start_owners: Sequence[str]) -> tuple[int, int]:
    """(optimum, balanced optimum) of the timeline; see the module docstring."""
    n = len(tl.states[0])
    if tl.scenario == "steady":
        return 0, 0
    if tl.scenario == "scale-out":
        return k // (n + 1), k // (n + 1)
    if tl.scenario in ("scale-in", "crash"):
        (leaver,) = set(tl.states[0]) - set(tl.states[1])
        return sum(1 for o in start_owners if o == leaver), k // n
    if tl.workload == "statefulset":
        return 0, 2 * n * (k // n)
    return k, max(k, 2 * n * (k // (n + 1)))


def run_timeline(
    placer: Placer, keys: SimKeys, tl: Timeline, start_owners: Sequence[str] | None = None
) -> tuple[ScenarioResult, list[list[str]]]:
    """Follow ``tl`` with ``placer``; returns the result and the owners of every state."""
    owners = [list(start_owners) if start_owners is not None else placer.place(tl.states[0], None)]
    for state in tl.states[1:]:
        owners.append(placer.place(state, owners[-1]))
    moved = sum(
        sum(1 for a, b in zip(prev, cur, strict=True) if a != b)
        for prev, cur in itertools.pairwise(owners)
    )
    worst = max(
        max(loads) - min(loads)
        for loads in (_loads(o, s) for o, s in zip(owners, tl.states, strict=True))
    )
    final = _loads(owners[-1], tl.states[-1])
    optimum, balanced = _optimum(tl, len(keys), owners[0])
    result = ScenarioResult(
        scenario=tl.scenario,
        strategy=placer.name,
        workload=tl.workload,
        keys=len(keys),
        members=len(tl.states[0]),
        final_members=len(tl.states[-1]),
        steps=tl.steps,
        peak=max(final),
        minimum=min(final),
        average=len(keys) / len(final),
        worst_spread=worst,
        moved=moved,
        optimum=optimum,
        balanced_optimum=balanced,
        note=tl.note,
    )
    return result, owners


def _check_sizes(what: str, values: Sequence[int]) -> tuple[int, ...]:
    if isinstance(values, int | str) or not values:
        raise SimulationSizeError(f"{what} must be a non-empty list of counts, got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SimulationSizeError(f"every {what} count must be an int >= 1, got {v!r}")
    return tuple(values)


def _check_names(what: str, values: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str) or not values:
        raise ConfigurationError(f"{what} must be a non-empty list of names, got {values!r}")
    return tuple(values)


def simulate(
    strategy: str,
    scenario: str,
    keys: int,
    members: int,
    *,
    seed: int = 0,
    vnodes: int = DEFAULT_VNODES,
    consumer: str = DEFAULT_CONSUMER,
) -> ScenarioResult:
    """Run one strategy through one scenario for ``keys`` keys and ``members`` pods."""
    report = run_grid([keys], [members], [scenario], [strategy], seed=seed, vnodes=vnodes,
                      consumer=consumer)
    return report.results[0]


@dataclass(frozen=True)
class GridReport:
    """Results of every (K, N, strategy, scenario) combination of a run."""

    params: dict[str, Any]
    results: tuple[ScenarioResult, ...]
    elapsed_s: float = field(default=0.0, compare=False)

    def select(self, scenario: str | None = None, strategy: str | None = None
               ) -> list[ScenarioResult]:
        """The results of one scenario and/or strategy, in run order."""
        return [r for r in self.results
                if (scenario is None or r.scenario == scenario)
                and (strategy is None or r.strategy == strategy)]

    def checks(self) -> list[Check]:
        """The issue's bounds on the balanced planner (and the stable one's balance)."""
        out = self._planner_checks()
        stable = self.select(strategy="stable")
        if stable:
            worst = max(stable, key=lambda r: r.worst_spread)
            out.append(Check(
                "stable: max - min <= 1 in every state",
                worst.worst_spread <= 1,
                f"worst max - min {worst.worst_spread} ({worst.scenario}, K={worst.keys}, "
                f"N={worst.members}) over {len(stable)} runs",
            ))
        return out

    def _planner_checks(self) -> list[Check]:
        planner = self.select(strategy="balanced")
        if not planner:
            return []
        worst = max(planner, key=lambda r: r.worst_spread)
        out = [Check(
            "balanced: max - min <= 1 in every state",
            worst.worst_spread <= 1,
            f"worst max - min {worst.worst_spread} ({worst.scenario}, K={worst.keys}, "
            f"N={worst.members}) over {len(planner)} runs",
        )]
        changes = [r for r in planner if r.scenario in ("scale-out", "scale-in", "crash")]
        if changes:
            def excess(r: ScenarioResult) -> float:
                return r.moved - PLANNER_MOVE_TOLERANCE * r.optimum

            bad = max(changes, key=excess)
            ratios = [r.moved_over_optimum for r in changes if r.moved_over_optimum is not None]
            out.append(Check(
                f"balanced: moved <= {PLANNER_MOVE_TOLERANCE} x optimum on one join or leave",
                excess(bad) <= 0,
                f"moved/optimum {min(ratios, default=0):.3f}..{max(ratios, default=0):.3f} "
                f"over {len(changes)} runs; worst: {bad.scenario} K={bad.keys} N={bad.members} "
                f"moved {bad.moved} vs optimum {bad.optimum}",
            ))
        return out

    def summary(self) -> dict[str, dict[str, list[float]]]:
        """Per strategy: [min, max] over the grid of the headline figures."""
        metrics: dict[str, tuple[tuple[str, ...], str]] = {
            "steady_spread": (("steady",), "spread"),
            "steady_peak_to_average": (("steady",), "peak_to_average"),
            "join_moved_fraction": (("scale-out",), "moved_fraction"),
            "join_moved_over_optimum": (("scale-out",), "moved_over_optimum"),
            "leave_moved_over_optimum": (("scale-in", "crash"), "moved_over_optimum"),
            "rolling_moves_per_key": (("rolling-deploy",), "moved_fraction"),
            "rolling_worst_spread": (("rolling-deploy",), "worst_spread"),
        }
        out: dict[str, dict[str, list[float]]] = {}
        for strategy in self.params["strategies"]:
            row: dict[str, list[float]] = {}
            for name, (scenarios, attr) in metrics.items():
                values = [getattr(r, attr) for r in self.results
                          if r.strategy == strategy and r.scenario in scenarios]
                values = [v for v in values if v is not None]
                if values:
                    row[name] = [round(min(values), 4), round(max(values), 4)]
            out[strategy] = row
        return out

    def to_dict(self) -> dict[str, Any]:
        """The whole report as JSON-ready data."""
        return {
            "params": self.params,
            "elapsed_s": round(self.elapsed_s, 3),
            "results": [r.to_dict() for r in self.results],
            "summary": self.summary(),
            "checks": [asdict(c) for c in self.checks()],
        }


def run_grid(
    keys: Sequence[int] = DEFAULT_KEYS,
    members: Sequence[int] = DEFAULT_MEMBERS,
    scenarios: Sequence[str] = SCENARIOS,
    strategies: Sequence[str] = SIM_STRATEGIES,
    *,
    seed: int = 0,
    vnodes: int = DEFAULT_VNODES,
    consumer: str = DEFAULT_CONSUMER,
) -> GridReport:
    """Every scenario for every strategy, K in ``keys`` and N in ``members``.

    Raises :class:`UnknownScenarioError`, :class:`hashring.UnknownStrategyError`
    or :class:`SimulationSizeError` (all ``ConfigurationError``) on bad input.
    """
    k_list = _check_sizes("keys", keys)
    n_list = _check_sizes("members", members)
    scen = tuple(check_scenario(s) for s in _check_names("scenarios", scenarios))
    strat = _check_names("strategies", strategies)
    check_vnodes(vnodes)
    for n in n_list:
        for s in scen:
            check_member_count(s, n)
    probe = SimKeys.kinesis(consumer, 1)
    for name in strat:
        make_placer(name, probe, vnodes=vnodes)  # unknown names fail before any work
    started = time.perf_counter()
    results: list[ScenarioResult] = []
    for k in k_list:
        keyset = SimKeys.kinesis(consumer, k)
        for n in n_list:
            for name in strat:
                placer = make_placer(name, keyset, vnodes=vnodes)
                start: list[str] | None = None
                for s in scen:
                    tl = timeline(s, placer.workload, n, seed)
                    result, owners = run_timeline(placer, keyset, tl, start)
                    start = owners[0]
                    results.append(result)
    params = {
        "keys": list(k_list),
        "members": list(n_list),
        "scenarios": list(scen),
        "strategies": list(strat),
        "seed": seed,
        "vnodes": vnodes,
        "consumer": consumer,
    }
    return GridReport(params, tuple(results), time.perf_counter() - started)
