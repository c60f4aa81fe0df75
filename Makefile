# brokergroup — the commands a user and CI run.  `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PACKAGES := $(wildcard broker_image/habroker operator/brokergroup_operator pipeline/brokergroup_spark)
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup lint unit test bench demo clean

help:  ## list the targets
	@grep -hE '^[a-z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 18

setup: $(VENV)/.installed  ## create .venv and install the project with all extras

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,operator,spark]'
	touch $@

lint: setup  ## ruff and mypy over every package
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy $(PACKAGES)

unit: setup  ## unit and integration tests (real brokers on 127.0.0.1)
	$(PY) -m pytest -q tests

test: lint unit  ## everything CI runs

bench: setup  ## benchmarks; results land in bench/results/
	$(PY) -m bench.run

demo: setup  ## the main job: a master + slave group on 127.0.0.1, produce and consume
	$(PY) -m habroker.demo

clean:  ## remove the virtualenv and caches (not the cluster)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
