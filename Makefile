# One entry point for set-up and runs; every target builds .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,k8s,spark,metrics,plot
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: venv demo test lint bench simulate clean chaos

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip setuptools wheel
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

## The main job: the end-to-end demo. Installs only what it needs (the package and moto)
## unless the full environment of `make test` is already there.
demo: demo-venv
	$(PY) examples/demo.py

.PHONY: demo-venv
demo-venv:
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then :; \
	else $(MAKE) --no-print-directory $(VENV)/.demo-installed; fi

$(VENV)/.demo-installed: pyproject.toml
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip setuptools wheel
	$(PY) -m pip install -q -e '.[testing]'
	touch $@

## The test suite (the same command CI runs): the parallel part on two workers (pytest-xdist),
## then the tests marked serial (the chaos run, which holds real-time bounds) alone.
test: venv
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

## The long chaos profile (tests/chaos): faults drawn from a printed seed (CHAOS_SEED=N replays
## a run); figures in benchmarks/results/chaos.json. The fast profile runs within `make test`.
chaos: venv
	CHAOS_PROFILE=long $(PY) -m pytest -q -p no:cacheprovider --timeout=3600 tests/chaos/test_chaos.py

lint: venv
	$(VENV)/bin/ruff check hashring kinesis spark_integration tests examples benchmarks
	$(VENV)/bin/mypy

bench: venv
	$(PY) benchmarks/run_all.py

.PHONY: bench-peers
## This SDK next to real peers (kcl-rs, async-kinesis, azure-eventhub, Knock's design), one run:
## builds .venv and each peer's own environment (benchmarks/peers/.venvs), then
## benchmarks/results/peers.json and PNG plots. BENCH_PEERS_ARGS=--quick shortens the windows,
## --full adds 64 shards x 8 members. Then balancing on a skewed stream, ours (by count, by load)
## next to kcl-rs: benchmarks/results/load_peers.json and .png (~20 min; BENCH_LOAD_ARGS, e.g.
## --duration 150).
bench-peers: venv
	$(PY) -m benchmarks.peers.envs
	$(PY) benchmarks/bench_peers.py $(BENCH_PEERS_ARGS)
	$(PY) benchmarks/bench_load_workers.py --with-kcl-rs $(BENCH_LOAD_ARGS)

.PHONY: spark-demo
## The Spark pipeline demo: Kinesis source -> per-minute aggregates -> Parquet, checked.
spark-demo: venv
	$(PY) examples/spark_pipeline.py

simulate: venv
	$(VENV)/bin/hashring simulate

.PHONY: simulate-fleet
## The lease-protocol simulator's long profile (tests/fleetsim): FLEETSIM_SEEDS seeds (default
## 10,000) from FLEETSIM_START (default 1) on every core, in parts of FLEETSIM_PART seeds kept in
## benchmarks/results/fleet_sim_parts/ (an interrupted run resumes where it stopped: delete the
## parts after a code change), merged into benchmarks/results/fleet_sim.json.
## The fast profile runs within `make test`; a failing seed replays with
## `PYTHONHASHSEED=0 .venv/bin/python -m tests.fleetsim --seed N`.
FLEETSIM_SEEDS ?= 10000
FLEETSIM_START ?= 1
FLEETSIM_PART ?= 500
FLEETSIM_PARTS := benchmarks/results/fleet_sim_parts
simulate-fleet: venv
	mkdir -p $(FLEETSIM_PARTS)
	for start in $$(seq $(FLEETSIM_START) $(FLEETSIM_PART) $$(($(FLEETSIM_START) + $(FLEETSIM_SEEDS) - 1))); do \
		n=$$(( $(FLEETSIM_START) + $(FLEETSIM_SEEDS) - start )); [ $$n -gt $(FLEETSIM_PART) ] && n=$(FLEETSIM_PART); \
		[ -f $(FLEETSIM_PARTS)/part_$$start.json ] || $(PY) -m tests.fleetsim --seeds $$n --start $$start --quiet \
			--shrink --out $(FLEETSIM_PARTS)/part_$$start.json || true; \
	done
	$(PY) -m tests.fleetsim --merge $(FLEETSIM_PARTS)/part_*.json --out benchmarks/results/fleet_sim.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
