"""The lease-protocol simulator (tests/fleetsim) in the test suite: the seeds that found each
defect, replayed (each failed on the code before its fix), and the fast profile.

Each seed runs in a process of its own with ``PYTHONHASHSEED=0``, exactly as
``python -m tests.fleetsim --seed N`` replays it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

REGRESSIONS = [
    # (seed, extra arguments, what it found)
    (21, (), "stale eventually consistent reads of a crashed member's session restarted its expiry timer"),
    (32, (), "a second process under a running member's id: both kept running, overwriting the session row"),
    (14, (), "a corrupt plan head was never replaced: it stayed unreadable to the end"),
    (57, (), "a corrupt plan head was never replaced (with a duplicate id)"),
]


def replay(seed: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-m", "tests.fleetsim", "--seed", str(seed), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("seed", "args", "found"), REGRESSIONS, ids=[f"seed{s}" for s, _, _ in REGRESSIONS])
def test_a_seed_that_found_a_defect_passes(seed: int, args: tuple[str, ...], found: str) -> None:
    result = replay(seed, *args)
    assert result.returncode == 0, f"seed {seed} ({found}) fails again:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
