"""The ``hashring`` command of the installed SDK: :mod:`hashring.cli`'s ``simulate`` and
``explain``, and ``cost`` (this module), which needs the lease loop's cost model and so lives
above :mod:`hashring` (imports go one way).

* ``hashring cost --shards 1000 --members 50 [--lease-duration 10] [--streams 1]
  [--read-price 0.125] [--write-price 0.625] [--json]``: what coordination costs in DynamoDB in
  steady state (:mod:`kinesis.cost`): read and write units per second for the fleet, requests
  per member per minute, and the bill per shard-hour, per member-hour and per month at
  on-demand prices (USD per million request units), for this SDK's Worker (default and with
  Kubernetes membership), its scan loop, and KCL 3.x's design beside them.

Bad arguments exit with status 2 and a message naming the option to fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from hashring import cli as hashring_cli
from kinesis.cost import Prices, bill, designs

app = typer.Typer(
    name="hashring",
    help="Consistent-hashing lease placement: simulate strategies, explain ownership, price coordination.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
app.registered_commands.extend(hashring_cli.app.registered_commands)


def _positive(value: float, option: str, *, integer: bool = False) -> None:
    if not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
        kind = "a whole number" if integer else "a number"
        raise typer.BadParameter(f"must be {kind} > 0, got {value:g}", param_hint=option)


def cost_report(shards: int, members: int, *, lease_duration: float = 10.0, streams: int = 1,
                prices: Prices | None = None) -> dict[str, dict[str, float]]:
    """Each design's bill (:func:`kinesis.cost.bill`) by name, as ``hashring cost --json`` prints it."""
    prices = prices or Prices()
    return {name: {k: round(v, 6) for k, v in asdict(bill(fleet, shards, members, prices)).items()}
            for name, fleet in designs(shards, members, lease_duration, streams=streams).items()}


@app.command(name="cost")
def cost_cmd(
    shards: Annotated[int, typer.Option("--shards", "-k", help="Shards (leases) in the lease table.")],
    members: Annotated[int, typer.Option("--members", "-n", help="Consumer members (pods) sharing them.")],
    lease_duration: Annotated[float, typer.Option(help="WorkerConfig.lease_duration, seconds.")] = 10.0,
    streams: Annotated[int, typer.Option(help="Streams the Workers consume (one shard manifest each).")] = 1,
    read_price: Annotated[float, typer.Option(help="USD per million read request units (on demand).")]
    = Prices.read_per_million,
    write_price: Annotated[float, typer.Option(help="USD per million write request units (on demand).")]
    = Prices.write_per_million,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """What coordinating SHARDS leases among MEMBERS costs in DynamoDB, beside KCL 3.x's design."""
    _positive(shards, "--shards", integer=True)
    _positive(members, "--members", integer=True)
    _positive(lease_duration, "--lease-duration")
    _positive(streams, "--streams", integer=True)
    for value, option in ((read_price, "--read-price"), (write_price, "--write-price")):
        if not math.isfinite(value) or value < 0:
            raise typer.BadParameter(f"must be a price >= 0, got {value:g}", param_hint=option)
    if members > shards:
        typer.echo(f"note: {members - shards} of the {members} members hold no lease (more members than shards)",
                   err=True)
    report = cost_report(shards, members, lease_duration=lease_duration, streams=streams,
                         prices=Prices(read_price, write_price))
    if as_json:
        typer.echo(json.dumps({"shards": shards, "members": members, "lease_duration_s": lease_duration,
                               "streams": streams, "prices_usd_per_million": {"read": read_price, "write": write_price},
                               "designs": report}, indent=2))
        return
    table = Table(title=f"DynamoDB coordination cost, steady state: {shards:,} shards, {members:,} members, "
                        f"lease {lease_duration:g} s, on demand ${read_price:g} / ${write_price:g} per million "
                        "read / write units")
    for col in ("design", "RCU/s", "WCU/s", "requests / member / min", "read units / shard-h",
                "write units / shard-h", "$ / shard-h", "$ / member-h", "$ / month"):
        table.add_column(col, justify="left" if col == "design" else "right")
    for name, b in report.items():
        table.add_row(name, f"{b['rcu_per_s']:,.1f}", f"{b['wcu_per_s']:,.1f}",
                      f"{b['requests_per_member_per_minute']:,.1f}", f"{b['read_units_per_shard_hour']:,.1f}",
                      f"{b['write_units_per_shard_hour']:,.1f}", f"{b['usd_per_shard_hour']:.7f}",
                      f"{b['usd_per_member_hour']:.6f}", f"{b['usd_per_month']:,.2f}")
    hashring_cli._console().print(table)


def main() -> None:
    """Entry point for ``python -m kinesis.cli``."""
    app()


if __name__ == "__main__":
    main()
