"""The ``hashring`` command: ``hashring simulate`` and ``hashring explain``.

* ``hashring simulate [--keys 64,400,2000] [--members 10,20,50] [--scenario all]
  [--strategy all] [--json] [--plot FILE.png]``: placement quality of every
  strategy (see :mod:`hashring.simulate` for the scenarios and optima).
* ``hashring explain --members a,b,c --consumer orders [--shards 16 | --shard-ids x,y]
  [--strategy rendezvous] [--replicas 1] [--json]``: who owns each shard and why.
* ``hashring balance --members a,b,c --loads loads.json [--current owners.json]
  [--weights a=2,b=1] [--tolerance 0.2] [--json]``: each member's load against its fair
  share under the count plan and the load plan (:func:`hashring.balance_loads`), the moves,
  the hot keys, and where each of the heaviest keys sits and why.

Bad arguments exit with status 2 and a message naming the option to fix;
``simulate`` exits 1 if the balanced planner breaks the issue's bounds
(max - min <= 1, moved <= 1.05 x optimum on one join or leave).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from hashring.balance import Assignment, plan_assignment
from hashring.errors import (
    ConfigurationError,
    InvalidMembersError,
    InvalidReplicasError,
    UnknownStrategyError,
)
from hashring.ketama import DEFAULT_VNODES
from hashring.loads import DEFAULT_TOLERANCE, LoadReport, balance_loads, key_weights, load_report
from hashring.sim.explain import EXPLAIN_STRATEGIES, Explanation, explain, shard_list
from hashring.sim.fleet import SCENARIOS, SimulationSizeError, UnknownScenarioError
from hashring.sim.placers import SIM_STRATEGIES
from hashring.simulate import DEFAULT_CONSUMER, run_grid

app = typer.Typer(
    name="hashring",
    help="Consistent-hashing lease placement: simulate strategies, explain ownership.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # click's help: flags show as flags (rich panels print "--json <bool>")
)


def _console() -> Console:
    console = Console()
    if not console.is_terminal:
        console = Console(width=180)  # pipes and CliRunner: wide tables, no wrapping
    return console


def _bad(message: str, option: str) -> NoReturn:
    raise typer.BadParameter(message, param_hint=option)


def _ints(value: str, option: str) -> list[int]:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts:
        _bad(f"expected a comma-separated list of counts such as 10,20,50, got {value!r}", option)
    out = []
    for p in parts:
        try:
            n = int(p)
        except ValueError:
            _bad(f"{p!r} is not a whole number (expected e.g. 10,20,50)", option)
        if n < 1:
            _bad(f"counts must be >= 1, got {n}", option)
        out.append(n)
    return out


def _names(value: str, option: str, choices: tuple[str, ...]) -> list[str]:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if parts == ["all"]:
        return list(choices)
    unknown = [p for p in parts if p not in choices]
    if not parts or unknown:
        _bad(f"unknown {unknown or value!r}: choose from {', '.join(choices)} or 'all'", option)
    return parts


def _emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


@app.command()
def simulate(
    keys: Annotated[str, typer.Option("--keys", "-k", help="Key counts K, comma-separated.")]
    = "64,400,2000",
    members: Annotated[str, typer.Option("--members", "-n",
                                         help="Member counts N, comma-separated.")]
    = "10,20,50",
    scenario: Annotated[str, typer.Option(
        "--scenario", "-s", help=f"Scenarios ({', '.join(SCENARIOS)}), comma-separated, or all."
    )] = "all",
    strategy: Annotated[str, typer.Option(
        "--strategy", help=f"Strategies ({', '.join(SIM_STRATEGIES)}), comma-separated, or all."
    )] = "all",
    seed: Annotated[int, typer.Option(help="Seed of pod names and of random events.")] = 0,
    vnodes: Annotated[int, typer.Option(help="Ketama virtual nodes per member.")]
    = DEFAULT_VNODES,
    consumer: Annotated[str, typer.Option(help="Consumer name of the simulated keys.")]
    = DEFAULT_CONSUMER,
    summary_only: Annotated[bool, typer.Option("--summary-only",
                                               help="Print only the summary and checks.")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Also write a matplotlib figure (needs the 'plot' extra).",
        dir_okay=False,
    )] = None,
) -> None:
    """Simulate placement quality: load, keys moved and moves per key, per strategy."""
    k_list = _ints(keys, "--keys")
    n_list = _ints(members, "--members")
    scenarios = _names(scenario, "--scenario", SCENARIOS)
    strategies = _names(strategy, "--strategy", SIM_STRATEGIES)
    if vnodes < 1:
        _bad(f"must be >= 1, got {vnodes}", "--vnodes")
    if plot is not None:  # fail before a simulation that can take minutes
        from hashring.sim.plot import PlotUnavailableError, require_matplotlib

        try:
            require_matplotlib()
        except PlotUnavailableError as exc:
            _bad(str(exc), "--plot")
        if not plot.parent.is_dir():
            _bad(f"directory {str(plot.parent)!r} does not exist: create it or write the figure "
                 "elsewhere", "--plot")
    try:
        report = run_grid(k_list, n_list, scenarios, strategies, seed=seed, vnodes=vnodes,
                          consumer=consumer)
    except UnknownScenarioError as exc:
        _bad(str(exc), "--scenario")
    except UnknownStrategyError as exc:
        _bad(str(exc), "--strategy")
    except SimulationSizeError as exc:
        _bad(str(exc), "--members")
    except ConfigurationError as exc:
        _bad(str(exc), "arguments")
    if plot is not None:
        from hashring.sim.plot import PlotUnavailableError, write_plot

        try:
            write_plot(report, plot)
        except PlotUnavailableError as exc:
            _bad(str(exc), "--plot")
        typer.echo(f"wrote {plot}", err=True)
    if as_json:
        _emit_json(report.to_dict())
    else:
        from hashring.sim.report import render_report

        render_report(report, _console(), details=not summary_only)
    if not all(c.passed for c in report.checks()):
        raise typer.Exit(1)  # the planner broke the bounds: make it visible to CI


def _explanation_tables(expl: Explanation) -> tuple[Table, Table]:
    keys = Table(title=f"{expl.strategy}: consumer {expl.consumer!r}, {len(expl.members)} "
                       f"members, replicas={expl.replicas}")
    for col in ("shard", "key hash", "primary", "backups", "why"):
        keys.add_column(col, overflow="fold")
    for k in expl.keys:
        keys.add_row(k.shard, f"0x{k.key_hash:016x}", k.primary, ", ".join(k.backups) or "-",
                     k.reason)
    counts = Table(title="per member")
    counts.add_column("member")
    counts.add_column("primary", justify="right")
    counts.add_column("backup", justify="right")
    if expl.quotas is not None:
        counts.add_column("quota", justify="right")
    for m, c in expl.counts().items():
        row = [m, str(c["primary"]), str(c["backup"])]
        if expl.quotas is not None:
            row.append(str(expl.quotas[m]))
        counts.add_row(*row)
    return keys, counts


@app.command(name="explain")
def explain_cmd(
    members: Annotated[str, typer.Option("--members", "-m",
                                         help="Member names, comma-separated.")],
    consumer: Annotated[str, typer.Option("--consumer", "-c", help="Consumer name.")],
    shards: Annotated[int | None, typer.Option(
        help="Number of Kinesis-style shard ids shardId-000000000000... (default 16)."
    )] = None,
    shard_ids: Annotated[str | None, typer.Option(
        "--shard-ids", help="Explicit shard ids, comma-separated (instead of --shards)."
    )] = None,
    strategy: Annotated[str, typer.Option(
        help=f"One of {', '.join(EXPLAIN_STRATEGIES)}."
    )] = "rendezvous",
    replicas: Annotated[int, typer.Option(help="Backups per key.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
) -> None:
    """Show who owns each shard (primary and backups) and why."""
    member_list = [m.strip() for m in members.split(",") if m.strip()]
    try:
        ids = shard_list(shards, None if shard_ids is None else shard_ids.split(","))
    except ConfigurationError as exc:
        _bad(str(exc), "--shards/--shard-ids")
    try:
        expl = explain(member_list, consumer, ids, strategy=strategy, replicas=replicas)
    except UnknownStrategyError as exc:
        _bad(str(exc), "--strategy")
    except InvalidReplicasError as exc:
        _bad(str(exc), "--replicas")
    except InvalidMembersError as exc:
        _bad(str(exc), "--members")
    except ConfigurationError as exc:
        _bad(str(exc), "arguments")
    if as_json:
        _emit_json(expl.to_dict())
        return
    console = _console()
    for table in _explanation_tables(expl):
        console.print(table)


def _json_file(path: Path, option: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        _bad(f"cannot read {str(path)!r}: {exc.strerror or exc}", option)
    except ValueError as exc:
        _bad(f"{str(path)!r} is not JSON ({exc}): give an object of {what}", option)
    if not isinstance(data, dict):
        _bad(f"{str(path)!r} must hold a JSON object of {what}, got {type(data).__name__}", option)
    return data


def _weights(value: str | None) -> dict[str, float] | None:
    if value is None:
        return None
    out: dict[str, float] = {}
    for part in (p.strip() for p in value.split(",") if p.strip()):
        name, _, number = part.partition("=")
        try:
            out[name.strip()] = float(number)
        except ValueError:
            _bad(f"{part!r} is not member=weight (e.g. a=2,b=1)", "--weights")
    return out


def _balance_rows(plan: Assignment, report: LoadReport) -> list[dict[str, Any]]:
    return [{"member": m, "keys": report.member_keys[m], "load": report.member_loads[m],
             "fair_share": report.fair_shares[m],
             "ratio": report.member_loads[m] / report.fair_shares[m] if report.fair_shares[m] else None}
            for m in plan.members]


@app.command(name="balance")
def balance_cmd(
    members: Annotated[str, typer.Option("--members", "-m", help="Member names, comma-separated.")],
    loads: Annotated[Path, typer.Option("--loads", help="JSON object: key -> measured load.", dir_okay=False)],
    current: Annotated[Path | None, typer.Option(
        "--current", help="JSON object: key -> its current owner (default: the count plan).",
        dir_okay=False)] = None,
    weights: Annotated[str | None, typer.Option(help="Member capacities, e.g. a=2,b=1 (default equal).")]
    = None,
    tolerance: Annotated[float, typer.Option(help="Moves only while a member is this far off its share.")]
    = DEFAULT_TOLERANCE,
    top: Annotated[int, typer.Option(help="How many of the heaviest keys to explain.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show how a load plan spreads measured loads, against the count plan, and why."""
    member_list = [m.strip() for m in members.split(",") if m.strip()]
    load_map = _json_file(loads, "--loads", "key -> load")
    keys = sorted(load_map)
    capacity = _weights(weights)
    try:
        counted = plan_assignment(member_list, keys, weights=capacity)
        owners = ({k: str(v) for k, v in _json_file(current, "--current", "key -> owner").items()}
                  if current is not None else {k: o[0] for k, o in counted.owners.items()})
        plan = balance_loads(member_list, keys, owners, load_map, capacity, tolerance=tolerance)
        before = load_report(Assignment(plan.members, {k: (owners.get(k, ""),) for k in keys if owners.get(k) in
                                                       plan.members}, {}), load_map, capacity)
        after = load_report(plan, load_map, capacity)
        weighed = key_weights(keys, load_map)
    except InvalidMembersError as exc:
        _bad(str(exc), "--members")
    except ConfigurationError as exc:
        _bad(str(exc), "--loads/--weights/--tolerance")
    if after is None or weighed is None:
        _bad("every key weighs the same (or none was measured): the count plan is the plan", "--loads")
    w = dict(zip(keys, weighed, strict=True))
    moved = [k for k in keys if owners.get(k) != plan.owner(k)]
    heaviest = sorted(keys, key=lambda k: (-w[k], k))[:top]
    explained: list[dict[str, Any]] = [{"key": k, "weight": w[k], "owner": plan.owner(k), "was": owners.get(k),
                  "hot": k in after.hot_keys,
                  "why": "hotter than a fair share: a member to itself" if k in after.hot_keys
                  else ("moved to repair a member out of tolerance" if k in moved else "stays with its owner")}
                 for k in heaviest]
    rows_before = _balance_rows(plan, before) if before else None
    rows_after = _balance_rows(plan, after)
    data = {"tolerance": tolerance, "moves": len(moved), "hot_keys": list(after.hot_keys),
            "busiest_before": before.busiest() if before else None, "busiest_after": after.busiest(),
            "members_before": rows_before, "members_after": rows_after, "heaviest_keys": explained}
    if as_json:
        _emit_json(data)
        return
    console = _console()
    table = Table(title=f"{len(keys)} keys over {len(member_list)} members: load over fair share "
                        f"(tolerance {tolerance:g}); {len(moved)} moves")
    for col in ("member", "keys before", "load/fair before", "keys after", "load/fair after"):
        table.add_column(col, justify="right")
    for b_row, a_row in zip(rows_before or [{}] * len(plan.members), rows_after, strict=True):
        table.add_row(a_row["member"], str(b_row.get("keys", "-")),
                      "-" if b_row.get("ratio") is None else f"{b_row['ratio']:.2f}",
                      str(a_row["keys"]), "-" if a_row["ratio"] is None else f"{a_row['ratio']:.2f}")
    console.print(table)
    keys_table = Table(title=f"the {len(explained)} heaviest keys")
    for col in ("key", "weight", "was", "owner", "why"):
        keys_table.add_column(col, overflow="fold")
    for e in explained:
        keys_table.add_row(e["key"], f"{e['weight']:.4g}", e["was"] or "-", e["owner"], e["why"])
    console.print(keys_table)
    if after.hot_keys:
        console.print(f"hot keys (split these shards to spread them): {', '.join(after.hot_keys)}")


def main() -> None:
    """Entry point for ``python -m hashring.cli``."""
    app()


if __name__ == "__main__":
    main()
