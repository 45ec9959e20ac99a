#!/bin/sh
# What `make setup` checks before it installs anything (`box`) and once the system
# packages are in (`netns`, then the CPUs the box gives, a note when fewer than 2;
# `cpus` prints that count). Each failure is one line that says what is missing and
# the command that fixes it; the first one stops make.
#   sh setup/preflight.sh box PYTHON
#   sh setup/preflight.sh netns
#   sh setup/preflight.sh cpus          (the count)
#   sh setup/preflight.sh cpus-check    (the note and status 1 below 2: make image-test)
set -u
PATH="$PATH:/usr/sbin:/sbin"

fail() { echo "setup: $*" >&2; exit 1; }

# The distributions the lab was tried on, as /etc/os-release names them.
TRIED="debian:12 debian:13"

check_system() {
    [ "$(uname -s)" = Linux ] || fail "the lab needs Linux (network namespaces, /proc); this is $(uname -s)"
    [ "$(id -u)" = 0 ] || fail "the lab needs root (it installs packages and makes network namespaces): run sudo make $MAKE_GOAL"
    # no apt-get is fine where every tool is present: `make system-packages` says what lacks
    if [ -r /etc/os-release ]; then
        . /etc/os-release
        case " $TRIED " in
            *" ${ID:-}:${VERSION_ID:-} "*) ;;
            *) echo "setup: note: ${PRETTY_NAME:-this system} is not one the lab was tried on (Debian 12 and 13); going on" >&2 ;;
        esac
    fi
}

check_python() {
    python=$1
    # once made, the venvs are what runs; a PYTHON given on the command line must match them
    if [ -z "${PYTHON_GIVEN:-}" ] && [ -x .venv/bin/python ]; then
        python=.venv/bin/python
    fi
    command -v "$python" >/dev/null 2>&1 || fail "no $python: install Python 3.11 or newer (apt-get install python3 python3-venv) or name one: make setup PYTHON=/path/to/python3.12"
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || fail "$python does not run"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || fail "$python is Python $version; the lab needs 3.11 or newer: make setup PYTHON=python3.11 (Debian 12's; Ubuntu 24.04: PYTHON=python3.12; Ubuntu 22.04: apt-get install python3.11 python3.11-venv)"
    for venv in .venv .venv-eventlet; do
        [ -x "$venv/bin/python" ] || continue
        made=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || made=broken
        [ "$made" = "$version" ] || fail "$venv runs Python $made, $python is $version: make clean, then make setup PYTHON=$python"
    done
}

check_netns() {
    # a namespace and a veth pair, made and deleted: what every stage's hosts need
    ns="ftl-preflight-$$"
    ip netns add "$ns" 2>/dev/null || fail "cannot make a network namespace (ip netns add): the lab needs a kernel with network namespaces and root; a container needs --privileged (or CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    if ! ip link add "ftlpf$$a" type veth peer name "ftlpf$$b" netns "$ns" 2>/dev/null; then
        ip netns delete "$ns"
        fail "cannot make a veth pair (ip link add type veth): load the kernel's veth module (modprobe veth)"
    fi
    ip link delete "ftlpf$$a" 2>/dev/null
    ip netns delete "$ns"
}

# The CPUs this box really gives the lab: its affinity (nproc) capped by the CPU quota
# of its cgroup and of each one above it (cgroup v2 cpu.max; v1 cpu.cfs_quota_us), as
# `docker run --cpus`, a Kubernetes limit and Docker Desktop's or a VM's setting set them.
usable_cpus() {
    n=$(nproc)
    v2=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null)
    v1=$(sed -n -E 's/^[0-9]+:([^:]*,)?cpu(,[^:]*)?:(.*)$/\3/p' /proc/self/cgroup 2>/dev/null)
    while [ -n "$v2" ]; do
        if [ -r "/sys/fs/cgroup${v2%/}/cpu.max" ]; then
            read -r q p <"/sys/fs/cgroup${v2%/}/cpu.max"
            [ "$q" = max ] || n=$(at_most "$n" $(( (q + p - 1) / p )))
        fi
        [ "$v2" = / ] && break
        v2=$(dirname "$v2")
    done
    if [ -n "$v1" ] && [ -r "/sys/fs/cgroup/cpu${v1%/}/cpu.cfs_quota_us" ]; then
        q=$(cat "/sys/fs/cgroup/cpu${v1%/}/cpu.cfs_quota_us")
        p=$(cat "/sys/fs/cgroup/cpu${v1%/}/cpu.cfs_period_us")
        [ "$q" -gt 0 ] && n=$(at_most "$n" $(( (q + p - 1) / p )))
    fi
    echo "$n"
}

at_most() { if [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }

# Fewer than 2 CPUs: one line that says how to give more, and status 1. The lab still
# runs (the box check goes on), with the servers and Locust on one CPU, whose numbers
# then depend on Locust's own CPU; `make image-test` stops there.
check_cpus() {
    n=$(usable_cpus)
    [ "$n" -ge 2 ] && return 0
    echo "setup: note: this box gives the lab $n CPU; it wants 2 (the servers on one, Locust on the other): Docker Desktop: Settings > Resources > CPUs; docker run --cpus 2; Lima or Multipass: --cpus 2; WSL: processors= in .wslconfig" >&2
    return 1
}

MAKE_GOAL=${MAKE_GOAL:-setup}
case "${1:-}" in
    box) check_system; check_python "${2:-python3}" ;;
    netns) check_netns; check_cpus || true ;;
    cpus) usable_cpus ;;
    cpus-check) check_cpus ;;
    *) fail "usage: sh setup/preflight.sh box PYTHON | netns | cpus | cpus-check" ;;
esac
