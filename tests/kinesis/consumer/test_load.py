"""What a shard costs (``kinesis.consumer.shard.load``) and the process's CPU utilisation
(``kinesis.consumer.worker.cpu``), on fake clocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis.consumer.shard.load import LoadSample, ShardLoad
from kinesis.consumer.worker.cpu import CpuUtilisation, cpu_limit


class Clocks:
    def __init__(self) -> None:
        self.wall, self.cpu = 100.0, 5.0


def test_rates_are_per_wall_second_and_the_first_pass_only_starts_the_clock() -> None:
    c = Clocks()
    load = ShardLoad(window=60.0, clock=lambda: c.wall, cpu_clock=lambda: c.cpu)
    load.start()
    assert load.sample() is None
    for _ in range(30):  # a record batch every second: 100 records, 100 kB, 0.2 s CPU, 0.5 s processing
        c.wall += 1.0
        c.cpu += 0.2
        load.observe(100, 100_000, 0.5)
    sample = load.sample()
    assert sample is not None
    assert sample.records_per_s == pytest.approx(100.0)
    assert sample.bytes_per_s == pytest.approx(100_000.0)
    assert sample.cpu == pytest.approx(0.2)
    assert sample.processor_busy == pytest.approx(0.5)
    assert sample.weight("cpu") == sample.cpu and sample.weight("records") == sample.records_per_s
    with pytest.raises(ValueError, match="load metric must be one of"):
        sample.weight("watts")


def test_a_shard_that_goes_quiet_fades_over_about_a_window() -> None:
    c = Clocks()
    load = ShardLoad(window=60.0, clock=lambda: c.wall, cpu_clock=lambda: c.cpu)
    load.start()
    for _ in range(120):
        c.wall += 1.0
        load.observe(50, 0, 0.0)
    for _ in range(60):  # quiet for a window: the rate falls by about e (time-weighted)
        c.wall += 1.0
        load.observe(0, 0, 0.0)
    sample = load.sample()
    assert sample is not None and 10.0 < sample.records_per_s < 25.0


def test_no_time_no_change_and_a_bad_window_is_refused() -> None:
    c = Clocks()
    load = ShardLoad(clock=lambda: c.wall, cpu_clock=lambda: c.cpu)
    load.observe(5, 5, 0.0)  # without start(): starts the clock
    load.observe(5, 5, 0.0)  # no time passed: ignored
    assert load.sample() is None
    with pytest.raises(ValueError, match="window must be > 0"):
        ShardLoad(window=0)
    assert LoadSample(1.0, 2.0, 3.0, 0.5, 10.0).weight("bytes") == 2.0


def test_cpu_utilisation_is_over_the_limit_and_waits_a_second(tmp_path: Path) -> None:
    c = Clocks()
    cpu = CpuUtilisation(2.0, clock=lambda: c.wall, cpu_clock=lambda: c.cpu)
    c.wall, c.cpu = c.wall + 0.5, c.cpu + 0.5
    assert cpu.read() is None  # under a second: nothing to say yet
    c.wall, c.cpu = c.wall + 1.5, c.cpu + 1.5
    assert cpu.read() == pytest.approx(0.5)  # 2 CPU seconds in 2 s over 2 CPUs
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_limit(tmp_path) == 0.5
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_limit(tmp_path) >= 1.0  # no limit: the CPUs it may run on


@pytest.mark.parametrize("settings, message", [
    ({"balance": "cpu"}, "balance must be 'count' or 'load'"),
    ({"balance": "load", "load_metric": "watts"}, "load_metric must be one of"),
    ({"balance": "load", "load_tolerance": 0}, "load_tolerance must be a number between 0 and 1"),
    ({"balance": "load", "load_balance_interval": -1}, "load_balance_interval"),
    ({"balance": "load", "reads": "scan"}, "balance='load' needs scoped reads"),
])
def test_worker_config_refuses_bad_balance_settings(settings: dict[str, object], message: str) -> None:
    from kinesis import StreamConfig, WorkerConfig
    from kinesis.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        WorkerConfig(table_name="leases", streams=[StreamConfig("orders", "app")], **settings)  # type: ignore[arg-type]
