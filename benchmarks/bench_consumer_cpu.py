"""CPU per record of a whole consumer: our Worker, kcl-rs (AWS KCL's Rust port) and a plain
boto3 GetRecords loop, each reading the same pre-filled stream from TRIM_HORIZON.

One moto server in its own process (:mod:`benchmarks.moto_process`), a 4-shard stream filled
with ``--records`` records of ``--size`` bytes; each consumer runs in its own process
(:mod:`benchmarks.cpu_consumer`; kcl-rs with the Python of its venv, built by
``python -m benchmarks.peers.envs``), one after the other, ``--rounds`` times alternating,
best run kept. Figures: CPU per record overall and after the first quarter (steady state),
the start-up CPU before the first record (importing the consumer, building its clients, from its
start to the first record), and each as a ratio to kcl-rs and to the boto3
loop measured in the same run (the server's CPU is not counted: it is another process).

Enhanced Fan-Out the same way (``ours-fanout``, ``boto3-fanout``), through
``tests/support/fanout_endpoint.py`` in this process, compared with each other.

``ours-gc10k`` (only when named in ``--only``): ours in a process whose application raised
the GC's thresholds, beside ``ours``. ``--baseline DIR`` (a checkout of another commit, e.g.
``git worktree add /tmp/before COMMIT``) adds ``ours@baseline``: ``ours`` importing that
checkout's packages, in the same run, so a change is measured against what it replaced.

Writes benchmarks/results/consumer_cpu.json and docs/img/consumer_cpu.png.

    .venv/bin/python benchmarks/bench_consumer_cpu.py [--records 100000] [--size 1024] [--rounds 1]
    .venv/bin/python benchmarks/bench_consumer_cpu.py --baseline /tmp/before --baseline-label COMMIT
    .venv/bin/python benchmarks/bench_consumer_cpu.py --only ours,ours-gc10k --rounds 2 \
        --out benchmarks/results/consumer_cpu_gc.json --plot /tmp/consumer_cpu_gc.png
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.peers.envs import python_of  # noqa: E402
from benchmarks.report import write_json  # noqa: E402
from tests.support.fanout_endpoint import fanout_endpoint  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PLOT = ROOT / "docs" / "img" / "consumer_cpu.png"
CONSUMERS = ("ours", "kcl-rs", "boto3")
FANOUT = ("ours-fanout", "boto3-fanout")
BASELINE = "ours@baseline"
"""Enhanced Fan-Out, through ``tests/support/fanout_endpoint.py`` in this process (its CPU, like
the server's, is not the consumer's); compared with each other (kcl-rs's SDK needs HTTP/2)."""


def fill(aws: MotoProcess, stream: str, records: int, size: int) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=4)
    payload = os.urandom(size)
    for start in range(0, records, 500):
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": payload, "PartitionKey": f"pk-{i}"} for i in range(start, min(records, start + 500))])


def run(consumer: str, endpoint: str, stream: str, records: int, baseline: Path | None = None) -> dict[str, Any]:
    """One consumer's figures; ``ours@baseline`` is ``ours`` importing ``baseline``'s packages."""
    python = str(python_of("kcl-rs")) if consumer == "kcl-rs" else sys.executable
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    process, tree = consumer, []
    if consumer == BASELINE:
        assert baseline is not None
        process, tree = "ours", ["--tree", str(baseline)]
    done = subprocess.run([python, str(ROOT / "benchmarks" / "cpu_consumer.py"), process, "--endpoint", endpoint,
                           "--stream", stream, "--records", str(records), *tree],
                          capture_output=True, text=True, timeout=900, check=False, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{consumer} failed ({done.returncode}): {done.stdout[-500:]} {done.stderr[-1500:]}")
    result: dict[str, Any] = {**json.loads(lines[-1]), "consumer": consumer}
    return result


def plot(best: dict[str, dict[str, Any]], records: int, size: int, path: Path) -> Path:
    """CPU per record of each consumer as a bar: its start-up spread over the records, and the
    rest (reading); over the polling consumers, a dotted line at twice kcl-rs's and at 0.6 x
    the boto3 loop's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(best)
    startup = [best[n]["startup_cpu_s"] / records * 1e6 for n in names]
    reading = [best[n]["us_per_record"] - s for n, s in zip(names, startup, strict=True)]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.4))
    ax.barh(names, startup, color="#c9a227", label="start-up, spread over the records")
    ax.barh(names, reading, left=startup, color="#2a6f97", label="reading")
    polling = [i for i, n in enumerate(names) if n in CONSUMERS]  # the targets are polling's
    targets = (("kcl-rs", 2.0, "2 x kcl-rs"), ("boto3", 0.6, "0.6 x boto3 loop"))
    for offset, (baseline, factor, label) in zip((0.0, 0.25), targets, strict=True):  # staggered labels
        if baseline in best and polling:
            x = best[baseline]["us_per_record"] * factor
            for row in polling:  # row by row: --only may put other consumers between them
                ax.plot([x, x], [row - 0.5, row + 0.5], color="grey", linestyle=":", linewidth=1)
            top = min(polling) - 0.5
            ax.text(x, top - 0.05 - offset, label, fontsize=7, ha="center", va="bottom")
    ax.invert_yaxis()
    ax.set_xlabel(f"CPU us per record ({records:,} records of {size:,} bytes, consumer process only)")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default=",".join(CONSUMERS + FANOUT), help="comma-separated consumers")
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare ours with")
    parser.add_argument("--baseline-label", default=None, help="what the baseline is (e.g. its commit)")
    parser.add_argument("--out", type=Path, default=RESULTS / "consumer_cpu.json")
    parser.add_argument("--plot", type=Path, default=PLOT, help="the figure (docs/img/consumer_cpu.png)")
    args = parser.parse_args(argv)
    consumers = [c for c in args.only.split(",") if c] + ([BASELINE] if args.baseline else [])
    best: dict[str, dict[str, Any]] = {}
    # as pip installs it: bytecode compiled (this checkout's may be stale, and with
    # PYTHONDONTWRITEBYTECODE set each consumer process would compile the changed modules again)
    for tree in (ROOT, *([args.baseline] if args.baseline else [])):
        for package in ("hashring", "kinesis"):
            compileall.compile_dir(tree / package, quiet=1)
    with MotoProcess() as aws, fanout_endpoint(aws.endpoint_url, poll_interval=0.05) as fanout:
        fill(aws, "cpu", args.records, args.size)
        for _ in range(args.rounds):
            for consumer in consumers:  # alternating, so a noisy moment hurts each alike
                endpoint = fanout.endpoint_url if consumer in FANOUT else aws.endpoint_url
                result = run(consumer, endpoint, "cpu", args.records, args.baseline)
                if consumer not in best or result["us_per_record"] < best[consumer]["us_per_record"]:
                    best[consumer] = result
    if BASELINE in best and "ours" in best:
        best["ours"]["vs_baseline"] = round(best["ours"]["us_per_record"] / best[BASELINE]["us_per_record"], 2)
    for baseline in ("kcl-rs", "boto3", "boto3-fanout"):
        if baseline in best:
            for result in best.values():
                result[f"vs_{baseline}"] = round(result["us_per_record"] / best[baseline]["us_per_record"], 2)
                result[f"steady_vs_{baseline}"] = round(result["steady_us"] / best[baseline]["steady_us"], 2)
    table = Table(title=f"CPU per record, {args.records:,} records of {args.size} B from 4 shards (best of "
                        f"{args.rounds})")
    for column in ("consumer", "us/record", "steady us/record", "start-up CPU s", "import / clients / first read",
                   "GC us/record", "vs kcl-rs", "vs boto3 loop (of its kind)"):
        table.add_column(column)
    for name, r in best.items():
        parts = " / ".join(f"{v:.2f}" for v in r["startup_parts"].values())
        gc_us = f"{r['gc_cpu_s'] / r['records'] * 1e6:.1f}" if "gc_cpu_s" in r else ""
        table.add_row(name, f"{r['us_per_record']:.1f}", f"{r['steady_us']:.1f}", f"{r['startup_cpu_s']:.2f}", parts,
                      gc_us, str(r.get("vs_kcl-rs", "")), str(r.get("vs_boto3-fanout" if name in FANOUT else "vs_boto3", "")))
    Console().print(table)
    write_json(args.out, {"records": args.records, "size": args.size, "rounds": args.rounds, "consumers": best,
                          "baseline": args.baseline_label or (str(args.baseline) if args.baseline else None)})
    plot(best, args.records, args.size, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
