#!/bin/sh
# lab [ARGS]: the one way into the lab on a VM (docs/laptops.md). sudo keeps no activated
# venv (its secure_path replaces PATH), starts in the user's own folder, and a Debian VM
# has `python3` only, the system's, without the lab's packages: so `sudo python -m
# benchmarks.lab ...` fails there. lab-ready installs this file as /usr/local/bin/lab,
# on secure_path, so that as typed:
#   sudo lab           a root shell in /lab with the lab's venv first on PATH, where
#                      every command of the labs runs as written (as in the image)
#   sudo lab up 2      one command: python -m benchmarks.lab up 2, from /lab
LAB=/lab
if [ "$(id -u)" != 0 ]; then
    # without root the lab runs in host mode, which hides what the labs are about
    echo "lab: the lab needs root (a network namespace per host): sudo lab $*" >&2
    exit 1
fi
if [ ! -x "$LAB/.venv/bin/python" ]; then
    echo "lab: no $LAB/.venv yet: sudo lab-ready makes it (docs/laptops.md)" >&2
    exit 1
fi
cd "$LAB" || exit 1
PATH="$LAB/.venv/bin:$PATH" VIRTUAL_ENV="$LAB/.venv"
export PATH VIRTUAL_ENV
if [ $# -eq 0 ]; then
    echo "lab: a root shell in $LAB with the lab's venv first on PATH (exit leaves it)" >&2
    exec bash
fi
exec python -m benchmarks.lab "$@"
