"""What an autoscaler does with a Worker fleet's lag: the arithmetic ``docs/autoscaling.md`` quotes.

The recipes in ``examples/k8s/`` (a KEDA ``ScaledObject`` and a plain ``autoscaling/v2``
HPA) scale on ``max(kinesis_worker_max_lag_seconds)`` over the fleet with a ``Value`` target:
the HPA controller (which KEDA drives) computes ``ceil(replicas x lag / target)``, leaves the
count alone while that ratio is within its tolerance (10%), and keeps the result between the
minimum and the maximum. The maximum is the shard count: a pod beyond it holds no lease and
only idles. The minimum is 1: a fleet scaled to zero exports no lag, so nothing would scale it
up again.
"""

from __future__ import annotations

import math


def desired_replicas(current: int, max_lag_seconds: float, *, target_lag_seconds: float, shards: int,
                     min_replicas: int = 1, tolerance: float = 0.1) -> int:
    """The replica count an HPA with a ``Value`` target of ``target_lag_seconds`` on the fleet's
    maximum lag sets, given ``current`` replicas, capped at ``shards``."""
    if current < 1 or shards < 1 or min_replicas < 1:
        raise ValueError(f"current ({current}), shards ({shards}) and min_replicas ({min_replicas}) must be >= 1")
    if not target_lag_seconds > 0 or not math.isfinite(target_lag_seconds):
        raise ValueError(f"target_lag_seconds must be a number > 0, got {target_lag_seconds!r}")
    if max_lag_seconds < 0 or math.isnan(max_lag_seconds):
        raise ValueError(f"max_lag_seconds must be >= 0, got {max_lag_seconds!r}")
    ratio = max_lag_seconds / target_lag_seconds
    wanted = current if abs(ratio - 1.0) <= tolerance else math.ceil(current * ratio)
    return max(min_replicas, min(shards, wanted))
