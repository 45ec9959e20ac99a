# flask-tuning-lab: `make lab` runs the staged lab, `make test` the test suite.
# Both run `setup` first, which is idempotent.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The book's eventlet stages run from an environment of their own (gunicorn 25.3 with
# eventlet; gunicorn 26 removed that worker): benchmarks/servers.py ENVIRONMENTS.
VENV_EVENTLET := .venv-eventlet
# JupyterLab, to open notebooks/ by hand (`make notebooks`): out of .venv, which Locust
# measures from; its kernel is .venv's Python.
VENV_NOTEBOOKS := .venv-notebooks
# Each venv installs from its lock (every package pinned with its PyPI hash), made from
# its requirements file by `make lock`; setup/locks.py refuses a stale one.
LOCKS := requirements.lock requirements-eventlet.lock
# The installer and the lock tool, pinned so two boxes install alike. uv lives in a venv
# of its own (.venv-lock), never in the measured ones.
PIP_VERSION := 26.3
UV_VERSION := 0.13.9
VENV_LOCK := .venv-lock
# One lock for Python 3.11 to 3.13 and every platform (markers), compiled against the
# index this box is configured with (setup/package_sources.py: pip's, else uv's), its
# files' hashes; no uv.toml is read (--no-config). A mirror that lists the index's files
# gives the same lock (tests/lab/test_locks.py).
UV_COMPILE := $(VENV_LOCK)/bin/uv pip compile --quiet --no-config --universal --generate-hashes \
  --python-version 3.11 --custom-compile-command "make lock"
# Lab knobs (see README): which stages (a set: main, gevent, scale-out, failures,
# today, everything; or keys), seconds measured per stage, how many times
# each stage runs (interleaved), Locust users. LAB_ARGS: more `lab run` options, e.g.
# LAB_ARGS=--strict, which makes `make lab` fail (the lab exits 3) when a check fails;
# the lab's last line names every failed check either way.
STAGES ?= main
DURATION ?= 30
REPEATS ?= 1
USERS ?= 50
LAB_ARGS ?=

# Debian/Ubuntu packages the lab runs for real: Redis, Nginx, `ip` (network
# namespaces), `netstat`, `ps`/`sysctl`, `taskset` (CPU sets), `curl` (the
# exercises use it), `wrk` (a second load tool, to cross-check Locust).
SYSTEM_TOOLS := redis-server:redis-server nginx:nginx-light ip:iproute2 netstat:net-tools sysctl:procps taskset:util-linux curl:curl wrk:wrk
# Headless Chromium with its driver: the Sockets tab's screenshots and the browser test
# (tests/lab/test_ui.py). Installed where apt has them as packages (Debian); Ubuntu
# ships Chromium as a snap, which a container or a minimal VM may not run: there setup
# goes on without them and says what is skipped.
BROWSER_TOOLS := chromium:chromium chromedriver:chromium-driver
BROWSER_SKIPPED := the Sockets tab's screenshots and the browser test (tests/lab/test_ui.py) are skipped
# Prometheus and Debian's exporters, for `lab run/up --metrics` (benchmarks/run/prometheus.py),
# installed as the browser is, where apt has them. Each Debian package starts a service as
# it is installed and at boot: setup/services-off.sh installs them with those stopped and
# disabled (the lab runs its own, per stage, on its hosts).
METRICS_TOOLS := prometheus:prometheus prometheus-nginx-exporter:prometheus-nginx-exporter prometheus-redis-exporter:prometheus-redis-exporter
METRICS_SKIPPED := lab --metrics and its test (tests/lab/test_metrics_stack.py) are skipped
# hdrhistogram has wheels for x86_64 only: elsewhere (an arm64 laptop's VM or image) pip
# builds it from its sdist, with gcc and the Python headers (setup/arm64_wheels.py).
MACHINE ?= $(shell uname -m)
HEADERS_CHECK = $(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' 2>/dev/null
BUILD_TOOLS_CHECK = $(if $(filter x86_64,$(MACHINE)),,command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; $(HEADERS_CHECK) || missing="$$missing python3-dev";)

.PHONY: setup install box-check preflight system-packages lock notebooks arm64-check test test-slow test-fast lint lab book clean image image-test vm-test

# `setup` = what installs + what checks the box. An image build runs `make install`
# alone (a build step gets no network namespace); the box check then runs when the
# lab starts, since `lab` and `test` run `setup`.
setup: install box-check

# the two environments side by side: each pip is one process, the box has two cores
install: preflight system-packages
	@$(MAKE) --no-print-directory -j2 $(VENV)/.installed $(VENV_EVENTLET)/.installed

# Before anything is installed: Linux, root, apt-get, the distribution, a Python >= 3.11
# (PYTHON=...), venvs made by that Python, and locks that match their requirements
# files. One line with the fix when not.
preflight:
	@MAKE_GOAL="$(firstword $(MAKECMDGOALS) setup)" PYTHON_GIVEN="$(filter command line environment,$(origin PYTHON))" \
	  sh setup/preflight.sh box $(PYTHON)
	@$(PYTHON) setup/locks.py $(LOCKS)

# Once iproute2 is in: a network namespace and a veth pair can be made (and are deleted).
box-check: install
	@sh setup/preflight.sh netns

system-packages: preflight
	@missing=""; browser=""; metrics=""; \
	for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	for pair in $(BROWSER_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || browser="$$browser $$pkg"; \
	done; \
	for pair in $(METRICS_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || metrics="$$metrics $$pkg"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	$(BUILD_TOOLS_CHECK) \
	if [ -n "$$missing$$browser$$metrics" ]; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    [ -z "$$missing" ] || { echo "setup: missing system packages (Debian's names):$$missing; no apt-get here: install them with this system's package manager, then run make again"; exit 1; }; \
	    [ -z "$$browser" ] || echo "setup: no$$browser here, and no apt-get: going on without it; $(BROWSER_SKIPPED)"; \
	    [ -z "$$metrics" ] || echo "setup: no$$metrics here, and no apt-get: going on without them; $(METRICS_SKIPPED)"; \
	    exit 0; \
	  elif [ "$$(id -u)" != 0 ]; then \
	    echo "setup: missing system packages:$$missing$$browser$$metrics; install them, then run make again: sudo apt-get install$$missing$$browser$$metrics"; \
	    exit 1; \
	  fi; \
	  apt-get update -qq || exit 1; \
	  unknown=""; \
	  for pkg in $$browser; do \
	    apt-cache show --no-all-versions $$pkg 2>/dev/null | grep -q '^Version:' && missing="$$missing $$pkg" || unknown="$$unknown $$pkg"; \
	  done; \
	  [ -z "$$unknown" ] || echo "setup: no apt package$$unknown here (Ubuntu ships Chromium as a snap): going on without it; $(BROWSER_SKIPPED)"; \
	  known=""; \
	  for pkg in $$metrics; do \
	    apt-cache show --no-all-versions $$pkg 2>/dev/null | grep -q "^Version:" && known="$$known $$pkg"; \
	  done; \
	  [ -z "$$metrics" ] || [ "$$known" = "$$metrics" ] || echo "setup: no apt package for some of$$metrics here: going on without them; $(METRICS_SKIPPED)"; \
	  if [ -n "$$missing" ]; then \
	    echo "setup: installing$$missing with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$$missing; \
	  fi; \
	  if [ -n "$$known" ] && [ "$$known" = "$$metrics" ]; then \
	    echo "setup: installing$$known with apt-get, their services left stopped (setup/services-off.sh)"; \
	    sh setup/services-off.sh$$known || exit 1; \
	  fi; \
	fi

# The current stack (everything but the eventlet servers). Plain pip only adds: what a
# venv holds and its lock does not (eventlet in a .venv from before the split, JupyterLab
# from before .venv-notebooks) is uninstalled after. COMPILE_PYC=--no-compile: Python
# compiles a module the first time it is imported instead; pip would compile all 8,232
# of .venv's, most never imported (scipy, pandas, the notebooks' tools): 37 s here, 13
# without. The image compiles them (Containerfile): each container would compile anew.
# (Not a PIP_ name: pip reads every PIP_* variable of its environment as an option.)
COMPILE_PYC ?= --no-compile
$(VENV)/.installed: requirements.lock requirements.txt requirements-app.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet $(COMPILE_PYC) --require-hashes -r requirements.lock
	$(PY) setup/locks.py --leftovers requirements.lock | xargs -r $(PY) -m pip uninstall --quiet --yes
	$(PY) -m pip check
	@touch $@

$(VENV_EVENTLET)/.installed: requirements-eventlet.lock requirements-eventlet.txt requirements-app.txt
	@test -x $(VENV_EVENTLET)/bin/python || $(PYTHON) -m venv $(VENV_EVENTLET)
	$(VENV_EVENTLET)/bin/python -m pip install --quiet pip==$(PIP_VERSION)
	$(VENV_EVENTLET)/bin/python -m pip install --quiet $(COMPILE_PYC) --require-hashes -r requirements-eventlet.lock
	$(VENV_EVENTLET)/bin/python setup/locks.py --leftovers requirements-eventlet.lock | xargs -r $(VENV_EVENTLET)/bin/python -m pip uninstall --quiet --yes
	$(VENV_EVENTLET)/bin/python -m pip check
	@touch $@

# JupyterLab in a venv of its own; the notebooks' kernel ("python3") is .venv's Python,
# which has ipykernel and what the notebooks import.
notebooks: $(VENV)/.installed $(VENV_NOTEBOOKS)/.installed

$(VENV_NOTEBOOKS)/.installed: requirements-notebooks.lock requirements-notebooks.txt
	@$(PYTHON) setup/locks.py requirements-notebooks.lock
	@test -x $(VENV_NOTEBOOKS)/bin/python || $(PYTHON) -m venv $(VENV_NOTEBOOKS)
	$(VENV_NOTEBOOKS)/bin/python -m pip install --quiet pip==$(PIP_VERSION)
	$(VENV_NOTEBOOKS)/bin/python -m pip install --quiet --require-hashes -r requirements-notebooks.lock
	$(VENV_NOTEBOOKS)/bin/python -m pip check
	$(PY) -m ipykernel install --prefix $(VENV_NOTEBOOKS) --name python3 --display-name "Python 3 (.venv)"
	@touch $@

# Refresh every lock from its requirements file (uv keeps what is locked where the
# requirements still allow it). Needs the box's package index; commit the locks it writes.
lock:
	@$(VENV_LOCK)/bin/uv --version 2>/dev/null | grep -q "^uv $(UV_VERSION) " || { \
	  $(PYTHON) -m venv $(VENV_LOCK) && $(VENV_LOCK)/bin/pip install --quiet uv==$(UV_VERSION); }
	@index=$$($(VENV_LOCK)/bin/python setup/package_sources.py index) || exit 1; \
	for lock in $(LOCKS) requirements-notebooks.lock; do \
	  echo "lock: $${lock%.lock}.txt -> $$lock"; \
	  $(UV_COMPILE) --default-index "$$index" $${lock%.lock}.txt -o $$lock || exit 1; \
	done

# Every locked package has a Linux aarch64 wheel for CPython 3.11, or an sdist that
# builds with gcc and Python's headers (asks the box's package index, about 10 s; CI runs it).
arm64-check: $(VENV)/.installed
	$(PY) -m setup.arm64_wheels $(LOCKS) requirements-notebooks.lock

# Four pytest processes, a test file each at a time (pytest-xdist): most tests wait on
# servers they started, and every test judges only what it started, so four files run
# side by side (with three the 2 cores were 86% busy over a fresh clone's suite). The
# lab's checks judge behaviour, which a busy box does not change (the full run's checks
# passed with four CPU-bound jobs beside it). --no-loadscope-reorder: the files in
# tests/conftest.py's order, the longest first (xdist would start the files with the
# most tests first: the full run's began 14 s in, behind test_docs.py).
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The whole suite, lint first (CI runs this). Its ten slowest tests are listed at the end,
# so the next slow test is seen when it lands; pytest prints that list before its closing
# "N passed in ..." line, which stays the last.
# TESTS: a selection of pytest's, the whole suite when empty (`make test TESTS="-m slow"`:
# the tests that run load).
TESTS ?=
test: lint
	$(PY) -m pytest $(PYTEST_PARALLEL) --durations=10 $(TESTS)

# The whole suite on a box half as fast as this one: in a CPU cgroup whose quota is half
# of this box's CPU time (setup/slow-box.sh; SHARE=33 for a third). Root. CI runs
# `make test-slow TESTS="-m slow"`: the tests that run load, whose checks a slower box
# could fail if they read its speed (.ci/run).
# Three pytest processes there, as the half-speed runs were made with (a fourth adds to
# the contention a slow box already has).
test-slow:
	sh setup/slow-box.sh $(MAKE) test PYTEST_WORKERS=3

# The quick loop while editing: no load runs.
test-fast: setup
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

lab: setup
	$(PY) -m benchmarks.lab run --stages $(STAGES) --duration $(DURATION) --users $(USERS) --repeats $(REPEATS) $(LAB_ARGS)

# The book's benchmark (/kv, 100 clients, the server on one core) beside its figures.
book: setup
	$(PY) -m benchmarks.lab book --duration $(DURATION) $(LAB_ARGS)

# The image (Containerfile), built with podman FROM a Debian 12 base made here by
# debootstrap (no registry): `image` builds it, `image-test` builds it and runs the
# CPU count, the box check, a short lab (--strict), `lab up 0` through a port mapping
# and test-fast inside it, with Docker's 64 MB /dev/shm (docs/image.md). SUITE=trixie:
# on Debian 13, the main line; ARCH=arm64: built and run under qemu-user. Root;
# installs podman and debootstrap (and qemu-user-static for ARCH=arm64) when missing.
image:
	bash setup/image-test.sh --build-only

image-test:
	bash setup/image-test.sh

# A real VM booted from setup/cloud-init.yaml as the VM route's user boots one, and the
# VM pages' commands typed in it as its default user (setup/vm-test.sh): a Debian 12
# cloud disk made here by debootstrap (cached in results/vm-cache), QEMU with full-system
# emulation (TCG: /dev/kvm opens here but a KVM guest hangs; VM_ACCEL=kvm where it
# works), cloud-init and lab-ready, then the pages' commands from tests/lab/test_typed.py's
# REGISTRY and a short `make lab`. Run by the developer: most of an hour under
# emulation, which no CI budget fits, so neither `make test` nor CI runs it (the fast
# test tests/lab/test_vm.py holds its pieces to the pages and the cloud-init file).
# Root; installs the lab first (the typing reads the registry with the lab's venv), and
# qemu-system-x86, qemu-utils, genisoimage and debootstrap when missing; needs ssh
# (openssh-client). It clones the committed HEAD: an uncommitted change is not tested.
vm-test: install
	sh setup/vm-test.sh

clean:
	rm -rf $(VENV) $(VENV_EVENTLET) $(VENV_NOTEBOOKS) $(VENV_LOCK) .pytest_cache .ruff_cache
