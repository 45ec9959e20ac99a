#!/usr/bin/env bash
# make image-test: build the image (Containerfile) with podman from a base made here
# with no registry (setup/debian-base.sh), then inside it, as Docker would run it (a
# 64 MB /dev/shm): the CPU count, the box check, a short lab with screenshots (--strict:
# a failed check fails the step, named), `lab up 0` with its UI reached the way a port
# mapping reaches it, and the fast tests. SUITE=trixie: on Debian 13, the main line.
# ARCH=arm64: built and run under qemu-user (binfmt_misc), the app's tests and one
# short stage. A summary at the end: each step, PASS/FAIL, seconds; the image's size;
# the total. Exits non-zero if any step failed. Leaves nothing behind but the image
# it names (IMAGE) and the base (debian:12 or the SUITE's and ARCH's, a cache).
#   bash setup/image-test.sh               (as root; `make image-test`)
#   bash setup/image-test.sh --build-only  (`make image`: the base and the image only)
#   SUITE=trixie bash setup/image-test.sh; ARCH=arm64 bash setup/image-test.sh
# (Sourced, it defines its steps and runs nothing: tests/lab/test_strict.py runs one.)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PATH="$PATH:/usr/sbin:/sbin"

SUITE=${SUITE:-bookworm}
HOST_ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH=${ARCH:-$HOST_ARCH}
BASE=$(SUITE=$SUITE ARCH=$ARCH sh setup/debian-base.sh --name) || exit 2
VARIANT=$([ "$SUITE" = bookworm ] || echo "-$SUITE")$([ "$ARCH" = "$HOST_ARCH" ] || echo "-$ARCH")
IMAGE=${IMAGE:-localhost/flask-tuning-lab:test$VARIANT}
# Docker's default for a container's /dev/shm (the screenshots' Chromium must live with it)
SHM_SIZE=64m
TAG=ftlimg-$$            # never ftl-...: that prefix is the lab's, and its clean-up takes it
CTR_NS=$TAG-ctr          # the container's network namespace
HOST_NS=$TAG-host        # stands in for the host side of a port mapping
# link-local: never routed, and outside 198.18.0.0/15, which the lab refuses to share
HOST_ADDR=169.254.77.1 CTR_ADDR=169.254.77.2
UI_PORT=8089
RESULTS=$PWD/results/image-test$VARIANT   # the run's -v RESULTS:/lab/results
WORK=""
T0=$SECONDS FAILED=0 MODE="" ROOT="" UP_PID="" FG_PID=""
SUMMARY=()

say() { echo "image-test: $*"; }

# One step: its name, then the command; PASS/FAIL and seconds go to the summary.
step() {
    local name=$1 t=$SECONDS result=PASS rc=0
    shift
    say "== $name"
    "$@" || rc=$?
    [ $rc = 0 ] || { result=FAIL; FAILED=1; }
    SUMMARY+=("$(printf '%-12s %s %5d s' "$name" "$result" $((SECONDS - t)))")
    say "== $name: $result ($((SECONDS - t)) s)"
    [ "$result" = PASS ]
}

skip() { SUMMARY+=("$(printf '%-12s %s' "$1" "SKIP (${2})")"); }

# --- tools and the image --------------------------------------------------------------

# podman and debootstrap from Debian's packages when missing, as `make system-packages`
# does for the lab's tools; curl, nsenter and unshare are the host's own.
ensure_tools() {
    local missing=""
    command -v podman >/dev/null || missing="$missing podman"
    command -v debootstrap >/dev/null || missing="$missing debootstrap"
    command -v curl >/dev/null || missing="$missing curl"
    if [ "$ARCH" != "$HOST_ARCH" ]; then
        command -v update-binfmts >/dev/null || missing="$missing binfmt-support"
        [ -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || missing="$missing qemu-user-static"
    fi
    if [ -n "$missing" ]; then
        say "installing$missing with apt-get"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$missing ||
            return 1
    fi
    [ "$ARCH" = "$HOST_ARCH" ] || foreign_binaries
}

# ARCH's binaries run through qemu-user, which the kernel starts for them (binfmt_misc).
# F (fix binary): the interpreter is opened once, at registration, so it works inside a
# chroot or a container that has no qemu of its own. Mounts binfmt_misc if need be and
# enables Debian's registration (qemu-user-static's, flags PF); both stay (a host
# setting, as after a reboot with binfmt-support installed).
foreign_binaries() {
    local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
    [ "$ARCH" = arm64 ] || { say "ARCH=$ARCH: only arm64 is emulated here"; return 1; }
    [ -e /proc/sys/fs/binfmt_misc/register ] ||
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || return 1
    grep -qx enabled "$entry" 2>/dev/null || update-binfmts --enable qemu-aarch64 || return 1
    grep -q '^flags: .*F' "$entry" ||
        { say "$entry has no F flag: chroot cannot find qemu; $(grep flags "$entry")"; return 1; }
    say "arm64 binaries run through $(sed -n 's/^interpreter //p' "$entry") ($(grep flags "$entry"))"
}

# The host's pip configuration (files and PIP_* variables, the variables winning, as
# pip reads them) as one pip.conf for the build; a build without it uses pip's default.
pip_conf() {
    python3 setup/package_sources.py pip-conf
}

# `podman build -v` options: that pip.conf as the build's /etc/pip.conf, and every local
# folder or file it names (indexes, wheels, constraints, a CA bundle) read-only; for a
# local index (file:///X/simple) the folder above it, where its links point (../../files).
# At the
# same path, but for what lies under /etc/ssl: the image has its own CA bundle there,
# which a package's install may rewrite, so the host's goes beside it (/run/host-ssl)
# and the pip.conf names it there (the host's may hold a proxy's CA that pip needs).
build_volumes() {
    pip_conf >"$WORK/pip.conf.host" 2>/dev/null || return 0
    grep -q ' = ' "$WORK/pip.conf.host" || return 0
    sed 's| /etc/ssl/| /run/host-ssl/|g' "$WORK/pip.conf.host" >"$WORK/pip.conf"
    echo "-v $WORK/pip.conf:/etc/pip.conf:ro"
    local path
    for path in $(sed -n 's/^[a-z-]* = //p' "$WORK/pip.conf.host" | tr ' ' '\n' |
                  sed -E 's|^file://(.*)/simple/?$|\1|; s|^file://||' | grep '^/' | sort -u); do
        [ -e "$path" ] && echo "-v $path:${path/#\/etc\/ssl\//\/run\/host-ssl\/}:ro"
    done
}

# The image, built FROM the local BASE (never pulled), for ARCH. The image it replaces, if
# any, goes once the build succeeds: only the image named stays.
build_image() {
    local old new
    old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null)
    storage_before
    # shellcheck disable=SC2046  # one -v per word
    podman build --isolation chroot --pull=never --layers $(build_volumes) \
        --platform "linux/$ARCH" --build-arg "BASE=$BASE" \
        -f Containerfile -t "$IMAGE" . || return 1
    touch "$WORK/built"
    new=$(podman image inspect --format '{{.Id}}' "$IMAGE")
    if [ -n "$old" ] && [ "$old" != "$new" ]; then
        podman rmi "$old" >/dev/null 2>&1 || true
    fi
}

# What podman's storage holds before the build, so that what an interrupted or failed
# build leaves (buildah's working containers, intermediate images) can go, and only that.
storage_before() {
    podman ps -a --external -q --no-trunc | sort >"$WORK/containers.before"
    podman images -a -q --no-trunc | sort -u >"$WORK/images.before"
}

# After a failed or interrupted build: its working containers and the untagged layers
# it made; a successful one leaves nothing but the named image's own chain (its cache).
# Another image test's (SUITE=, ARCH=) running beside this one is spared: its
# containers are named ftlimg-*, and a layer in use or tagged is not removed.
build_leftovers() {
    [ -f "$WORK/containers.before" ] && [ ! -f "$WORK/built" ] || return 0
    podman ps -a --external --no-trunc --format '{{.ID}} {{.Names}}' | grep -v ' ftlimg-' |
        cut -d ' ' -f 1 | sort | comm -13 "$WORK/containers.before" - |
        xargs -r podman rm -f >/dev/null 2>&1
    podman images -a -q --no-trunc --filter dangling=true | sort -u |
        comm -13 "$WORK/images.before" - | xargs -r podman rmi >/dev/null 2>&1
}

image_size() {
    local bytes
    bytes=$(podman image inspect --format '{{.Size}}' "$IMAGE" 2>/dev/null) || { echo "?"; return; }
    echo "$bytes bytes ($((bytes / 1000000)) MB)"
}

# --- the container --------------------------------------------------------------------

# A privileged container when the runtime can start one; where it cannot (here crun and
# runc stop at "setrlimit RLIMIT_NPROC: Operation not permitted"), the image's file
# system is entered the way a runtime would (enter_root). The output says which.
choose_mode() {
    local err
    if err=$(podman run --rm --privileged --pull=never --network none "$IMAGE" true 2>&1); then
        MODE=container
        say "ran as: a privileged container (podman run --privileged)"
    else
        MODE=entered
        say "podman cannot start a container here: $(echo "$err" | tail -n 1)"
        say "ran as: the image's file system, entered with its own mount, pid, uts, ipc,"
        say "  cgroup and network namespaces (unshare + chroot, as a runtime sets it up)"
    fi
}

# The container's network namespace and the host side of the "port mapping": a veth
# pair between two namespaces this test makes; nothing in the machine's own namespace.
make_netns() {
    ip netns add "$CTR_NS" && ip netns add "$HOST_NS" &&
    ip -n "$HOST_NS" link add veth0 type veth peer name eth0 netns "$CTR_NS" &&
    ip -n "$HOST_NS" addr add "$HOST_ADDR/30" dev veth0 &&
    ip -n "$CTR_NS" addr add "$CTR_ADDR/30" dev eth0 &&
    ip -n "$HOST_NS" link set lo up && ip -n "$HOST_NS" link set veth0 up &&
    ip -n "$CTR_NS" link set lo up && ip -n "$CTR_NS" link set eth0 up
}

# The entered way: a container made from the image and mounted (its writes go to the
# container's layer, gone with it); the runtime's files (/etc/hosts with localhost,
# resolv.conf); the image's ENV and WORKDIR.
prepare_root() {
    podman create --name "$TAG" --pull=never "$IMAGE" >/dev/null &&
    ROOT=$(podman mount "$TAG") || return 1
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\tftl-image\n' \
        "$CTR_ADDR" >"$WORK/hosts"
    cp /etc/resolv.conf "$WORK/resolv.conf"
    podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" |
        grep -v '^$' >"$WORK/env"
    # a runtime's defaults where the image sets none
    grep -q '^PATH=' "$WORK/env" ||
        echo "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" >>"$WORK/env"
    printf 'HOME=/root\nHOSTNAME=ftl-image\n' >>"$WORK/env"
    WORKDIR=$(podman image inspect --format '{{.Config.WorkingDir}}' "$IMAGE")
}

# Run as pid 1 of fresh mount/pid/uts/ipc/cgroup namespaces, in the container's network
# namespace, with the host's tools: set up the file system as a runtime does for a
# privileged container, then chroot into it and run the command. Every mount is made
# in this private mount namespace, so all of them go when its last process ends.
enter_root() {
    local root=$1 workdir=$2 work=$3 results=$4
    shift 4
    set -e
    # the tree a mount of its own, as a runtime's root is: Debian 13's `ip -n` makes `/`
    # a slave mount, which fails on a directory that is not one
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"      # a fresh sysfs: this network namespace's view
    mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup" 2>/dev/null || true
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size="$SHM_SIZE" shm "$root/dev/shm"
    mount -t tmpfs -o mode=755 tmpfs "$root/run"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    touch "$root/etc/hosts" "$root/etc/resolv.conf"
    mount --bind "$work/hosts" "$root/etc/hosts"
    mount --bind "$work/resolv.conf" "$root/etc/resolv.conf"
    mkdir -p "$root/lab/results"
    mount --bind "$results" "$root/lab/results"     # the run's -v
    hostname ftl-image
    mapfile -t envs <"$work/env"
    set +e
    # Ctrl-C as in a terminal: a background command of a script starts with SIGINT
    # ignored, which make, pytest and the lab would keep
    exec chroot "$root" /usr/bin/env -i --default-signal=INT,QUIT "${envs[@]}" \
        /bin/sh -c 'cd "$0" && exec "$@"' "${workdir:-/}" "$@"
}

# A command in the container, the way the mode allows, run in the background and
# waited for: a Ctrl-C then reaches this script's trap at once (interrupt), which stops
# it, even where what runs inside catches Ctrl-C itself and exits 130. `bg`: leave it
# running, its pid in UP_PID (`lab up`).
in_ctr() {
    local bg=""
    [ "$1" = bg ] && { bg=1; shift; }
    local run
    if [ "$MODE" = container ]; then
        run=(podman run --rm --privileged --pull=never --name "$TAG-run" --hostname ftl-image
             --shm-size "$SHM_SIZE" --network "ns:/run/netns/$CTR_NS" -v "$RESULTS:/lab/results" "$IMAGE")
    else
        run=(nsenter "--net=/run/netns/$CTR_NS"
             unshare --mount --pid --uts --ipc --cgroup --fork --kill-child
             bash "$0" --enter "$ROOT" "$WORKDIR" "$WORK" "$RESULTS")
    fi
    "${run[@]}" "$@" &
    if [ -n "$bg" ]; then
        UP_PID=$!
        return 0
    fi
    FG_PID=$!
    wait "$FG_PID"
    local rc=$?
    FG_PID=""
    return $rc
}

# The processes under PID, by id.
descendants() {
    local child
    for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done
}

# SIGINT to what runs inside (as Ctrl-C stops `lab up`), then wait for it; SIGKILL
# after a minute (unshare --kill-child takes everything inside with it).
stop_pid() {
    local pid=$1 child i
    if [ "$MODE" = container ]; then
        podman kill --signal INT "$TAG-run" >/dev/null 2>&1
    else
        # everything under unshare (pid 1 inside and what it started: make, pytest, the
        # lab), as a terminal's Ctrl-C reaches them all
        kill -INT $(descendants "$pid") 2>/dev/null
    fi
    for i in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { say "it did not stop on SIGINT: killed"; kill -KILL "$pid"; }
    wait "$pid"
}

stop_bg() {
    [ -n "$UP_PID" ] || return 0
    stop_pid "$UP_PID"
    local rc=$?
    UP_PID=""
    # 130: the lab's own exit on Ctrl-C, once everything it started has stopped
    [ $rc = 0 ] || [ $rc = 130 ] || { say "lab up exited with $rc after SIGINT"; return 1; }
}

interrupt() {
    trap '' INT TERM
    say "interrupted: stopping what runs inside, then cleaning up"
    [ -n "$FG_PID" ] && stop_pid "$FG_PID" >/dev/null 2>&1
    exit 130
}

# --- the steps inside -----------------------------------------------------------------

# Checks whose figures depend on the machine's speed, left out by name under emulation
# (qemu-user runs everything at a fraction of native speed): Locust took longer to
# start than stage 2's 5 s window (the sampler's front TIME_WAIT stayed at the
# warm-up's 265 all through it), so its client TIME_WAIT per request read 0.0.
SPEED_CHECKS=tw_front_per_request

# setup/ready-lab.sh: `make lab STAGES DURATION` with --strict (a failed check fails the
# step, named in the lab's last line) and more LAB_ARGS; it writes results/<timestamp>/ into the mounted
# folder: the run must be there, with a screenshot of Locust's Sockets tab per stage.
lab_step() {
    local stages=$1 duration=$2 args=${3:-}
    # shellcheck disable=SC2086  # LAB_ARGS: one word an option
    in_ctr sh setup/ready-lab.sh "$stages" "$duration" $args || return 1
    local run shots measured
    run=$(readlink -f "$RESULTS/latest") && [ -f "$run/run.json" ] ||
        { say "no run in $RESULTS (the mounted /lab/results)"; return 1; }
    measured=$(find "$run" -name 'checks.json' | wc -l)
    case " $args " in
        *" --no-screenshots "*) say "run in $run: no screenshots (--no-screenshots)"; return 0 ;;
    esac
    shots=$(find "$run" -name 'sockets-tab.png' | wc -l)
    say "run in $run: $shots of $measured screenshots of the Sockets tab"
    [ "$shots" -ge "$measured" ] && return 0
    # why not, from the viewer's own log (the lab said it as a warning and went on)
    local log
    log=$(find "$run" -name 'sockets-tab.log' -print -quit)
    [ -n "$log" ] && tail -n 1 "$log" | cut -c 1-300
    return 1
}

# The versions run.json records of what served the run: Python, Redis, Nginx (and
# Chromium, where the lab records it).
versions() {
    local run
    run=$(readlink -f "$RESULTS/latest")/run.json
    python3 - "$run" <<'PY'
import json, sys
info = json.load(open(sys.argv[1]))
versions = info.get("versions") or {}
found = {"Python": info.get("python"), "Redis": versions.get("redis-server"),
         "Nginx": versions.get("nginx"),
         "Chromium": versions.get("chromium") or info.get("chromium")}
print("image-test: run.json: " + ", ".join(f"{k} {v or 'not recorded'}" for k, v in found.items()))
sys.exit(0 if all(found[k] for k in ("Python", "Redis", "Nginx")) else 1)
PY
}

# `lab up 0` inside; Locust's page from the host side of the mapping, at the container's
# own address (as `docker run -p 127.0.0.1:8089:8089` reaches it), then Ctrl-C and wait.
ui_through_mapping() {
    local i ok="" url="http://$CTR_ADDR:$UI_PORT/"
    in_ctr bg python -m benchmarks.lab up 0 --results /lab/results/up
    for i in $(seq 90); do
        kill -0 "$UP_PID" 2>/dev/null || { say "lab up ended early"; break; }
        if ip netns exec "$HOST_NS" curl -fsS -m 5 "$url" 2>/dev/null | grep -qi locust; then
            ok=1; break
        fi
        sleep 1
    done
    if [ -n "$ok" ]; then
        say "$url answers Locust's page (from $HOST_NS)"
    elif ip netns exec "$CTR_NS" curl -fsS -m 5 "http://127.0.0.1:$UI_PORT/" >/dev/null 2>&1; then
        # up, but on the container's 127.0.0.1 only: a mapping cannot reach that
        say "the UI answers on the container's 127.0.0.1 only, not at $url: lab up"
        say "  needs --ui-address (FTL_UI_ADDRESS=0.0.0.0, set by the Containerfile)"
    else
        say "no answer at $url within 90 s"
    fi
    stop_bg || ok=""
    [ -n "$ok" ]
}

# The steps inside, first the CPUs the container has (fewer than 2: stop, saying how to
# give more). The default: a short lab, the UI, the fast tests. Debian 13: the main line
# and the versions it ran. arm64, emulated (minutes where native takes seconds): the
# app's tests against real Redis and one short stage without py-spy (it cannot read an
# emulated process) nor screenshots (Chromium cannot start its processes under
# qemu-user: "GPU process isn't usable", a trap with --single-process), the checks
# that depend on speed left out by name.
inside() {
    step cpus in_ctr sh setup/preflight.sh cpus-check ||
        { skip "inside" "fewer than 2 CPUs (the cpus step's line says how to give more)"; return; }
    step box-check in_ctr make box-check
    if [ "$ARCH" != "$HOST_ARCH" ]; then
        step app-tests in_ctr python -m pytest tests/app -m "not slow" -q -p no:cacheprovider
        step lab lab_step 2 5 "--no-profile --no-screenshots --leave-out-checks $SPEED_CHECKS"
        skip ui "emulated: the UI is the same code as on amd64"
        skip test-fast "emulated: app-tests above instead"
        return
    fi
    if [ "$SUITE" != bookworm ]; then
        step lab-main lab_step main "${MAIN_DURATION:-10}"
        step versions versions
    else
        step lab lab_step 0,2 10
    fi
    step ui ui_through_mapping
    step test-fast in_ctr make test-fast
}

# --- clean-up and summary -------------------------------------------------------------

# On success, error and Ctrl-C: what runs stops, the container's mount and the container
# go, the two namespaces go (their veth pair with them), the work folder goes. Mounts
# made inside went with their mount namespace.
cleanup() {
    trap '' INT TERM
    stop_bg >/dev/null 2>&1
    if [ "$MODE" = container ]; then podman rm -f "$TAG-run" >/dev/null 2>&1; fi
    build_leftovers
    if podman container exists "$TAG" 2>/dev/null; then
        podman umount "$TAG" >/dev/null 2>&1
        podman rm -f "$TAG" >/dev/null 2>&1
    fi
    ip netns delete "$CTR_NS" 2>/dev/null
    ip netns delete "$HOST_NS" 2>/dev/null
    rm -rf --one-file-system "$WORK"
}

summary() {
    echo
    echo "image-test summary ($IMAGE: $SUITE $ARCH, ${MODE:-not entered}, /dev/shm $SHM_SIZE)"
    printf '  %s\n' "${SUMMARY[@]}"
    echo "  image size: $(image_size)"
    echo "  total: $((SECONDS - T0)) s"
    echo "  kept: $IMAGE and the base $BASE (a cache: podman rmi $BASE to remake it)"
}

# --- main -----------------------------------------------------------------------------

main() {
    [ "$(id -u)" = 0 ] || { say "needs root (podman's storage, network namespaces)"; exit 1; }
    WORK=$(mktemp -d /var/tmp/ftlimg.XXXXXX)
    trap cleanup EXIT
    trap interrupt INT TERM
    mkdir -p "$RESULTS"
    step tools ensure_tools &&
    step base env SUITE="$SUITE" ARCH="$ARCH" sh setup/debian-base.sh &&
    step build build_image &&
    [ "${1:-}" = --build-only ] && { summary; return $FAILED; }
    step container eval 'choose_mode && make_netns && { [ "$MODE" = container ] || prepare_root; }'
    if [ $FAILED = 0 ]; then
        inside
    else
        skip "inside" "the image could not be built or entered"
    fi
    summary
    return $FAILED
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    :  # sourced: the functions only
elif [ "${1:-}" = --enter ]; then
    shift
    enter_root "$@"
else
    main "$@"
fi
