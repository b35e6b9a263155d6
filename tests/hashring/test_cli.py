"""The ``hashring`` command (typer) through typer's CliRunner: simulate and explain."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hashring import owners_of, plan_assignment, stable_assignment
from hashring.cli import app
from hashring.hashing import key_hash
from hashring.simulate import Check, GridReport

runner = CliRunner()


def flat(text: str) -> str:
    """Output with rich's box characters and line wrapping removed."""
    for ch in "│╭╮╰╯─":
        text = text.replace(ch, " ")
    return " ".join(text.split())


# --- simulate -----------------------------------------------------------------------------


def test_simulate_json() -> None:
    result = runner.invoke(app, ["simulate", "--keys", "30,64", "--members", "4,6", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["params"]["strategies"] == ["range", "rendezvous", "jump", "ketama", "balanced",
                                            "stable"]
    assert len(data["results"]) == 2 * 2 * 6 * 5
    assert data["checks"] and all(c["passed"] for c in data["checks"])
    planner = [r for r in data["results"] if r["strategy"] == "balanced"]
    assert max(r["worst_spread"] for r in planner) <= 1


def test_simulate_tables_for_chosen_scenarios_and_strategies() -> None:
    result = runner.invoke(app, ["simulate", "-k", "64", "-n", "10", "--scenario",
                                 "steady,rolling-deploy", "--strategy", "range,balanced"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "steady: keys per member" in out and "rolling-deploy: moves per key" in out
    assert "scale-out" not in out.split("summary")[0]
    assert "PASS balanced: max - min <= 1" in flat(out)
    assert "rendezvous" not in out


@pytest.mark.parametrize(
    ("args", "option", "words"),
    [
        (["--scenario", "meltdown"], "--scenario", "meltdown"),
        (["--strategy", "maglev"], "--strategy", "maglev"),
        (["--keys", "ten"], "--keys", "not a whole number"),
        (["--members", "0"], "--members", ">= 1"),
        (["--members", "1", "--scenario", "crash"], "--members", "at least 2 members"),
        (["--vnodes", "0"], "--vnodes", ">= 1"),
    ],
)
def test_simulate_rejects_bad_arguments(args: list[str], option: str, words: str) -> None:
    result = runner.invoke(app, ["simulate", "-k", "20", *args])
    assert result.exit_code == 2
    assert option in flat(result.output) and words in flat(result.output)


@pytest.mark.parametrize("as_json", [False, True])
def test_simulate_exits_1_when_a_check_fails(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    failing = [Check("balanced: max - min <= 1 in every state", False, "worst max - min 3")]
    monkeypatch.setattr(GridReport, "checks", lambda self: failing)
    args = ["simulate", "-k", "20", "-n", "3", "--strategy", "balanced"]
    result = runner.invoke(app, [*args, "--json"] if as_json else args)
    assert result.exit_code == 1
    if as_json:
        assert json.loads(result.stdout)["checks"][0]["passed"] is False
    else:
        assert "FAIL balanced: max - min <= 1" in flat(result.output)


def test_simulate_writes_a_png(tmp_path: Path) -> None:
    target = tmp_path / "placement.png"
    result = runner.invoke(app, ["simulate", "-k", "40", "-n", "4,5", "--plot", str(target),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(result.stdout)["params"]["members"] == [4, 5]


def test_simulate_plot_without_matplotlib_says_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    simulated: list[object] = []
    monkeypatch.setattr("hashring.cli.run_grid", lambda *a, **kw: simulated.append(a))
    target = tmp_path / "x.png"
    result = runner.invoke(app, ["simulate", "-k", "20", "-n", "3", "--plot", str(target)])
    assert result.exit_code == 2
    assert "kinesis-hashring[plot]" in flat(result.output) and "--plot" in result.output
    assert simulated == [], "refused before the simulation runs"
    assert not target.exists()


def test_simulate_plot_into_a_missing_directory_fails_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulated: list[object] = []
    monkeypatch.setattr("hashring.cli.run_grid", lambda *a, **kw: simulated.append(a))
    result = runner.invoke(app, ["simulate", "--plot", str(tmp_path / "nope" / "x.png")])
    assert result.exit_code == 2 and simulated == []
    assert "does not exist" in flat(result.output)


@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_help_shows_boolean_options_as_flags(command: str) -> None:
    from hashring.cli import app as cli_app

    result = runner.invoke(cli_app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "BOOLEAN" not in result.output
    assert re.search(r"^  --json +Print JSON", result.output, re.M), result.output
    if command == "simulate":
        assert re.search(r"^  --summary-only +Print only", result.output, re.M)


def test_flags_take_no_value() -> None:
    result = runner.invoke(app, ["explain", "-m", "a,b", "-c", "orders", "--shards", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["members"] == ["a", "b"]


# --- explain ------------------------------------------------------------------------------


def explain_json(*args: str) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("strategy", ["range", "rendezvous"])
def test_explain_owners_match_the_library(strategy: str) -> None:
    data = explain_json("--members", "c,a,b", "--consumer", "orders", "--shards", "16",
                        "--strategy", strategy, "--replicas", "1")
    assert data["members"] == ["a", "b", "c"]
    assert [k["shard"] for k in data["keys"]] == [f"shardId-{i:012d}" for i in range(16)]
    for k in data["keys"]:
        owners = owners_of("orders", k["shard"], ["a", "b", "c"], strategy=strategy, replicas=1)
        assert [k["primary"], *k["backups"]] == owners
        assert k["key_hash"] == key_hash("orders", k["shard"])
    counts = data["counts"]
    assert sum(c["primary"] for c in counts.values()) == 16
    assert sum(c["backup"] for c in counts.values()) == 16


def test_explain_range_names_the_keyspace_range() -> None:
    data = explain_json("-m", "a,b,c,d", "-c", "orders", "--strategy", "range")
    assert len(data["keys"]) == 16  # the default shard count
    for k in data["keys"]:
        d = k["detail"]
        assert d["range_start"] <= k["key_hash"] < d["range_end"]
        assert ["a", "b", "c", "d"][d["range_index"]] == k["primary"]
        assert d["range_end"] - d["range_start"] in (2**62, 2**62 + 1)


def test_explain_rendezvous_shows_the_winning_scores() -> None:
    data = explain_json("-m", "p,q,r,s,t", "-c", "orders", "--shard-ids", "s1, s2")
    assert [k["shard"] for k in data["keys"]] == ["s1", "s2"]
    for k in data["keys"]:
        scores = [s for _, s in k["detail"]["scores"]]
        assert scores == sorted(scores, reverse=True)
        assert k["detail"]["scores"][0][0] == k["primary"]


def test_explain_jump_reports_fall_through_for_a_missing_ordinal() -> None:
    data = explain_json("-m", "w-0,w-1,w-3", "-c", "orders", "--shards", "40",
                        "--strategy", "jump")
    missing = [k for k in data["keys"] if k["detail"]["bucket"] == 2]
    assert missing and all(k["detail"]["fell_through"] for k in missing)
    assert all(k["primary"] == f"w-{k['detail']['bucket']}"
               for k in data["keys"] if k["detail"]["bucket"] != 2)
    assert {k["detail"]["buckets"] for k in data["keys"]} == {4}


def test_explain_balanced_follows_the_planner() -> None:
    data = explain_json("-m", "a,b,c", "-c", "orders", "--shards", "10",
                        "--strategy", "balanced")
    plan = plan_assignment(["a", "b", "c"], [f"orders/shardId-{i:012d}" for i in range(10)])
    assert {k["hashed_key"]: k["primary"] for k in data["keys"]} == {
        key: owners[0] for key, owners in plan.owners.items()
    }
    primaries = [c["primary"] for c in data["counts"].values()]
    assert max(primaries) - min(primaries) <= 1 and data["quotas"] == dict(plan.quotas)


def test_explain_stable_follows_stable_assignment() -> None:
    data = explain_json("-m", "a,b,c,d", "-c", "orders", "--shards", "11",
                        "--strategy", "stable", "--replicas", "1")
    plan = stable_assignment(["a", "b", "c", "d"],
                             [f"orders/shardId-{i:012d}" for i in range(11)], replicas=1)
    assert {k["hashed_key"]: [k["primary"], *k["backups"]] for k in data["keys"]} == {
        key: list(owners) for key, owners in plan.owners.items()
    }
    assert data["quotas"] == dict(plan.quotas)
    for k in data["keys"]:
        assert k["detail"]["walked"] == (k["primary"] != k["detail"]["landed"])
        assert ("walked on" in k["reason"]) == k["detail"]["walked"]


def test_explain_table_output() -> None:
    result = runner.invoke(app, ["explain", "-m", "pod-a,pod-b", "-c", "orders",
                                 "--shards", "3", "--replicas", "1"])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "shardId-000000000002" in out and "per member" in out
    assert "highest scores" in out and "pod-a" in out and "pod-b" in out


@pytest.mark.parametrize(
    ("args", "option", "words"),
    [
        (["-m", "a,b", "--strategy", "jump"], "--members", "name-<ordinal>"),
        (["-m", "a,b", "--replicas", "2"], "--replicas", "at least 3 members"),
        (["-m", "a,a"], "--members", "duplicate"),
        (["-m", ","], "--members", "empty"),
        (["-m", "a,b", "--strategy", "ketama"], "--strategy", "choose one of"),
        (["-m", "a,b", "--shards", "2", "--shard-ids", "x"], "--shard-ids", "not both"),
        (["-m", "a,b", "--shards", "0"], "--shards", ">= 1"),
        (["-m", "a,b", "--shard-ids", "x,x"], "--shard-ids", "duplicate"),
    ],
)
def test_explain_rejects_bad_arguments(args: list[str], option: str, words: str) -> None:
    result = runner.invoke(app, ["explain", "-c", "orders", *args])
    assert result.exit_code == 2
    assert option in flat(result.output) and words in flat(result.output)


def test_explain_requires_members_and_consumer() -> None:
    result = runner.invoke(app, ["explain", "--members", "a"])
    assert result.exit_code == 2 and "--consumer" in flat(result.output)


# --- balance --------------------------------------------------------------------------------


def skewed_loads(tmp_path: Path) -> tuple[Path, list[str]]:
    keys = [f"orders/shardId-{i:012d}" for i in range(16)]
    path = tmp_path / "loads.json"
    path.write_text(json.dumps({k: 8.0 if i < 4 else 1.0 for i, k in enumerate(keys)}))
    return path, keys


def test_balance_shows_the_count_plan_against_the_load_plan(tmp_path: Path) -> None:
    loads, _ = skewed_loads(tmp_path)
    result = runner.invoke(app, ["balance", "--members", "a,b,c,d", "--loads", str(loads), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["busiest_before"] > 1.5 and data["busiest_after"] <= 1.1
    assert data["moves"] >= 1 and data["hot_keys"] == []
    assert [r["member"] for r in data["members_after"]] == ["a", "b", "c", "d"]
    moved = [e for e in data["heaviest_keys"] if e["owner"] != e["was"]]
    assert moved and all(e["why"] == "moved to repair a member out of tolerance" for e in moved)
    text = flat(runner.invoke(app, ["balance", "--members", "a,b,c,d", "--loads", str(loads)]).output)
    assert "load over fair share" in text and "the 16 heaviest keys" in text


def test_balance_names_a_hot_key_and_reads_current_owners_and_weights(tmp_path: Path) -> None:
    loads, keys = skewed_loads(tmp_path)
    loads.write_text(json.dumps({k: 1.0 for k in keys} | {keys[3]: 40.0}))
    current = tmp_path / "owners.json"
    current.write_text(json.dumps({k: "a" for k in keys}))
    result = runner.invoke(app, ["balance", "-m", "a,b,c", "--loads", str(loads), "--current", str(current),
                                 "--weights", "a=1,b=1,c=2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["hot_keys"] == [keys[3]]
    hot = next(e for e in data["heaviest_keys"] if e["key"] == keys[3])
    assert hot["why"] == "hotter than a fair share: a member to itself" and hot["owner"] == "c"


@pytest.mark.parametrize("args, message", [
    (["--loads", "missing.json"], "cannot read"),
    (["--loads", "list.json"], "must hold a JSON object of key -> load"),
    (["--loads", "bad.json"], "is not JSON"),
    (["--loads", "equal.json"], "every key weighs the same"),
    (["--loads", "neg.json"], "must be a finite number >= 0"),
    (["--loads", "equal.json", "--weights", "a=x"], "is not member=weight"),
])
def test_balance_refuses_bad_input_by_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "equal.json").write_text(json.dumps({"k1": 2.0, "k2": 2.0}))
    (tmp_path / "neg.json").write_text(json.dumps({"k1": -2.0, "k2": 2.0}))
    result = runner.invoke(app, ["balance", "--members", "a,b", *args])
    assert result.exit_code == 2
    assert message in flat(result.output)
