# flask-tuning-lab: `make lab` runs the staged lab, `make test` the test suite.
# Both run `setup` first, which is idempotent.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The book's eventlet stages run from an environment of their own (gunicorn 25.3 with
# eventlet; gunicorn 26 removed that worker): benchmarks/stages.py ENVIRONMENTS.
VENV_EVENTLET := .venv-eventlet
# Lab knobs (see README): which stages (a set: main, gevent, scale-out, failures,
# today, everything; or keys), seconds measured per stage, how many times
# each stage runs (interleaved), Locust users.
STAGES ?= main
DURATION ?= 30
REPEATS ?= 1
USERS ?= 50
LAB_ARGS ?=

# Debian/Ubuntu packages the lab runs for real: Redis, Nginx, `ip` (network
# namespaces), `netstat`, `ps`/`sysctl`, `taskset` (CPU sets), `curl` (the
# exercises use it), `wrk` (a second load tool, to cross-check Locust), and headless
# Chromium with its driver (tests/lab/test_ui.py opens Locust's web UI in it).
SYSTEM_TOOLS := redis-server:redis-server nginx:nginx-light ip:iproute2 netstat:net-tools sysctl:procps taskset:util-linux curl:curl wrk:wrk chromium:chromium chromedriver:chromium-driver

.PHONY: setup install box-check preflight system-packages test test-fast lint lab book clean image image-test

# `setup` = what installs + what checks the box. An image build runs `make install`
# alone (a build step gets no network namespace); the box check then runs when the
# lab starts, since `lab` and `test` run `setup`.
setup: install box-check

install: preflight system-packages $(VENV)/.installed $(VENV_EVENTLET)/.installed

# Before anything is installed: Linux, root, apt-get, the distribution, a Python >= 3.11
# (PYTHON=...), and venvs made by that Python. One line with the fix when not.
preflight:
	@MAKE_GOAL="$(firstword $(MAKECMDGOALS) setup)" PYTHON_GIVEN="$(filter command line environment,$(origin PYTHON))" \
	  sh setup/preflight.sh box $(PYTHON)

# Once iproute2 is in: a network namespace and a veth pair can be made (and are deleted).
box-check: install
	@sh setup/preflight.sh netns

system-packages: preflight
	@missing=""; \
	for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: missing system packages (Debian's names):$$missing; no apt-get here: install them with this system's package manager, then run make again"; \
	    exit 1; \
	  elif [ "$$(id -u)" = 0 ]; then \
	    echo "setup: installing$$missing with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$$missing; \
	  else \
	    echo "setup: missing system packages:$$missing; install them, then run make again: sudo apt-get install$$missing"; \
	    exit 1; \
	  fi; \
	fi

# The current stack (everything but the eventlet servers). A .venv made before the
# split may still hold eventlet: nothing here may import it, so it goes.
$(VENV)/.installed: requirements.txt requirements-app.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@$(PY) -m pip uninstall --quiet --yes eventlet 2>/dev/null || true
	$(PY) -m pip check
	@touch $@

$(VENV_EVENTLET)/.installed: requirements-eventlet.txt requirements-app.txt
	@test -x $(VENV_EVENTLET)/bin/python || $(PYTHON) -m venv $(VENV_EVENTLET)
	$(VENV_EVENTLET)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_EVENTLET)/bin/python -m pip install --quiet -r requirements-eventlet.txt
	$(VENV_EVENTLET)/bin/python -m pip check
	@touch $@

# Two pytest processes, a test file each at a time (pytest-xdist): most tests wait on
# servers they started, and every test judges only what it started, so two files run
# side by side. Two, not one per core: each lab stage pins its servers to one CPU.
PYTEST_PARALLEL = -n 2 --dist loadfile

# The whole suite, lint first (CI runs this).
test: lint
	$(PY) -m pytest $(PYTEST_PARALLEL)

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
# debootstrap (no registry): `image` builds it, `image-test` builds it and runs the box
# check, a short lab, `lab up 0` through a port mapping and test-fast inside it
# (docs/image.md). Root; installs podman and debootstrap when missing.
image:
	bash setup/image-test.sh --build-only

image-test:
	bash setup/image-test.sh

clean:
	rm -rf $(VENV) $(VENV_EVENTLET) .pytest_cache .ruff_cache
