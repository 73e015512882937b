# pal-slurm: `make demo` and `make test` do all set-up on a fresh Debian machine (run as root for apt).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PAL := $(VENV)/bin/pal
PYTEST_ARGS ?=
DB_SERVERS := tests/services/db-servers.sh
SLURM_CLUSTER := tests/services/slurm-cluster.sh
OTHER_SLURM := tests/services/other-slurm.sh
# Debian's chromium, for the HTML report's browser test (tests/report/test_report_browser.py)
BROWSER := tests/services/browser.sh
# the test cluster also runs slurmrestd (JWT) so the REST backend is tested for real; 0 turns it off
export PAL_TEST_SLURM_REST ?= 1
# 1: `make test` also runs the Slurm tests on the other Slurm versions, each in a Debian chroot of its
# release (Debian 12: trixie's 24.11 and sid's 26.05; Debian 13: bookworm's 22.05 and sid's); 0 skips
# them (and says so). PAL_TEST_OTHER_SUITES="sid": only those releases.
PAL_TEST_OTHER_SLURM ?= 1
# `make test-other-slurm SUITE=sid`: the release whose Slurm it tests (bookworm, trixie or sid; not the
# host's own); empty: the other stable release
SUITE ?= $(PAL_OTHER_SLURM_SUITE)

.PHONY: demo test test-fast mutation venv db-servers db-servers-stop sql bench replay clean help slurm-cluster slurm-cluster-stop test-slurm test-other-slurm browser

help:
	@echo "make demo   - venv + install + run the demo (SQLite, simulated GPU fleet, report, HTML)"
	@echo "make test   - everything CI runs: installs and starts PostgreSQL, MariaDB, the Slurm test cluster and chromium"
	@echo "              (for the HTML report's browser test), then the tests without Slurm, then the Slurm tests on this"
	@echo "              Slurm and, alongside, on the other two Slurm versions (of 22.05, 24.11, 26.05), each in a Debian"
	@echo "              chroot (PAL_TEST_OTHER_SLURM=0: not; PAL_TEST_OTHER_SUITES=sid: that one only)"
	@echo "make test-fast - pytest on SQLite only (no servers, no Slurm cluster)"
	@echo "make test-slurm - the real-Slurm tests only (installs and starts the test cluster, pytest -m slurm)"
	@echo "make test-other-slurm - the real-Slurm tests on another Slurm version in a Debian chroot (root); SUITE=sid: 26.05,"
	@echo "              SUITE=trixie: 24.11 (from Debian 12), SUITE=bookworm: 22.05 (from Debian 13); default: the other stable one"
	@echo "make slurm-cluster - install and start the Slurm test cluster (root; stop: make slurm-cluster-stop)"
	@echo "make browser - install chromium for the HTML report's browser test (root)"
	@echo "make mutation - mutation testing (mutmut) of the safety-critical modules against their closest tests;"
	@echo "              per-module scores, and every surviving mutant docs/mutation.md does not explain (exit 1)"
	@echo "              (MUTANTS='pal_slurm.placer.writer.*': only those; MUTATION_JOBS=N: N at a time, default 2)"
	@echo "make sql    - regenerate sql/*.sql from the migrations and the role definitions (pal_slurm/db/role_grants.py)"
	@echo "make bench  - run the benchmarks in bench/ (all of them; fails naming those that missed a target)"
	@echo "make replay - replay Sia-Philly workloads 1 and 4 on a real 16x4-GPU Slurm cluster, plain Slurm vs pal-slurm,"
	@echo "              with the simulator's prediction of each arm (3 shaken repetitions, about 2.5 hours, resumable; REPLAY_ARGS=... for bench/replay.py)"

$(VENV)/.installed: setup.cfg pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "pal-slurm needs Python >= 3.11")'
	@$(PYTHON) -m venv --help >/dev/null 2>&1 && $(PYTHON) -c 'import ensurepip' 2>/dev/null || { \
	  echo "installing python3-venv (apt)"; apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

demo: venv
	$(PAL) demo --dir pal-demo

db-servers:
	$(DB_SERVERS) install
	$(DB_SERVERS) start

db-servers-stop:
	$(DB_SERVERS) stop

# The Slurm test cluster (tests/services/slurm-cluster.sh): munge, slurmctld, 4 slurmd, fake GPUs.
slurm-cluster: venv
	$(SLURM_CLUSTER) install
	PAL_PYTHON=$(abspath $(VENV))/bin/python $(SLURM_CLUSTER) start

slurm-cluster-stop:
	$(SLURM_CLUSTER) stop

# chromium for tests/report/test_report_browser.py (root; quick when it is installed already)
browser:
	$(BROWSER) install

# tests/services/run-suites.sh: the tests without Slurm first, then the Slurm tests on this machine's
# Slurm and, side by side with them, on the other two Slurm versions in chroots (each has its own cluster)
test: venv db-servers slurm-cluster browser
	eval "$$($(DB_SERVERS) env)" && eval "$$($(SLURM_CLUSTER) env)" && \
	  PAL_REQUIRE_DB_SERVERS=1 PAL_REQUIRE_SLURM=1 PAL_REQUIRE_SLURM_REST=$(PAL_TEST_SLURM_REST) PAL_REQUIRE_BROWSER=1 \
	  PAL_REQUIRE_TOOLS=1 PAL_TEST_OTHER_SLURM=$(PAL_TEST_OTHER_SLURM) PAL_PYTEST="$(VENV)/bin/python -m pytest" \
	  tests/services/run-suites.sh $(PYTEST_ARGS)

# the same tests/slurm in a chroot of another release: SUITE=sid (26.05), else the other stable release
# (24.11 on a Debian 12 machine, 22.05 on Debian 13); the name reaches the script through its environment
test-other-slurm: export PAL_OTHER_SLURM_SUITE = $(SUITE)
test-other-slurm:
	$(OTHER_SLURM) install
	$(OTHER_SLURM) test

test-slurm: venv db-servers slurm-cluster
	eval "$$($(DB_SERVERS) env)" && eval "$$($(SLURM_CLUSTER) env)" && \
	  PAL_REQUIRE_DB_SERVERS=1 PAL_REQUIRE_SLURM=1 PAL_REQUIRE_SLURM_REST=$(PAL_TEST_SLURM_REST) $(VENV)/bin/python -m pytest -m slurm $(PYTEST_ARGS)

test-fast: venv
	$(VENV)/bin/python -m pytest -m "not slurm" $(PYTEST_ARGS)

# mutmut, configured in setup.cfg [mutmut] (docs/mutation.md): a fresh mutants/ each run, so a test
# added since the last run counts; niced, as it keeps MUTATION_JOBS cores busy for a while
MUTANTS ?=
MUTATION_JOBS ?= 2
$(VENV)/.mutation: $(VENV)/.installed
	$(VENV)/bin/python -m pip install -q -e '.[dev,mutation]'
	@touch $@

mutation: $(VENV)/.mutation
	rm -rf mutants
	nice -n 10 $(VENV)/bin/mutmut run --max-children $(MUTATION_JOBS) $(MUTANTS)
	$(VENV)/bin/python tests/mutation_scores.py

sql: venv
	for d in postgresql mysql sqlite; do $(PAL) db sql --dialect $$d > sql/schema-$$d.sql; done
	for d in postgresql mysql; do $(PAL) db roles --dialect $$d > sql/roles-$$d.sql; done

# Each benchmark prints a "target met" or "TARGET MISSED" line per target and exits 1 when one is
# missed (bench/pal_eval/targets.py). All of them run; `make bench` then fails naming every one that missed
# a target or failed. bench/placer_latency.py runs last, on the Slurm test cluster (root).
BENCHES := cli_startup import_speed placement_speed fidelity lambda_sweep sim_speed agent_overhead \
           profile_recovery placer_cycle history_refresh passive_accuracy passive_speed
bench: venv
	@failed=""; \
	for b in $(BENCHES); do \
	  echo "== bench/$$b.py"; \
	  $(VENV)/bin/python bench/$$b.py || failed="$$failed bench/$$b.py"; \
	done; \
	echo "== bench/placer_latency.py (the Slurm test cluster)"; \
	{ $(SLURM_CLUSTER) install && $(VENV)/bin/python bench/placer_latency.py; } || failed="$$failed bench/placer_latency.py"; \
	if [ -n "$$failed" ]; then echo "make bench: a target missed or a run failed in:$$failed" >&2; exit 1; fi; \
	echo "make bench: every target met"

# bench/replay.py: the real-Slurm evidence of docs/evaluation.md; its own cluster, ports and state dir
REPLAY_ARGS ?=
replay: venv
	$(SLURM_CLUSTER) install && $(VENV)/bin/python bench/replay.py --out replay-out $(REPLAY_ARGS)

clean:
	rm -rf $(VENV) pal-demo .pytest_cache build *.egg-info mutants
