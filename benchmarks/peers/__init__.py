"""Real peers for ``benchmarks/bench_peers.py``: pinned versions, their environments and the
member drivers each peer's interpreter runs (see ``docs/benchmarks.md``)."""
