"""CPU per record of the Spark source's read path on an executor, this tree against another.

What one executor core does for a batch read (``spark.read.format("kinesis")``):
``KinesisBatchReader.read(partition)`` for every input partition, i.e. GetShardIterator and
GetRecords through the SDK's ``ShardReader``, the records turned into Arrow batches. It runs
here in a plain Python process (no JVM: Spark's own per-batch costs are
``bench_spark.py``'s), warmed by a first read (Spark reuses its Python workers: imports and
clients are paid once per worker), so the figure is the read path's own: records per CPU
second of the reading process, i.e. records/s per executor core when the read is CPU-bound.

One moto server in its own process, a 4-shard stream of ``--records`` records of ``--size``
bytes. Each tree (``--baseline DIR``: a checkout of another commit, e.g. ``git worktree add
/tmp/before <commit>``) reads it in its own process, alternating, ``--rounds`` times, best
kept; the ratio is of the two in this run.

Writes benchmarks/results/spark_read_cpu.json.

    .venv/bin/python benchmarks/bench_spark_read_cpu.py --baseline /tmp/before --baseline-label COMMIT
        [--records 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
STREAM = "spark-read-cpu"


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(endpoint: str) -> dict[str, Any]:
    """In the tree on ``sys.path``: read every partition once; CPU of the reads only."""
    from spark_integration.options import parse_options
    from spark_integration.readers import KinesisBatchReader

    options = parse_options({"streamName": STREAM, "endpointUrl": endpoint, "region": "us-east-1"},
                            streaming=False)
    reader = KinesisBatchReader(options)
    partitions = reader.partitions()  # the driver's part: not counted
    # warm: Spark reuses its Python workers, so their imports (pyarrow) and clients are paid
    # once per worker, not per read
    next(iter(reader.read(partitions[0])), None)
    started = cpu()
    rows = sum(batch.num_rows for partition in partitions for batch in reader.read(partition))
    spent = cpu() - started
    return {"records": rows, "cpu_s": round(spent, 3), "records_per_cpu_s": round(rows / spent),
            "us_per_record": round(spent / rows * 1e6, 2)}


def run(tree: Path, endpoint: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(tree), "--endpoint", endpoint],
                          capture_output=True, text=True, timeout=900, check=False, env=env, cwd=tree)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{tree} failed ({done.returncode}): {done.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare with")
    parser.add_argument("--baseline-label", default=None, help="what the baseline is (e.g. its commit)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_read_cpu.json")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        sys.path.insert(0, str(args.child))
        print(json.dumps(child(args.endpoint)))
        return 0

    sys.path.insert(0, str(ROOT))
    from rich.console import Console
    from rich.table import Table

    from benchmarks.bench_consumer_cpu import fill
    from benchmarks.moto_process import MotoProcess
    from benchmarks.report import write_json

    trees = {"this tree": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    best: dict[str, dict[str, Any]] = {}
    with MotoProcess() as aws:
        fill(aws, STREAM, args.records, args.size)
        for _ in range(args.rounds):
            for name, tree in trees.items():  # alternating: a noisy moment hurts both alike
                result = run(tree, aws.endpoint_url)
                if result["records"] != args.records:
                    raise RuntimeError(f"{name} read {result['records']} of {args.records} records")
                if name not in best or result["us_per_record"] < best[name]["us_per_record"]:
                    best[name] = result
    if "baseline" in best:
        best["this tree"]["vs_baseline"] = round(best["this tree"]["us_per_record"] / best["baseline"]["us_per_record"], 2)
    table = Table(title=f"Spark source read path, {args.records:,} records of {args.size} B, one process "
                        f"(best of {args.rounds})")
    for column in ("tree", "us/record", "records per CPU s", "vs baseline"):
        table.add_column(column)
    for name, r in best.items():
        table.add_row(name, f"{r['us_per_record']:.1f}", f"{r['records_per_cpu_s']:,}", str(r.get("vs_baseline", "")))
    Console().print(table)
    write_json(args.out, {"records": args.records, "size": args.size, "rounds": args.rounds,
                          "baseline": args.baseline_label or (str(args.baseline) if args.baseline else None),
                          "trees": best})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
