# gpuops.sglang - two commands on a fresh machine:
#   make demo   relaunch the embedded default (a simulated 8-GPU host on this machine)
#   make test   every test: lint, ansible-test sanity, unit + integration, molecule through real LXC
# and the inner loop while changing code:
#   make check  ruff, ansible-lint, unit, simulator and the integration tests that need no LXC
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV := .venv
BIN := $(VENV)/bin
WORK := .work
SIM_HOST := $(WORK)/simhost
COLLECTION_COPY := build/ansible_collections/gpuops/sglang

.PHONY: demo test check venv lint sanity pytest pytest-parallel pytest-lxc test-lanes lane-checks \
	molecule rig-setup bench build sim-host gpu-wheels clean
.DEFAULT_GOAL := test

venv: $(VENV)/.installed
$(VENV)/.installed: requirements/requirements.txt requirements/constraints.txt scripts/find-python.sh
	python=$$(scripts/find-python.sh); \
	[ -x $(BIN)/python ] || "$$python" -m venv $(VENV); \
	$(BIN)/python -m pip install -q --upgrade pip; \
	$(BIN)/python -m pip install -q -r requirements/requirements.txt -c requirements/constraints.txt
	touch $@

# The simulated GPU host of inventories/local: 8 fake H200s, a hybrid Mamba model directory and the simulated SGLang
# installed (a dist-info of the simulator's default version, the newest, on the servers' PYTHONPATH: sglang_env).
sim-host: venv
	$(BIN)/python tests/simulator/fakegpu.py init $(SIM_HOST)/gpu --count 8
	$(BIN)/python tests/simulator/sglang_sim.py --make-model $(SIM_HOST)/models/Qwen3-Next-80B-A3B-Instruct \
	  --arch Qwen3NextForCausalLM --hybrid-mamba --shards 8
	$(BIN)/python tests/simulator/sglang_sim.py --make-site $(SIM_HOST)/site

demo: sim-host
	$(BIN)/ansible-playbook playbooks/relaunch.yml

# ansible-lint prepares <repo>/.ansible (the collection under test installed there): one run at a time, also with
# the AWX test's lint in the parallel lane (tests/integration/test_awx_config.py takes the same lock).
ANSIBLE_LINT_LOCK := $(WORK)/ansible-lint.lock
# pycodestyle with ansible-test's own pep8 settings: sanity's pep8 failure found in seconds by `make check`.
PEP8_IGNORE = $$(grep -v '^\#' $(VENV)/lib/python3*/site-packages/ansible_test/_util/controller/sanity/pep8/current-ignore.txt | paste -sd, | sed 's/,,*/,/g; s/^,//; s/,$$//')
lint: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pycodestyle --max-line-length 160 --ignore "$(PEP8_IGNORE)" plugins tests scripts bench
	@mkdir -p $(WORK)
	flock $(ANSIBLE_LINT_LOCK) $(BIN)/ansible-lint --profile production

# ansible-test wants the collection under ansible_collections/<ns>/<name>; copy the files git knows about
# into a repository of their own (inside ours, build/ is ignored and ansible-test would see no files).
sanity: venv
	rm -rf build/ansible_collections
	mkdir -p $(COLLECTION_COPY)
	git ls-files -co --exclude-standard -z | grep -zv '^collections/' | xargs -0 cp --parents -t $(COLLECTION_COPY)
	cd $(COLLECTION_COPY) && git init -q && git add -A
	$(BIN)/python scripts/ansible_test_get_pip.py
	cd $(COLLECTION_COPY) && PATH=$(CURDIR)/$(BIN):$$PATH ansible-test sanity --local --requirements --python 3.12

# tests/rig and molecule/ need Debian packages (lxc, debootstrap, openssh-server, ...) and a cached base
# container; only root can provide them, elsewhere those tests skip with the reason.
rig-setup:
	if [ "$$(id -u)" = 0 ]; then $(TIMED) rig-setup python3 tests/rig/rig.py setup; \
	else echo "not root: LXC rig tests will skip"; fi

# Two pytest tiers (tests/conftest.py marks them): the tests that need the LXC rig run one after another on one
# shared rig (only one rig fits a machine); every other test runs in parallel workers (pytest-xdist), a test file
# per worker (its module fixtures once), handed out in the order of tests/conftest.py: the heaviest tiers first, not
# pytest-xdist's fewest-tests-last (which left the slowest integration files to the end). PYTEST_ARGS adds pytest
# options to both (e.g. -x, or -p random_order --random-order); a -k that selects nothing in one of them fails it
# (pytest's exit 5).
PYTEST := env PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest
# make check: 3 workers keep 2 cores busy through the tests' waits. make test: 2, so that the serial LXC lane beside
# them gets a third of the CPU instead of a quarter - it was the last to end (22:29 against 19:53).
PYTEST_WORKERS ?= 3
TEST_WORKERS ?= 2
REPORT := $(WORK)/test-report
TIMED := scripts/timed.sh $(REPORT)

pytest: pytest-parallel pytest-lxc

pytest-parallel: venv
	$(TIMED) pytest-parallel $(PYTEST) -m "not lxc" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --junitxml=$(REPORT)/parallel.xml $(PYTEST_ARGS) tests

pytest-lxc: venv rig-setup
	$(TIMED) pytest-lxc $(PYTEST) -m lxc -p no:xdist --junitxml=$(REPORT)/lxc.xml $(PYTEST_ARGS) tests

# Only the molecule scenarios (default, faults, change) through real LXC and proxmox_pct_remote.
molecule: venv rig-setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest tests/integration/test_molecule.py

# Not part of `make test` (tests/integration/test_bench_smoke.py runs one tiny scenario of it): ours and the
# baselines of bench/baselines/ on the same simulated fleets, locally and - as root with LXC - through pct on the
# rig with the scaling series; writes bench/results/latest.{md,json,png}, appends to bench/results.md. Then the
# rolling relaunch behind the real sglang-router under load (bench/rolling.py: bench/results/rolling.{md,json}).
# BENCH_ARGS adds options of `python -m bench --help` (e.g. --reps, --only to fit a time budget), ROLLING_ARGS
# those of `python -m bench.rolling --help`. Then the fleet series: one run over 1, 4, 16, 32 simulated hosts on this
# machine (bench/fleet.py: bench/results/fleet.{md,json}; FLEET_ARGS: `python -m bench.fleet --help`).
bench: venv rig-setup
	$(BIN)/python -m bench --scaling 1,2,4,8 --history bench/results.md $(BENCH_ARGS)
	$(BIN)/python -m bench.rolling $(ROLLING_ARGS)
	$(BIN)/python -m bench.fleet $(FLEET_ARGS)

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path build/

# Three lanes side by side, their lines interleaved as they come, each prefixed with its step (scripts/timed.sh):
# lint + sanity + build, the parallel tests, the LXC tests
# (pytest-lxc: rig setup beside the venv, then the tests). Then the slowest tests and the time per tier and step
# (scripts/test_report.py; docs/testing.md: tiers, lanes, budget). `all` is the wall time of the lanes, venv included.
test:
	rm -rf $(REPORT)
	mkdir -p $(REPORT)
	start=$$(date +%s); status=0; $(MAKE) --no-print-directory -k -j3 test-lanes PYTEST_WORKERS=$(TEST_WORKERS) || status=$$?; \
	  echo "$$(( $$(date +%s) - start )) $$status" > $(REPORT)/all.time; \
	  $(BIN)/python scripts/test_report.py $(REPORT) || true; exit $$status

test-lanes: lane-checks pytest-parallel pytest-lxc

lane-checks: venv
	$(TIMED) lint $(MAKE) --no-print-directory lint
	$(TIMED) sanity $(MAKE) --no-print-directory sanity
	$(TIMED) build $(MAKE) --no-print-directory build

# The inner loop: everything that needs neither LXC nor ansible-test, in parallel workers.
check: venv
	rm -rf $(REPORT)
	mkdir -p $(REPORT)
	$(TIMED) lint $(MAKE) --no-print-directory lint
	status=0; $(MAKE) --no-print-directory pytest-parallel || status=$$?; \
	  $(BIN)/python scripts/test_report.py $(REPORT) || true; exit $$status

# ansible-core and its dependencies as wheels for tests/gpu/run-on-device.sh on a GPU machine without network.
gpu-wheels: venv
	$(BIN)/pip download -q ansible-core==$$(sed -n 's/^ansible-core==//p' requirements/constraints.txt) \
	  --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d tests/gpu/wheels

clean:
	rm -rf build $(WORK)
