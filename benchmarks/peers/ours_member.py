"""A benchmark member running this SDK's :class:`kinesis.Worker` with its defaults.

    python benchmarks/peers/ours_member.py --endpoint URL --stream S --application A \\
        --table T --member-id m1 --out-dir DIR

``WorkerConfig(table_name=T, streams=[StreamConfig(S, A, "TRIM_HORIZON")], worker_id=m1)``
and nothing else: lease duration 10 s, tick D/3, DynamoDB heartbeat membership, replicas 1,
``idle_backoff`` 1 s, ``shard_sync_interval`` 30 s, ``shutdown_grace`` 20 s. The processor is
``examples/demo_member.py``'s :class:`LedgerProcessor` (ledger, then a checkpoint per batch).
SIGTERM is the Worker's own graceful stop (every lease handed off). ``--kubeconfig`` (the
``ours-k8s`` run) gives it a ``KubernetesMembership`` of the pods labelled ``--k8s-selector``
instead of the default membership.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.demo_member import Ledger, LedgerProcessor  # noqa: E402
from kinesis import StreamConfig, Worker, WorkerConfig  # noqa: E402
from kinesis.testing import client_for  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--stream", required=True)
    p.add_argument("--application", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--member-id", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--kubeconfig", help="a KubernetesMembership of the pods labelled --k8s-selector")
    p.add_argument("--k8s-selector", default="app=bench")
    args = p.parse_args()
    logging.basicConfig(filename=args.out_dir / f"{args.member_id}.log", level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")
    config = WorkerConfig(table_name=args.table, streams=[StreamConfig(args.stream, args.application, "TRIM_HORIZON")],
                          worker_id=args.member_id)
    membership = None
    if args.kubeconfig:
        from hashring import KubernetesMembership

        membership = KubernetesMembership("label_selector", namespace="default", pod_name=args.member_id,
                                          label_selector=args.k8s_selector, kubeconfig=args.kubeconfig,
                                          watch=True)
    worker = Worker(config, lambda: LedgerProcessor(ledger), membership=membership,
                    kinesis_client=client_for("kinesis", args.endpoint, args.region),
                    dynamodb_client=client_for("dynamodb", args.endpoint, args.region))
    worker.start()
    return 0 if worker.run(install_signal_handlers=True) else 3


if __name__ == "__main__":
    sys.exit(main())
