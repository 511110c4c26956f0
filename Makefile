# The README's two commands are `make run` and `make test`; the other targets are their parts.
# Everything installs into .venv; jars go to $KMON_CACHE (default ~/.cache/kmon).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# pip runs again only when pyproject.toml changes, so a warm `make setup` takes a second.
INSTALLED := $(VENV)/.installed

.PHONY: setup run test lint unit integration bench soak matrix chaos repro tansu broker-report

# `kmon dashboards install-tools`: the operations tests' tools. helm and kubeconform (go install
# of pinned versions into $KMON_CACHE/bin, a few minutes once), offline Kubernetes and CRD
# schemas for kubeconform, chromium (apt) for the investigate page; under a second when warm.
# `kmon nemesis install-tools`: toxiproxy-server (go install of a pinned version into
# $KMON_CACHE/bin, about 35 s once) for the network faults, and the Kafka protocol proxy
# (Kroxylicious + kmon/local/proxy, built by Maven into $KMON_CACHE, about 20 s once per
# change of its sources) for the Kafka-compatible brokers' bugs.
setup: $(INSTALLED)
	$(BIN)/kmon setup
	$(BIN)/kmon dashboards install-tools
	$(BIN)/kmon nemesis install-tools

$(INSTALLED): pyproject.toml setup.py kmon/_build.py $(wildcard kmon/checker/*.py) kmon/history/model.py kmon/history/fragment.py kmon/history/events.py kmon/foldrun.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# The local stack in the foreground; Ctrl-C stops it.
run: setup
	$(BIN)/kmon run

lint: $(INSTALLED)
	$(BIN)/ruff check .

# The whole suite, set-up included: lint, unit tests, integration tests on a real cluster.
# The detection matrix runs last, in a pytest of its own (tests/run_detection.py): a death of
# its process by signal fails the run, with core dumps on and the crashed threads' stacks
# printed from the core (no rerun: a rerun would hide a crash an operator would hit too). The
# rest of the suite runs with core dumps allowed and faulthandler on in every process too.
test: setup lint
	ulimit -c "$$(ulimit -Hc)" && PYTHONFAULTHANDLER=1 $(BIN)/pytest -m "not repro" --ignore=tests/integration/test_detection.py
	$(BIN)/python tests/run_detection.py

# Set-up first: the unit tests need its tools (promtool, helm, kubeconform, schemas), and a
# missing tool is an error, never a skip (tests/helpers.py: missing_tool).
unit: setup
	$(BIN)/pytest tests/unit

integration: setup
	$(BIN)/pytest tests/integration

# Benchmarks print figures; nothing is asserted. Run them on a quiet machine.
bench: setup
	$(BIN)/python bench/bench_checker.py
	$(BIN)/python bench/bench_monitor.py
	$(BIN)/python bench/bench_state.py
	$(BIN)/python bench/bench_key_call.py
	$(BIN)/python bench/bench_evidence.py
	$(BIN)/python bench/bench_series.py

# Not part of `make test`. Both use the local cluster (started here if it is not running; a
# running `make run` stack is fine) and run their own probes and monitor.
# A healthy soak: probe + monitor for SOAK_MINUTES, then the op count and the anomalies the
# monitor and `kmon check` found (exit 1 unless there are none).
SOAK_MINUTES ?= 30
soak: setup
	$(BIN)/kmon cluster up
	$(BIN)/kmon nemesis proxy up
	$(BIN)/kmon nemesis soak --minutes $(SOAK_MINUTES)

# Chaos: a seeded schedule of faults back to back for CHAOS_MINUTES (broker pauses, kills, a
# rolling restart, the controller, network faults, a probe and the monitor killed) with probes
# and a monitor process; exit 1 unless nothing was reported, every op is accounted for and the
# monitor was never blind past KmonMonitorStalled. CHAOS_FLAGS=--lossy mixes in the lossy
# faults (every proven loss must be reported, in kmon check's counts); --standalone runs the
# monitor on the local Spark standalone cluster and kills executors too. docs/nemesis.md#chaos
CHAOS_MINUTES ?= 30
CHAOS_SEED ?= 1
CHAOS_FLAGS ?=
chaos: setup
	$(BIN)/kmon cluster up
	$(BIN)/kmon nemesis proxy up
	$(BIN)/kmon nemesis chaos --minutes $(CHAOS_MINUTES) --seed $(CHAOS_SEED) $(CHAOS_FLAGS)

# Reproducers of third-party bugs that depend on a race (each names its bug and the
# workaround kmon uses; make test checks the workaround). Expected to fail: strict xfails.
repro: setup
	$(BIN)/pytest -m repro tests/integration

# The detection matrix (about 10 minutes): rewrites docs/detection-matrix.md.
matrix: setup
	$(BIN)/kmon cluster up
	$(BIN)/kmon nemesis proxy up
	$(BIN)/kmon nemesis matrix --out docs/detection-matrix.md

# tansu, a third-party Kafka-compatible broker under judgement (docs/brokers/tansu.md): cargo
# install of a pinned version with its storage engines into $KMON_CACHE, about 25 minutes on
# 2 cores once; `kmon cluster up --broker tansu --storage memory|sqlite|postgres` then runs it.
tansu: setup
	$(BIN)/python -c 'from kmon.local import tansu; tansu.install()'

# A third-party Kafka-compatible broker judged live (docs/brokers/): its rows per storage
# engine, op events and the monitor on the local Kafka stack (started as for the matrix).
# TANSU_PG_SCHEMA=<tansu's repository at v0.6.0>/etc/initdb.d/010-schema.sql adds the postgres
# engine's rows (its crate ships no schema).
BROKER ?= tansu
TANSU_PG_SCHEMA ?=
broker-report: tansu
	$(BIN)/kmon cluster up
	$(BIN)/kmon nemesis proxy up
	KMON_TANSU_PG_SCHEMA=$(TANSU_PG_SCHEMA) $(BIN)/kmon nemesis broker-report \
	    --broker $(BROKER) --out docs/brokers/$(BROKER)-runs.md
