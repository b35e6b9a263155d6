"""The chaos suite: a fleet of Worker processes under seeded faults (``tests/chaos/harness.py``),
checked by ``tests/chaos/invariants.py``.

The fast profile runs with the normal suite; ``make chaos`` runs the long one
(``CHAOS_PROFILE=long`` or ``--chaos-profile=long``) and writes its figures to
``benchmarks/results/chaos.json``. The seed is printed first; replay a run with
``--chaos-seed=N`` or ``CHAOS_SEED=N``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.chaos.harness import PROFILES, ChaosRun, summary, write_json

pytestmark = [pytest.mark.slow, pytest.mark.serial]
logging.getLogger("werkzeug").setLevel(logging.ERROR)
RESULTS = Path(__file__).resolve().parent.parent.parent / "benchmarks" / "results" / "chaos.json"


def test_chaos(chaos_profile: str, chaos_seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = PROFILES[chaos_profile]
    with capsys.disabled():
        print(f"\n[chaos] profile {profile.name}, seed {chaos_seed} "
              f"(replay with --chaos-seed={chaos_seed})", flush=True)

    def live(line: str) -> None:  # the long profile shows its progress; the fast one keeps it
        if profile.name == "long":  # for the failure report
            with capsys.disabled():
                print(line, flush=True)
        else:
            print(line)

    result = ChaosRun(profile, chaos_seed, tmp_path, log=live).run()
    text = summary(result)
    with capsys.disabled():
        print(text, flush=True)
    write_json(result, RESULTS if profile.name == "long" else tmp_path / "chaos.json")
    assert result.report.ok, (
        f"chaos seed {chaos_seed} ({profile.name}): {result.report.format()}\n{text}\n"
        f"ledgers and logs in {tmp_path}; replay with --chaos-seed={chaos_seed}"
    )


def test_chaos_keyed_parallel(chaos_seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same faults on members running a keyed-parallel async processor (32 records of a
    shard in flight, completing out of order, exact checkpoints): nothing lost, per-key order,
    never two holders at once, no duplicate after a hand-off or a shard end."""
    profile = PROFILES["keyed"]
    with capsys.disabled():
        print(f"\n[chaos] profile {profile.name}, seed {chaos_seed} (replay with --chaos-seed={chaos_seed})",
              flush=True)
    result = ChaosRun(profile, chaos_seed, tmp_path, log=print).run()
    text = summary(result)
    with capsys.disabled():
        print(text, flush=True)
    write_json(result, tmp_path / "chaos.json")
    assert result.report.ok, (
        f"chaos seed {chaos_seed} (keyed): {result.report.format()}\n{text}\n"
        f"ledgers and logs in {tmp_path}; replay with --chaos-seed={chaos_seed}"
    )
