# Two commands do everything on a fresh machine: `make run` and `make test`. See README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ORG ?= 0a000000-0000-4000-8000-000000000001
AGENT ?=
SCOPE ?=

.PHONY: help run stop scan import-repo import-bench admin psql events smoke soak clean test fuzz package stack token lint fmt bench load eval eval-all fit realtalk madial code-eval

help:
	@echo "make run    start the local stack, migrate, load the demo corpus, serve the API on 127.0.0.1, run the workers"
	@echo "make stop   stop what make run started"
	@echo "make scan [ARGS='--org <uuid>']   run the file scan now and print each organisation's report"
	@echo "make admin ARGS='jobs status'   memory-admin on the local stack (no sourcing, no second build)"
	@echo "make psql   psql on the local database, as its owner"
	@echo "make import-repo PROJECT=<uuid> [ORG=<uuid>] [NAME=auth-service] [REPO=<path>]   a git repository as anchored memories"
	@echo "make import-bench [IMPORT_BENCH_ARGS='--crates tokio,serde_json,regex']   crates of the cargo registry imported through make run's queues, beside the same chunks as plain memories"
	@echo "make events print the domain events published on the local bus since the last call"
	@echo "make smoke  with make run up: an ingest message on the queue becomes a retrievable memory, with its events"
	@echo "make soak [SOAK_BATCHES=60]   the lifecycle under an adversarial model and injected faults, then its checks"
	@echo "make clean  stop, then delete the local stack's database, virtualenv and logs (.local/)"
	@echo "make test   the whole test suite (starts the stack it needs)"
	@echo "make fuzz [FUZZ_CASES=20000]   every parser of outside input fed arbitrary input, many cases; the readership properties over 200 worlds"
	@echo "make package [ARCH=x86_64]   one Lambda zip per function and the MiniLM layer (target/lambda*)"
	@echo "make token ORG=<uuid> [AGENT=<uuid>] [SCOPE=memory:any_agent]   print a local bearer token"
	@echo "make bench [BENCH_ARGS='--sizes 10000 --queries 200']   latency and scale benchmark"
	@echo "make load [LOAD_ARGS='--load-clients 64 --http-seconds 30']   the API and MCP at saturation: a 100,000-memory tenant's flood beside a quiet tenant"
	@echo "make eval DATASET=<dir> [EVAL_ARGS='--run-dir out']      retrieval quality on a BEIR-layout dataset"
	@echo "make eval-all [EVAL_ARGS=...]    the four shapes: SciFact, REALTALK, MADial-Bench, code; one summary (.local/eval-all.md)"
	@echo "make fit        fit the learned ranking on the four shapes (shared/core/src/retrieval/ranker.json), with the leave-one-shape-out table"
	@echo "make code-eval [EVAL_ARGS=...]   code retrieval only: documented functions of chrono (Rust) and jinja2 (Python) as queries, and of serde_json imported as make import-repo imports it"
	@echo "make madial     convert ../shared/data/madial-bench/en to .local/madial-beir (then make eval DATASET=.local/madial-beir)"
	@echo "make realtalk   convert ../shared/data/realtalk to .local/realtalk-beir (then make eval DATASET=.local/realtalk-beir)"

run:
	@scripts/run.sh start

stop:
	@scripts/run.sh stop

scan:
	@scripts/run.sh scan $(ARGS)

admin:
	@scripts/run.sh admin $(ARGS)

IMPORT_BENCH_ARGS ?=
LOAD_ARGS ?=
import-bench:
	@scripts/run.sh import-bench $(IMPORT_BENCH_ARGS)

psql:
	@scripts/run.sh psql

import-repo:
	@scripts/run.sh import-repo --org $(ORG) --project $(PROJECT) $(if $(NAME),--name $(NAME)) $(REPO)

events:
	@scripts/run.sh events

smoke:
	@scripts/smoke.sh

soak:
	@scripts/soak.sh

clean: stop
	@scripts/stack.sh clean

test:
	@scripts/test.sh

FUZZ_CASES ?= 20000
# The fuzz tests with many cases, and the readership properties over 200 worlds (240,000 principal-memory cases).
fuzz:
	@PROPTEST_CASES=$(FUZZ_CASES) MEMORY_PROPERTY_WORLDS=200 scripts/test.sh -- fuzz_ properties::

stack:
	@scripts/stack.sh up

package:
	@scripts/package.sh

token:
	@scripts/run.sh token "$(ORG)" "$(AGENT)" "$(SCOPE)"

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

BENCH_ARGS ?=
EVAL_ARGS ?=
DATASET ?=
REALTALK ?= ../shared/data/realtalk

bench:
	@scripts/perf.sh memory-bench $(BENCH_ARGS)

# The 1,000,000-memory corpus (its largest tenant holds 100,000) is loaded once and kept (--reuse).
load:
	@scripts/perf.sh memory-bench --load --sizes 1000000 --reuse --http-seconds 30 --cold-starts 0 $(LOAD_ARGS)

eval:
	@test -n "$(DATASET)" || { echo "usage: make eval DATASET=<dir with corpus.jsonl, queries.jsonl, qrels/test.tsv>"; exit 2; }
	@scripts/perf.sh memory-eval --dataset "$(DATASET)" $(EVAL_ARGS)

realtalk:
	@scripts/perf.sh realtalk-to-beir --input "$(REALTALK)" --output .local/realtalk-beir

MADIAL ?= ../shared/data/madial-bench/en
madial:
	@scripts/perf.sh madial-to-beir --input "$(MADIAL)" --output .local/madial-beir

eval-all:
	@EVAL_ARGS="$(EVAL_ARGS)" scripts/eval-all.sh

# The learned ranking's weights, fitted on every shape of the development suite (a reviewed file).
fit:
	@EVAL_STRATEGIES=pipeline EVAL_ARGS="--fit shared/core/src/retrieval/ranker.json $(EVAL_ARGS)" scripts/eval-all.sh

code-eval:
	@EVAL_ARGS="$(EVAL_ARGS)" scripts/eval-all.sh chrono jinja2 serde_json
