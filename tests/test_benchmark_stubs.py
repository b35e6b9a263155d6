"""Benchmarks that stub part of the SDK run against today's code (a stub that falls behind a
signature fails every round, and the benchmark measures nothing): each one's measuring
function, at a small size. The benchmarks themselves run in ``make bench``."""

from __future__ import annotations

import pytest

from benchmarks import bench_round_cpu


@pytest.mark.parametrize("reads", ["scan", "scoped"])
def test_the_round_cpu_benchmark_measures_rounds_that_succeed(reads: str) -> None:
    result = bench_round_cpu.rounds(reads, 600, 40, 6)  # raises if a round failed
    assert result["keys"] == 600 and result["median_round_s"] >= 0
