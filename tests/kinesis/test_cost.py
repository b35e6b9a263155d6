"""``hashring cost``: the coordination bill from the lease loop's cost model (kinesis.cost), the
same model ``benchmarks/bench_lease_cost.py`` checks against moto and docs/fleet-scale.md quotes."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

import pytest
from typer.testing import CliRunner

from kinesis import WorkerConfig
from kinesis.cli import app
from kinesis.consumer.worker.config import StreamConfig
from kinesis.cost import LEASE_DURATION, SHARD_SYNC_INTERVAL, Prices, Sizes, bill, default_worker
from tests.support.paths import ROOT

runner = CliRunner()
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "lease_cost.json").read_text())
MODELLED = {"default Worker": "default_worker", "Worker, Kubernetes membership": "scoped_worker",
            "scan loop (reads='scan')": "current", "KCL 3.x (as documented)": "kcl3"}


def cost(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["cost", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_model_uses_the_item_sizes_the_benchmark_measured_and_the_workers_defaults() -> None:
    assert asdict(Sizes()) == RESULTS["item_sizes"]
    config = WorkerConfig("leases", [StreamConfig("orders", "app")])
    assert (config.lease_duration, config.shard_sync_interval) == (LEASE_DURATION, SHARD_SYNC_INTERVAL)


@pytest.mark.parametrize("row", RESULTS["modelled"], ids=lambda r: f"{r['leases']}x{r['members']}")
def test_the_command_prints_the_figures_of_docs_fleet_scale(row: dict[str, Any]) -> None:
    # the fleet-scale table in docs/fleet-scale.md comes from this results file
    designs = cost("--shards", str(row["leases"]), "--members", str(row["members"]))["designs"]
    for name, modelled in MODELLED.items():
        fleet = row[modelled]["fleet"]
        assert (round(designs[name]["rcu_per_s"], 2), round(designs[name]["wcu_per_s"], 2)) == \
            (fleet["rcu"], fleet["wcu"]), name
        requests = (fleet["read_requests"] + fleet["write_requests"]) / row["members"] * 60
        assert designs[name]["requests_per_member_per_minute"] == pytest.approx(requests, rel=0.01), name


def test_the_bill_is_units_times_prices() -> None:
    fleet = default_worker(1000, 50)
    prices = Prices(read_per_million=0.25, write_per_million=1.25)
    b = bill(fleet, 1000, 50, prices)
    per_hour = (fleet.rcu * 3600 * 0.25 + fleet.wcu * 3600 * 1.25) / 1e6
    assert b.usd_per_month == pytest.approx(per_hour * 730)
    assert b.usd_per_shard_hour * 1000 == pytest.approx(per_hour) == b.usd_per_member_hour * 50
    assert b.write_units_per_shard_hour == pytest.approx(fleet.wcu * 3600 / 1000)
    printed = cost("--shards", "1000", "--members", "50", "--read-price", "0.25", "--write-price", "1.25")
    assert printed["designs"]["default Worker"]["usd_per_month"] == pytest.approx(b.usd_per_month, rel=1e-6)
    assert {f.name for f in fields(b)} == set(printed["designs"]["default Worker"])


def test_the_default_worker_costs_less_than_kcl3_at_every_size_in_the_docs() -> None:
    for row in RESULTS["modelled"]:
        designs = cost("--shards", str(row["leases"]), "--members", str(row["members"]))["designs"]
        assert designs["default Worker"]["usd_per_month"] < designs["KCL 3.x (as documented)"]["usd_per_month"]


@pytest.mark.parametrize(("args", "message"), [
    (["--shards", "0", "--members", "3"], "Invalid value for --shards: must be a whole number > 0, got 0"),
    (["--shards", "10", "--members", "-1"], "Invalid value for --members: must be a whole number > 0"),
    (["--shards", "10", "--members", "3", "--lease-duration", "inf"], "Invalid value for --lease-duration"),
    (["--shards", "10", "--members", "3", "--read-price", "-1"], "Invalid value for --read-price: must be a price >= 0"),
])
def test_bad_arguments_name_the_option(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["cost", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()), result.output


def test_the_table_and_the_other_commands() -> None:
    table = runner.invoke(app, ["cost", "--shards", "16", "--members", "4"])
    assert table.exit_code == 0 and "KCL 3.x (as documented)" in table.output and "$ / month" in table.output
    more = runner.invoke(app, ["cost", "--shards", "4", "--members", "6"])
    assert "2 of the 6 members hold no lease" in more.output
    explained = runner.invoke(app, ["explain", "--members", "a,b", "--consumer", "orders", "--shards", "4", "--json"])
    assert explained.exit_code == 0 and json.loads(explained.stdout)["consumer"] == "orders"
