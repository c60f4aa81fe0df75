# brokergroup — the commands a user and CI run.  `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PACKAGES := $(wildcard broker_image/habroker operator/brokergroup_operator pipeline/brokergroup_spark)
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup java-setup promtool lint unit test bench bench-setup demo demo-local fuzz clean

help:  ## list the targets
	@grep -hE '^[a-z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 18

setup: $(VENV)/.installed  ## create .venv and install the project with all extras

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,operator,spark]'
	touch $@

java-setup:  ## real Apache RocketMQ 4.9.7/5.3.1 jars (Maven Central) and our Java driver, for tests/interop
	bash interop/install.sh

promtool:  ## Prometheus's promtool from the Go module proxy into e2e/.cluster/bin, for the alerting-rule tests
	bash tools/build-promtool.sh

lint: setup  ## ruff and mypy over every package
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy $(PACKAGES)

# the 15 slowest tests of each pass are listed (a suite that creeps toward CI's limit shows where)
PYTEST_ARGS ?= --durations=15
unit: setup cluster-deps java-setup  ## unit and integration tests (real brokers, a real apiserver, helm, promtool, real RocketMQ); the cluster binaries build meanwhile
	PY=$(PY) bash tools/unit-tests.sh $(PYTEST_ARGS)

check: lint unit  ## everything but the cluster: lint, unit, integration, chart and apiserver tests

test: check e2e  ## everything CI runs: check, then the end-to-end suite on a real cluster

bench: setup bench-setup java-setup  ## benchmarks vs Redis, RocketMQ 4.9.7 (Java) and the machine's limits: bench/results/, docs/benchmarks.md
	$(PY) -m bench.run $(BENCH_ARGS)

bench-setup:  ## install the benchmark peer (Debian's redis-server) if missing
	bash bench/setup_redis.sh

demo: setup java-setup  ## the main job: cluster (KUBECONFIG or local), images, helm install, a group, produce+consume
	$(PY) -m e2e.demo $(DEMO_ARGS)

demo-local: setup  ## a master + slave on 127.0.0.1, no Kubernetes: produce and consume
	$(PY) -m habroker.demo

FUZZ_SECONDS ?= 300
fuzz: setup  ## coverage-guided fuzzing of the frame parsers, FUZZ_SECONDS (300) per harness; corpus in .fuzz-corpus/
	$(PY) -m fuzz.campaign --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:  ## remove the virtualenv and caches (not the cluster)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# End-to-end: a real multi-node cluster in its own network namespaces (see docs/e2e.md). `make e2e` runs the suite;
# cluster-up / images / cluster-down for working against a running cluster.
include e2e/e2e.mk
e2e: setup java-setup
