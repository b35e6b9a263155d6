"""This SDK next to real peers, in one run, on the same moto: kcl-rs, async-kinesis,
azure-eventhub's load balancer and Knock's design (issue 11).

    make bench-peers                                  # builds .venv and the peer environments
    .venv/bin/python benchmarks/bench_peers.py [--quick] [--full] [--only ours,kcl-rs]

Process peers (each member a process of the peer's own environment, each peer on its own
fresh moto server, each member behind its own counting proxy; see
``benchmarks/peers/process_run.py``): this SDK's Worker (defaults), kcl-rs 0.1.4 (defaults,
and tuned: shard sync every 2 s), async-kinesis 3.0.1 (defaults). Scenario: 16 shards, ~50
records/s, 4 members then a 5th; SIGTERM and SIGKILL of the most loaded member; a steady
window (60 s) and an idle window (30 s) of request and CPU counts; drain and audit.

Lease-loop peers on a simulated clock (no records): azure-eventhub 5.15.1's
``OwnershipManager`` (greedy, its default, and balanced) on its in-memory checkpoint store,
and Knock's design (range placement gating take and renew, leases move only by expiry) next
to this SDK's ``LeaseCoordinator`` in the same discrete-event harness
(``benchmarks/peers/lease_sims.py``). Fleet scale: ``bench_lease_cost.py``'s request model.

``--quick`` shortens the fixed windows (steady 20 s, idle 10 s) and the settle window;
``--full`` adds 64 shards x 8 members (then a 9th) for every peer (long: tens of minutes).
Writes ``benchmarks/results/peers.json`` and PNG plots next to it (``--plots DIR``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_lease_cost import SCALES  # noqa: E402
from benchmarks.peers import envs  # noqa: E402
from benchmarks.peers.process_run import PeerSpec, ProcessRun  # noqa: E402
from benchmarks.report import write_json  # noqa: E402
from kinesis.cost import Sizes, scan_loop, scan_rcu, scoped_worker, write_units  # noqa: E402
from kinesis.cost import kcl3 as kcl3_model  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "peers.json"
PEERS_DIR = ROOT / "benchmarks" / "peers"
SEED = 0
RATE = 50.0


def specs() -> dict[str, PeerSpec]:
    ours_py = sys.executable
    return {
        "ours": PeerSpec(
            "ours", ours_py, PEERS_DIR / "ours_member.py", table="{app}-leases", pass_table=True,
            checkpoint_marker=b"checkpointOrder", own_pythonpath=True,
            settings="kinesis.Worker defaults: lease 10 s, tick 3.3 s, DynamoDB heartbeats, "
                     "idle_backoff 1 s, shard_sync 30 s; TRIM_HORIZON"),
        "ours-k8s": PeerSpec(
            "ours-k8s", ours_py, PEERS_DIR / "ours_member.py", table="{app}-leases", pass_table=True,
            checkpoint_marker=b"checkpointOrder", own_pythonpath=True, kubernetes=True,
            settings="as ours, with a KubernetesMembership (the tests' fake API server; a pod listed "
                     "when its member starts, deleted after a SIGTERM, kept after a SIGKILL)"),
        "kcl-rs": PeerSpec(
            "kcl-rs", str(envs.python_of("kcl-rs")), PEERS_DIR / "kcl_rs_member.py", table="{app}",
            checkpoint_marker=b"checkpoint",
            settings="kcl-rs defaults (failover 10 s, shard sync 60 s, idle between reads 1.5 s); "
                     "POLLING, TRIM_HORIZON"),
        "kcl-rs-tuned": PeerSpec(
            "kcl-rs-tuned", str(envs.python_of("kcl-rs")), PEERS_DIR / "kcl_rs_member.py",
            extra_args=["--shard-sync-ms", "2000"], table="{app}", checkpoint_marker=b"checkpoint",
            settings="as kcl-rs, shard_sync_interval_millis=2000"),
        "async-kinesis": PeerSpec(
            "async-kinesis", str(envs.python_of("async-kinesis")), PEERS_DIR / "async_kinesis_member.py",
            table="kinesis-checkpoints-{app}", key_attr="shard_id", owner_attr="ref",
            owner_after="/", checkpoint_marker=b"#seq = :seq, #ts = :ts, #ttl",
            settings="async-kinesis defaults (session_timeout 60 s, heartbeat 15 s, no "
                     "max_shard_consumers, sleep 2 s when caught up); DynamoDBCheckPointer; TRIM_HORIZON"),
    }


PROCESS_PEERS = ("ours", "ours-k8s", "kcl-rs", "kcl-rs-tuned", "async-kinesis")
ENV_OF = {"kcl-rs": "kcl-rs", "kcl-rs-tuned": "kcl-rs", "async-kinesis": "async-kinesis"}


# --- fleet-scale models (bench_lease_cost.py's accounting) -------------------------------


def model_knock(k: int, n: int, s: Sizes | None = None, lease: float = 10.0) -> dict[str, float]:
    """Knock's loop as emulated: every member scans the table every tick and renews its own."""
    s = s or Sizes()
    tick = lease / 3
    pages, rcu = scan_rcu(k * s.lease_row, consistent=True)
    renew = k / tick
    return {"read_requests": n * pages / tick, "rcu": n * rcu / tick, "write_requests": renew,
            "wcu": renew * write_units(s.lease_row)}


def model_azure(k: int, n: int, interval: float = 30.0) -> dict[str, float]:
    """azure-eventhub's loop on a blob store: every member lists the ownership blobs every
    interval (one list request per 5,000 blobs) and re-claims (uploads) each owned partition."""
    lists = n * math.ceil(k / 5000) / interval
    return {"read_requests": lists, "write_requests": k / interval}


def fleet_models() -> list[dict[str, Any]]:
    rows = []
    for k, n in ((16, 4), (64, 8), *SCALES):
        ours_scan = scan_loop(k, n)
        ours_scoped = scoped_worker(k, n)  # the Worker: with its shard manifest
        kcl3 = kcl3_model(k, n)
        knock = model_knock(k, n)
        azure = model_azure(k, n)

        def per_member_min(reads: float, writes: float, n: int = n) -> float:
            return round((reads + writes) / n * 60, 1)

        rows.append({
            "leases": k, "members": n,
            "requests_per_member_per_minute": {
                "ours (scan reads)": per_member_min(ours_scan.read_requests, ours_scan.write_requests),
                "ours (scoped Worker, the default on Kubernetes)": per_member_min(ours_scoped.read_requests, ours_scoped.write_requests),
                "kcl 3.x design (kcl-rs)": per_member_min(kcl3.read_requests, kcl3.write_requests),
                "knock (emulated)": per_member_min(knock["read_requests"], knock["write_requests"]),
                "azure-eventhub (blob store)": per_member_min(azure["read_requests"], azure["write_requests"]),
            },
            "fleet_rcu_per_second": {
                "ours (scan reads)": round(ours_scan.rcu, 1),
                "ours (scoped Worker, the default on Kubernetes)": round(ours_scoped.rcu, 1),
                "kcl 3.x design (kcl-rs)": round(kcl3.rcu, 1),
                "knock (emulated)": round(knock["rcu"], 1),
            },
        })
    return rows


# --- runs ------------------------------------------------------------------------------------


def run_sims(shards: int, members: int, log: Any) -> dict[str, Any]:
    from benchmarks.peers import lease_sims
    from kinesis.testing import LocalAWS

    out: dict[str, Any] = {}
    with LocalAWS() as aws:
        for system in ("ours", "knock"):
            started = time.perf_counter()
            out[f"{system}-sim"] = lease_sims.run(system, aws, shards, members)
            out[f"{system}-sim"]["wall_s"] = round(time.perf_counter() - started, 1)
            log(f"  {system} (simulated): {out[f'{system}-sim']['phases']}")
    py = str(envs.python_of("azure-eventhub"))
    for strategy in ("greedy", "balanced"):
        done = subprocess.run([py, str(PEERS_DIR / "azure_sim.py"), "--partitions", str(shards), "--members",
                               str(members), "--seed", str(SEED), "--strategy", strategy],
                              capture_output=True, text=True, check=True, cwd=str(ROOT))
        out[f"azure-eventhub-{strategy}"] = json.loads(done.stdout)
        log(f"  azure-eventhub {strategy} (simulated): {out[f'azure-eventhub-{strategy}']['phases']}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="steady 20 s, idle 10 s, settle 10 s")
    parser.add_argument("--full", action="store_true", help="also 64 shards x 8 members (long)")
    parser.add_argument("--only", default="", help="comma-separated peers (default: all)")
    parser.add_argument("--no-setup", action="store_true", help="do not build peer environments")
    parser.add_argument("--plots", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--model-only", action="store_true",
                        help="recompute only the fleet-scale model in the results file (seconds)")
    args = parser.parse_args(argv)
    if args.model_only:
        kept = json.loads(args.out.read_text())
        kept["fleet_model"] = fleet_models()
        kept["fleet_model_command"] = "benchmarks/bench_peers.py --model-only"
        write_json(args.out, kept)
        return 0
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("kinesis").setLevel(logging.ERROR)
    only = {x for x in args.only.split(",") if x}
    wanted = [p for p in (*PROCESS_PEERS, "sims") if not only or p in only]
    if not args.no_setup:
        for env in sorted({ENV_OF[p] for p in wanted if p in ENV_OF} | ({"azure-eventhub"} if "sims" in wanted else set())):
            envs.ensure(env)
    steady_s, idle_s, settle_s = (20.0, 10.0, 10.0) if args.quick else (60.0, 30.0, 15.0)
    sizes = [(16, 4)] + ([(64, 8)] if args.full else [])
    command = "benchmarks/bench_peers.py" + (" --quick" if args.quick else "") + (" --full" if args.full else "")
    if args.only:
        command += f" --only {args.only}"
    wall = time.perf_counter()
    previous = json.loads(args.out.read_text()) if args.out.exists() and args.only else {}
    results: dict[str, Any] = {
        "benchmark": "peers",
        "command": command,
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": __import__("os").cpu_count()},
        "seed": SEED,
        "rate_records_per_s": RATE,
        "windows_s": {"steady": steady_s, "idle": idle_s, "settle": settle_s},
        "versions": {p: {**envs.installed_versions(e)} for p, e in (("kcl-rs", "kcl-rs"),
                     ("async-kinesis", "async-kinesis"), ("azure-eventhub", "azure-eventhub"))
                     if envs.python_of(e).exists()},
        "pins": envs.PINS,
        "runs": previous.get("runs", {}),
    }
    all_specs = specs()
    for shards, members in sizes:
        size = f"{shards}x{members}"
        runs = results["runs"].setdefault(size, {})
        for name in wanted:
            started = time.perf_counter()
            print(f"== {name} at {size}", flush=True)
            if name == "sims":
                runs.update(run_sims(shards, members, print))
                continue
            spec = all_specs[name]
            out_dir = ROOT / "out" / "peers" / size / name
            # generous limits: kcl-rs's cold start waits for its 60 s shard sync by default
            run = ProcessRun(spec, out_dir, shards=shards, members=members, rate=RATE, settle_s=settle_s,
                             quiet_s=90.0, timeout_s=240.0)
            try:
                runs[name] = run.run(steady_s=steady_s, idle_s=idle_s)
            except Exception as exc:  # recorded; the other peers still run
                runs[name] = {"error": f"{type(exc).__name__}: {exc}", "out_dir": str(out_dir)}
                print(f"  {name} failed: {exc}", flush=True)
                continue
            runs[name]["settings"] = spec.settings
            runs[name]["wall_s"] = round(time.perf_counter() - started, 1)
            runs[name]["logs"] = str(out_dir.relative_to(ROOT))
            print(f"  records: {runs[name]['records']}", flush=True)
    results["fleet_model"] = fleet_models()
    for runs in results["runs"].values():
        for r in runs.values():
            if r.get("timeline"):
                r["timeline"] = changes_only(r["timeline"])
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)
    write_json(args.out, results)
    print_tables(results)
    try:
        from benchmarks.peers.plots import plot_all

        for path in plot_all(results, args.plots):
            print(f"plot: {path}")
    except ImportError as exc:
        print(f"no plots ({exc})")
    print(f"wrote {args.out} in {results['wall_seconds']} s")
    bad = [f"{size}/{name}" for size, runs in results["runs"].items() for name, r in runs.items()
           if name in ("ours", "ours-k8s") and (r.get("error") or r["records"]["lost"] or r["records"]["other_duplicates"])]
    return 1 if bad else 0


def changes_only(timeline: list[Any]) -> list[Any]:
    """The samples where the leases per member changed (and the last one): the plot is the same."""
    out = [s for i, s in enumerate(timeline) if i == 0 or s[1] != timeline[i - 1][1]]
    if timeline and out[-1] is not timeline[-1]:
        out.append(timeline[-1])
    return out


def lead_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (size, peer): the headline figures of docs/benchmarks.md."""
    rows = []
    for size, runs in results["runs"].items():
        for name, r in runs.items():
            if "error" in r:
                rows.append({"size": size, "peer": name, "error": r["error"]})
                continue
            ph = r["phases"]
            row: dict[str, Any] = {"size": size, "peer": name}
            row["cold_all_processed_s"] = ph["cold_start"].get("all_processed_s")
            row["cold_balanced_s"] = ph["cold_start"].get("balanced_s")
            row["cold_stable_s"] = ph["cold_start"].get("stable_s")
            row["join_balanced_s"] = ph["join"].get("balanced_s")
            row["sigterm_back_s"] = ph["sigterm"].get("leases_back_s")
            row["sigkill_back_s"] = ph["sigkill"].get("leases_back_s")
            if "records" in r:
                rec = r["records"]
                row["duplicates"] = rec["duplicates"]
                row["duplicates_by_phase"] = rec["duplicates_by_phase"]
                row["lost"] = rec["lost"]
                for w in ("steady", "idle"):
                    win = r["windows"][w]
                    row[f"{w}_req_per_member_min"] = win["mean_per_member_per_minute"]
                    row[f"{w}_checkpoints_per_member_min"] = win["mean_checkpoint_writes_per_member_per_minute"]
                    row[f"{w}_cpu_percent"] = win["mean_cpu_percent"]
            else:
                row["store_or_dynamodb_req_per_member_min"] = r.get(
                    "dynamodb_requests_per_member_per_minute_mean", r.get("store_requests_per_member_per_minute_mean"))
            rows.append(row)
    return rows


def print_tables(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    t = Table(title="Peers: reaction times (s), duplicates, lost; requests per member per minute (steady / idle)")
    cols = ("size", "peer", "cold: all shards", "cold: balanced", "join: bal.", "SIGTERM: back", "SIGKILL: back",
            "dups", "lost", "steady ddb/kin (ckpt)", "idle ddb/kin (ckpt)", "CPU % steady")
    for c in cols:
        t.add_column(c, justify="right")

    def f(x: Any) -> str:
        return "-" if x is None else str(x)

    for row in lead_rows(results):
        if "error" in row:
            t.add_row(row["size"], row["peer"], f"error: {row['error'][:60]}", *[""] * (len(cols) - 3))
            continue

        def req(w: str, row: dict[str, Any] = row) -> str:
            r = row.get(f"{w}_req_per_member_min")
            if r is None:
                return f(row.get("store_or_dynamodb_req_per_member_min"))
            return f"{r.get('dynamodb', 0)}/{r.get('kinesis', 0)} ({row[f'{w}_checkpoints_per_member_min']})"

        t.add_row(row["size"], row["peer"], f(row["cold_all_processed_s"]), f(row["cold_balanced_s"]),
                  f(row["join_balanced_s"]), f(row["sigterm_back_s"]), f(row["sigkill_back_s"]),
                  f(row.get("duplicates")), f(row.get("lost")), req("steady"), req("idle"),
                  f(row.get("steady_cpu_percent")))
    console.print(t)


if __name__ == "__main__":
    sys.exit(main())
