# Both entry points create .venv on first use; nothing else needs to be installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test faults lint bench bench-streams bench-fleet bench-ingress bench-throttle bench-journal bench-budgets bench-langgraph bench-console bench-pictures bench-snapshots bench-migrate bench-encryption bench-prune soak slow clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/stalwart demo

# The suite in TEST_WORKERS processes (pytest-xdist; tests/parallel.py says how they share it).
# Four on two cores: the suite waits far more than it computes (four took 551-555 s of tests
# where three took 625 s and five 640 s, in one quiet sitting). The tests that start worker
# processes on PostgreSQL run one at a time (tests/parallel.py), so four test processes stay
# under PostgreSQL's default 100 connections (56 at the peak of a run); see
# docs/performance.md, "The test suite".
TEST_WORKERS ?= 4
# The suite starts hundreds of Python processes (the CLI, worker processes, the docs' examples),
# each importing stalwart: with PYTHONDONTWRITEBYTECODE set in the environment (some images set
# it) every one compiles the package from source again, 0.75 s against 0.4 s from the cached
# bytecode. The suite's runs write it (into the ignored __pycache__ folders).
TESTENV := PYTHONDONTWRITEBYTECODE=

test: lint
	$(TESTENV) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The fault lab (tests/faults/lab.py, docs/reliability.md): workers in network namespaces cut
# off, slowed down and partitioned from a PostgreSQL of the lab's own, which it restarts; skewed
# clocks (libfaketime), a full disk under SQLite. Slow variants included (the minute of latency);
# `make test` runs the short ones. Needs root, iproute2, iptables and faketime (.ci/run installs
# them); elsewhere the tests skip with one line saying what to install.
faults: $(STAMP)
	$(TESTENV) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m faults tests/faults

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: $(STAMP)
	$(BIN)/python bench/step_overhead.py

# Worker processes on SQLite and PostgreSQL (STALWART_TEST_POSTGRES_URL, else a local server;
# its rows are skipped when none answers). Takes a few minutes.
bench-fleet: $(STAMP)
	$(BIN)/python bench/fleet.py

# Messages/s from a broker (RabbitMQ, NATS JetStream, Redis on 127.0.0.1) into committed runs,
# one worker on SQLite, against the broker's own publish rate (bench/ingress.py).
bench-ingress: $(STAMP)
	$(BIN)/python bench/ingress.py

# 50 agents on 2 worker processes wait out a provider's 5 s throttle window (a fake
# OpenAI-compatible server, the openai SDK, Retry.llm()), on SQLite and on PostgreSQL as
# bench-fleet finds it. Exits 1 if a run does not complete. Takes about half a minute.
bench-throttle: $(STAMP)
	$(BIN)/python bench/throttle.py

# What a conversation agent's journal stores against its conversation, at 50 to 400 turns, on
# SQLite and on PostgreSQL as bench-fleet finds it (stored bytes and on disk after VACUUM).
bench-journal: $(STAMP)
	$(BIN)/python bench/journal_growth.py

# What a budget costs a 10,000-step run: per step, the spend read per invocation, and a resume,
# with a budget and without, on SQLite and on PostgreSQL as bench-fleet finds it. Takes about
# five minutes (most of it on PostgreSQL).
bench-budgets: $(STAMP)
	$(BIN)/python bench/budgets.py

# What a LangGraph chat thread stores with StalwartSaver against LangGraph's SqliteSaver, at 50
# to 200 turns, measured in the same run. Takes about a minute.
bench-langgraph: $(STAMP)
	$(BIN)/python bench/langgraph_growth.py

# Every read of the console and the API (run lists and counts, run pages and journal pages,
# approvals, queues, workers, breakers, schedules, shared keys; Python API and stalwart ui over
# HTTP) on 100,000 runs and 1,000,000 journal entries, on SQLite (seeded once, cached in
# bench/.cache) and on PostgreSQL as bench-fleet finds it, against the 200 ms budget; exits 1
# if a read query scans a growing table without an index or filters without its filter's
# index. Takes about five minutes on a quiet machine.
bench-console: $(STAMP)
	$(BIN)/python bench/console_reads.py

# The console's pictures: the 1,000-entry run timeline's draw in headless Chromium (Playwright's
# performance timings, goal < 200 ms) and GET /api/v1/stats on bench-console's 100,000-run store
# (1h, 24h, 7d; goal p95 <= 200 ms) on SQLite and on PostgreSQL as bench-fleet finds it. A few
# minutes (seeding the SQLite cache the first time, about three more).
bench-pictures: $(STAMP)
	$(BIN)/python bench/console_pictures.py

# Workspace snapshots: 1 GiB in 1,000 files under /tmp (deleted after) taken, restored and taken
# again after 1% changed, on SQLite and PostgreSQL (STALWART_TEST_POSTGRES_URL, else a local
# server): throughput against a bare copy, what the second snapshot stores and takes, peak RSS.
bench-snapshots: $(STAMP)
	$(BIN)/python bench/snapshots.py

# Prune of the console store (100,000 runs, 1,000,000 journal entries, seeded by
# bench/console_seed.py, the SQLite file cached in bench/.cache) beside another process claiming
# a run every 5 ms, on SQLite and on PostgreSQL (STALWART_TEST_POSTGRES_URL, else a local
# server): runs and entries deleted a second, the collector's time, and the longest claim
# during the prune against the idle store's (goal: no more than 50 ms longer).
bench-prune: $(STAMP)
	$(BIN)/python bench/prune.py
# Durable streams: emit throughput for one run and for 100 runs at once (with the stream-only
# transactions a worker spends on them) and emit -> reader latency across processes, each
# beside a floor measured in the same run; on SQLite, and on PostgreSQL as bench-fleet finds
# it. Takes about half a minute.
bench-streams: $(STAMP)
	$(BIN)/python bench/streams.py

# What encryption at rest costs a step: runs of 2,000 steps of small payloads and of 300 steps
# of a growing conversation (kept apart piece by piece), with a keyring and without, in the
# same run, on SQLite and PostgreSQL as bench-fleet finds it; target ratio <= 1.15. About five
# minutes.
bench-encryption: $(STAMP)
	$(BIN)/python bench/encryption.py

# stalwart migrate of bench-console's store (100,000 runs, 1,000,000 journal entries, cached in
# bench/.cache) from SQLite into a fresh PostgreSQL schema (STALWART_TEST_POSTGRES_URL, else a
# local server): entries/s against a bare SELECT + COPY of the same rows, goal 20,000 entries/s.
# Takes a few minutes (seeding the cache the first time, about two more).
bench-migrate: $(STAMP)
	$(BIN)/python bench/migrate.py

# The chaos soak for 10 minutes (tests/faults/test_soak.py, docs/reliability.md: 4 workers over
# PostgreSQL, a mixed workload, SIGKILL, SIGSTOP, partitions and database restarts, then the
# history checker); `make test` runs it for 2. Prints the faults, runs, effects and violations.
SOAK_SECONDS ?= 600
soak: $(STAMP)
	$(TESTENV) STALWART_SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python -m pytest -s -p no:cacheprovider tests/faults/test_soak.py

# The long tests (the 500-run fleet chaos on PostgreSQL), which `make test` leaves out.
slow: $(STAMP)
	$(TESTENV) $(BIN)/python -m pytest -m slow -s

clean:
	rm -rf $(VENV) .stalwart .pytest_cache .mypy_cache .ruff_cache
