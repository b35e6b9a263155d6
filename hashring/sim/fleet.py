"""Pod names and the membership changes of each simulated scenario.

Two kinds of fleet, as Kubernetes runs them:

* ``deployment`` pods are named ``<app>-<pod-template-hash>-<5 random chars>``
  (the characters come from Kubernetes' "safe" alphabet). A rolling update
  creates a new ReplicaSet, hence a new template hash and new pod names.
* ``statefulset`` pods are named ``<app>-<ordinal>``; a rolling update
  restarts each pod in place under the same name (highest ordinal first), and
  scaling adds or removes the highest ordinal.

Everything is drawn from a :class:`random.Random` seeded with
``(seed, N, purpose)``, so a run is reproducible and every strategy is
compared on exactly the same pods and the same events.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hashring.errors import ConfigurationError

K8S_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of Kubernetes' generated name suffixes (no vowels, no 0/1/3)."""
DEFAULT_APP = "worker"
WORKLOADS = ("deployment", "statefulset")
SCENARIOS = ("steady", "scale-out", "scale-in", "crash", "rolling-deploy")


class UnknownScenarioError(ConfigurationError):
    """The scenario name is not one of :data:`SCENARIOS`."""


class SimulationSizeError(ConfigurationError):
    """A key or member count is not usable for the requested scenario."""


class DeploymentNames:
    """Generates unique Deployment-style pod names."""

    def __init__(self, app: str, rng: random.Random):
        self.app = app
        self._rng = rng
        self._used: set[str] = set()

    def _draw(self, length: int) -> str:
        return "".join(self._rng.choice(K8S_SAFE_ALPHABET) for _ in range(length))

    def template_hash(self) -> str:
        """A new pod-template-hash (one per ReplicaSet)."""
        while True:
            h = self._draw(10)
            if h not in self._used:
                self._used.add(h)
                return h

    def pod(self, template_hash: str) -> str:
        """A new pod name of the ReplicaSet with ``template_hash``."""
        while True:
            name = f"{self.app}-{template_hash}-{self._draw(5)}"
            if name not in self._used:
                self._used.add(name)
                return name


@dataclass(frozen=True)
class Timeline:
    """The member lists a scenario goes through; ``states[0]`` is the start."""

    scenario: str
    workload: str
    states: tuple[tuple[str, ...], ...]
    note: str

    @property
    def steps(self) -> int:
        """Number of membership changes."""
        return len(self.states) - 1


def check_scenario(scenario: str) -> str:
    """Return ``scenario`` or raise :class:`UnknownScenarioError` naming the choices."""
    if scenario not in SCENARIOS:
        raise UnknownScenarioError(
            f"unknown scenario {scenario!r}: choose one of {', '.join(SCENARIOS)}"
        )
    return scenario


def check_member_count(scenario: str, n: int) -> int:
    """Validate the starting fleet size for ``scenario``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SimulationSizeError(f"the member count must be an int >= 1, got {n!r}")
    if scenario in ("scale-in", "crash") and n < 2:
        raise SimulationSizeError(
            f"scenario {scenario!r} removes a member and needs at least 2 members, got {n}"
        )
    return n


def timeline(
    scenario: str, workload: str, n: int, seed: int = 0, app: str = DEFAULT_APP
) -> Timeline:
    """The membership changes of ``scenario`` for a fleet of ``n`` pods.

    * ``steady``: no change (the start state only).
    * ``scale-out``: N -> N+1 (a new pod of the same ReplicaSet; the StatefulSet
      adds ordinal N).
    * ``scale-in``: N -> N-1 (the ReplicaSet controller removes the youngest pod;
      the StatefulSet removes the highest ordinal).
    * ``crash``: one pod, drawn at random, vanishes (any ordinal for a StatefulSet).
    * ``rolling-deploy``: Deployment with maxSurge=1, maxUnavailable=0: N times,
      one pod of the new ReplicaSet joins, then one old pod (in random order)
      leaves, until all N are replaced (2N changes). A StatefulSet keeps its pod
      names: each pod, highest ordinal first, leaves (not Ready while it
      restarts) and rejoins under the same name (also 2N changes).
    """
    check_scenario(scenario)
    check_member_count(scenario, n)
    if workload not in WORKLOADS:
        raise ConfigurationError(
            f"unknown workload {workload!r}: choose one of {', '.join(WORKLOADS)}"
        )
    if workload == "statefulset":
        return _statefulset_timeline(scenario, n, seed, app)
    return _deployment_timeline(scenario, n, seed, app)


def _deployment_timeline(scenario: str, n: int, seed: int, app: str) -> Timeline:
    names = DeploymentNames(app, random.Random(f"{seed}:{n}:names"))
    rs = names.template_hash()
    pods = [names.pod(rs) for _ in range(n)]  # creation order
    start = tuple(pods)
    if scenario == "steady":
        return Timeline(scenario, "deployment", (start,), "no change")
    if scenario == "scale-out":
        return Timeline(scenario, "deployment", (start, (*pods, names.pod(rs))),
                        "one pod of the same ReplicaSet joins")
    if scenario == "scale-in":
        return Timeline(scenario, "deployment", (start, tuple(pods[:-1])),
                        "the youngest pod leaves")
    if scenario == "crash":
        gone = random.Random(f"{seed}:{n}:crash").randrange(n)
        return Timeline(scenario, "deployment",
                        (start, tuple(p for i, p in enumerate(pods) if i != gone)),
                        f"pod #{gone} (random) vanishes")
    new_rs = names.template_hash()
    order = pods[:]
    random.Random(f"{seed}:{n}:deploy").shuffle(order)
    states = [start]
    current = pods[:]
    for old in order:
        current.append(names.pod(new_rs))
        states.append(tuple(current))
        current.remove(old)
        states.append(tuple(current))
    return Timeline(scenario, "deployment", tuple(states),
                    "maxSurge=1/maxUnavailable=0: a new pod joins, then an old one leaves")


def _statefulset_timeline(scenario: str, n: int, seed: int, app: str) -> Timeline:
    pods = [f"{app}-{i}" for i in range(n)]
    start = tuple(pods)
    if scenario == "steady":
        return Timeline(scenario, "statefulset", (start,), "no change")
    if scenario == "scale-out":
        return Timeline(scenario, "statefulset", (start, (*pods, f"{app}-{n}")),
                        f"ordinal {n} joins")
    if scenario == "scale-in":
        return Timeline(scenario, "statefulset", (start, tuple(pods[:-1])),
                        f"ordinal {n - 1} leaves")
    if scenario == "crash":
        gone = random.Random(f"{seed}:{n}:crash").randrange(n)
        return Timeline(scenario, "statefulset",
                        (start, tuple(p for i, p in enumerate(pods) if i != gone)),
                        f"ordinal {gone} (random) vanishes")
    states = [start]
    for i in reversed(range(n)):
        states.append(tuple(p for p in pods if p != f"{app}-{i}"))
        states.append(start)
    return Timeline(scenario, "statefulset", tuple(states),
                    "pods restart in place (same names): each leaves, then rejoins")
