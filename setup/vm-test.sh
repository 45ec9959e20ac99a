#!/bin/sh
# make vm-test: a real VM booted from setup/cloud-init.yaml as a room's user of the VM
# route would boot one, and the VM pages' commands typed in it as its default user.
#   disk      a Debian 12 cloud disk made here by debootstrap (setup/vm-disk.sh), cached
#   serve     a clone of this checkout's HEAD (git daemon: lab-ready clones --depth 1,
#             which git's dumb HTTP cannot serve) and this box's local pip indexes
#             (HTTP), both on 127.0.0.1, which the VM reaches as 10.0.2.2
#   boot      QEMU, full-system emulation (TCG): /dev/kvm opens here but a KVM guest
#             hangs at boot; VM_ACCEL=kvm tries KVM where it works. The user-data is
#             setup/cloud-init.yaml with LAB_REPO= set, and a second part a room adds:
#             its users' keys (a key pair made for the run), its apt mirror and pip
#             indexes, read from this box's own configuration (setup/vm_user_data.py)
#   cloud-init, lab-ready   waits for both; lab-ready's log must say the box is ready
#   typed     the pages' commands, from test_typed.py's REGISTRY (tests/lab/vm_typed.py)
#   make-lab  a short strict `make lab` (setup/ready-lab.sh) typed in `sudo lab`'s shell;
#             the checks that depend on the machine's speed left out by name under
#             emulation, as make image-test ARCH=arm64 does
# Each step with its time and PASS/FAIL, then a last line PASS or FAIL (exit 0 only if
# every step passed). Everything it starts stops on success, error and Ctrl-C; its
# temporary files are in a 0700 folder that goes too; the logs stay in results/vm-test.
# Root (apt-get, debootstrap); ssh and ssh-keygen (openssh-client) on the host. Slow: most of an hour under emulation; not in `make test`.
#   sh setup/vm-test.sh          (`make vm-test`)
#   VM_SSH_PORT=2222 sh setup/vm-test.sh   (the host's side of the VM's ssh; default: free)
set -u
PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.." || exit 2
CACHE=${VM_CACHE:-results/vm-cache}
LOGS=$PWD/results/vm-test
ACCEL=${VM_ACCEL:-tcg}
USER_NAME=debian  # the default user of Debian's cloud images (cloud-init's default_user)
PY=.venv/bin/python
SPEED_CHECKS=tw_front_per_request  # as make image-test ARCH=arm64 (setup/image-test.sh)
LAB_STAGES=0,2 LAB_DURATION=10    # lab-ready's own short lab (setup/ready-lab.sh 0,2 10)
T0=$(date +%s) FAILED=0 WORK="" PIDS="" QEMU_PID="" SUMMARY=""
COMMIT=$(git rev-parse --short HEAD 2>/dev/null)  # the one the VM clones

say() { echo "vm-test: $*"; }
# a sleep that a signal interrupts at once (sh runs its trap only after a foreground
# command ends)
pause() { sleep "$1" & wait $!; }
die() { say "$*" >&2; exit 2; }

# One step: its name, then the command; PASS/FAIL and seconds go to the summary.
step() {
    name=$1 t=$(date +%s)
    shift
    say "== $name"
    if "$@"; then result=PASS; else result=FAIL; FAILED=1; fi
    took=$(($(date +%s) - t))
    SUMMARY="$SUMMARY$(printf '  %-11s %s %5d s' "$name" "$result" "$took")
"
    say "== $name: $result ($took s)"
    [ "$result" = PASS ]
}

port_free() {
    python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' \
        "$1" 2>/dev/null
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Bad input, said in one line before anything starts.
preflight() {
    [ "$(id -u)" = 0 ] || die "needs root (apt-get, debootstrap): sudo make vm-test"
    [ -x "$PY" ] || die "no $PY: make install first (the typing reads test_typed.py's registry)"
    command -v apt-get >/dev/null || command -v qemu-system-x86_64 >/dev/null ||
        die "no qemu-system-x86_64 and no apt-get to install it (Debian: qemu-system-x86)"
    command -v apt-get >/dev/null || command -v debootstrap >/dev/null ||
        die "no debootstrap and no apt-get to install it"
    case $ACCEL in tcg|kvm) ;; *) die "VM_ACCEL=$ACCEL: tcg (the default) or kvm" ;; esac
    SSH_PORT=${VM_SSH_PORT:-$(free_port)}
    port_free "$SSH_PORT" || die "port $SSH_PORT on 127.0.0.1 is taken: VM_SSH_PORT=another"
    git rev-parse --verify -q HEAD >/dev/null || die "no git commit here to clone into the VM"
    # the VM is reached over ssh with a key pair made for the run; not installed here (after
    # the input's checks: a box without ssh, as the image, still hears what was wrong first)
    command -v ssh >/dev/null && command -v ssh-keygen >/dev/null ||
        die "no ssh or ssh-keygen: apt-get install openssh-client"
}

# QEMU, debootstrap and a seed ISO's maker from Debian's packages when missing, as the
# Makefile installs the lab's tools (apt-get, from the mirror the box is configured for).
ensure_tools() {
    missing=""
    command -v qemu-system-x86_64 >/dev/null || missing="$missing qemu-system-x86"
    command -v qemu-img >/dev/null || missing="$missing qemu-utils"
    command -v genisoimage >/dev/null || missing="$missing genisoimage"
    command -v debootstrap >/dev/null || missing="$missing debootstrap"
    [ -n "$missing" ] || return 0
    say "installing$missing with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends $missing
}

disk() {
    DISK=$(sh setup/vm-disk.sh "$CACHE") && [ -f "$DISK/disk.raw" ]
}

# --- what the VM reaches: the repository, the room's package indexes, its user-data ---

# Started in the background; its pid kept for the clean-up.
started() { PIDS="$PIDS $!"; }

# A clone of HEAD (what is committed is what the VM clones) for git daemon, on the
# host's loopback; the local pip indexes over HTTP beside it (vm_user_data.py links
# them into the web root). Then the user-data, the seed ISO (NoCloud: label cidata)
# and the ssh config of the run's key pair.
serve() {
    mkdir -p "$WORK/git" "$WORK/www" "$WORK/seed" &&
    git clone --quiet --bare . "$WORK/git/lab.git" || return 1
    GIT_PORT=$(free_port) HTTP_PORT=$(free_port)
    git daemon --reuseaddr --listen=127.0.0.1 --port="$GIT_PORT" --export-all \
        --base-path="$WORK/git" "$WORK/git" >"$LOGS/git-daemon.log" 2>&1 & started
    python3 -m http.server --bind 127.0.0.1 --directory "$WORK/www" "$HTTP_PORT" \
        >"$LOGS/http.log" 2>&1 & started
    ssh-keygen -q -t ed25519 -N "" -C ftl-vm-test -f "$WORK/key" && user_data && seed_iso &&
    ssh_config && wait_port "$GIT_PORT" && wait_port "$HTTP_PORT" &&
    say "LAB_REPO=git://10.0.2.2:$GIT_PORT/lab.git (HEAD $COMMIT), pip indexes at http://10.0.2.2:$HTTP_PORT/"
}

wait_port() {
    for i in 1 2 3 4 5 6 7 8 9 10; do port_free "$1" || return 0; sleep 1; done
    say "nothing listens on 127.0.0.1:$1"; return 1
}

# The room's apt configuration as setup/debian-base.sh copies the host's into a tree
# (in a subshell: that file sets -eu), and pip's, as `pip config list` reads it.
user_data() {
    mkdir -p "$WORK/apt/etc/apt/sources.list.d" "$WORK/apt/etc/apt/apt.conf.d" &&
    (DEBIAN_BASE_FUNCTIONS=1 . setup/debian-base.sh && copy_apt_config "$WORK/apt") &&
    "$PY" -m pip config list >"$WORK/pip-config" &&
    python3 -m setup.vm_user_data --repo "git://10.0.2.2:$GIT_PORT/lab.git" \
        --key "$WORK/key.pub" --apt-tree "$WORK/apt" --pip-config "$WORK/pip-config" \
        --served-at "http://10.0.2.2:$HTTP_PORT" --www "$WORK/www" >"$WORK/seed/user-data" &&
    cp "$WORK/seed/user-data" "$LOGS/user-data"
}

seed_iso() {
    printf 'instance-id: ftl-vm-test-%s\nlocal-hostname: ftl\n' "$$" >"$WORK/seed/meta-data" &&
    genisoimage -quiet -output "$WORK/seed.iso" -volid cidata -joliet -rock \
        "$WORK/seed/user-data" "$WORK/seed/meta-data"
}

ssh_config() {
    cat >"$WORK/ssh_config" <<EOF
Host vm
  HostName 127.0.0.1
  Port $SSH_PORT
  User $USER_NAME
  IdentityFile $WORK/key
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 30
  BatchMode yes
  ServerAliveInterval 30
  ServerAliveCountMax 20
EOF
}

vm() { ssh -F "$WORK/ssh_config" vm "$@"; }

# --- the VM ---------------------------------------------------------------------------

# The cached disk stays as built: the VM writes to an overlay in the run's folder.
# The tree's own kernel and initrd, booted by QEMU (no boot loader on the disk). Under
# nice -n 19: others measure benchmarks on this box.
boot() {
    qemu-img create -q -f qcow2 -F raw -b "$(realpath "$DISK/disk.raw")" "$WORK/disk.qcow2" ||
        return 1
    accel=$ACCEL
    [ "$ACCEL" = tcg ] && accel=tcg,thread=multi
    nice -n 19 qemu-system-x86_64 -name ftl-vm-test -accel "$accel" -cpu max -smp 2 -m 4096 \
        -kernel "$DISK/vmlinuz" -initrd "$DISK/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0" \
        -drive "file=$WORK/disk.qcow2,if=virtio,format=qcow2" \
        -drive "file=$WORK/seed.iso,if=virtio,format=raw,readonly=on" \
        -nic "user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22" \
        -display none -vga none -monitor none -serial "file:$LOGS/console.log" &
    QEMU_PID=$!
    say "QEMU pid $QEMU_PID ($ACCEL), ssh on 127.0.0.1:$SSH_PORT; the console: $LOGS/console.log"
    until_ssh
}

alive() { [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; }

until_ssh() {
    deadline=$(($(date +%s) + 1800))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        alive || { say "QEMU exited; the console's last lines:"; tail -n 20 "$LOGS/console.log"; return 1; }
        vm true 2>/dev/null && { say "ssh $USER_NAME@ answers ($(vm uname -r))"; return 0; }
        pause 10
    done
    say "no ssh within 30 minutes; the console's last lines:"; tail -n 20 "$LOGS/console.log"
    return 1
}

# Polled (one ssh each: a dropped connection is retried) until cloud-init's final stage
# wrote boot-finished: `cloud-init status` (22.4) says error as soon as a module failed,
# while the rest still runs. Then its status and its output log, kept.
cloud_init_done() {
    deadline=$(($(date +%s) + 5400)) last=""
    while [ "$(date +%s)" -lt "$deadline" ] && alive; do
        now=$(vm 'test -e /var/lib/cloud/instance/boot-finished && echo finished ||
                  cloud-init status' 2>/dev/null | sed 's/^status: //')
        [ "$now" = "$last" ] || say "cloud-init: ${now:-no answer} (after $(($(date +%s) - T0)) s)"
        last=$now
        [ "$now" = finished ] && break
        pause 30
    done
    last=$(vm cloud-init status 2>/dev/null | sed -n 's/^status: //p')
    vm sudo cat /var/log/cloud-init-output.log >"$LOGS/cloud-init-output.log" 2>&1
    vm cloud-init status --long 2>&1 | sed 's/^/  /'
    [ "$last" = done ]
}

# lab-ready's log (written by the cloud-init file's runcmd) must end saying the box is
# ready, and name the UI's address the box's file gives (127.0.0.1 on every VM).
lab_ready() {
    vm sudo cat /var/log/lab-ready.log >"$LOGS/lab-ready.log" 2>&1
    tail -n 4 "$LOGS/lab-ready.log" | cut -c 1-300 | sed 's/^/  /'
    vm cat /etc/flask-tuning-lab.conf | grep -E '^(LAB_REPO|FTL_UI_ADDRESS)=' | sed 's/^/  /'
    grep -q "^lab-ready: the box is ready" "$LOGS/lab-ready.log" &&
    grep -q "listens on the VM's 127.0.0.1" "$LOGS/lab-ready.log"
}

# The pages' commands, as test_typed.py's REGISTRY lists them (tests/lab/vm_typed.py).
typed_commands() {
    "$PY" tests/lab/vm_typed.py --ssh-config "$WORK/ssh_config" >"$LOGS/typed.log" 2>&1
    rc=$?
    cat "$LOGS/typed.log"
    return $rc
}

# A short strict `make lab` (setup/ready-lab.sh, lab-ready's) typed in `sudo lab`'s
# shell, where the page says every command of the labs runs as written; under emulation
# the checks that depend on speed are left out by name.
short_lab() {
    typed="sh setup/ready-lab.sh $LAB_STAGES $LAB_DURATION"
    [ "$ACCEL" = tcg ] && typed="$typed --leave-out-checks $SPEED_CHECKS"
    printf 'sudo lab\n%s\necho @@status $?\nexit\n' "$typed" | vm bash >"$LOGS/make-lab.log" 2>&1
    say "typed: sudo lab, then $typed"
    grep -E 'checks|check |@@status' "$LOGS/make-lab.log" | tail -n 6 | cut -c 1-300 | sed 's/^/  /'
    grep -q '^@@status 0$' "$LOGS/make-lab.log"
}

# SIGTERM, as a host's shutdown stops a VM (its disk is a throwaway overlay), then
# SIGKILL after 30 s.
stop_vm() {
    alive || return 0
    kill -TERM "$QEMU_PID"
    for i in $(seq 30); do alive || break; sleep 1; done
    alive && kill -KILL "$QEMU_PID"
    wait "$QEMU_PID" 2>/dev/null
    QEMU_PID=""
}

cleanup() {
    trap '' INT TERM
    stop_vm
    for pid in $PIDS; do kill "$pid" 2>/dev/null; done
    for pid in $PIDS; do wait "$pid" 2>/dev/null; done
    [ -z "$WORK" ] || rm -rf --one-file-system "$WORK"
}

summary() {
    echo
    echo "vm-test summary (Debian 12 VM, QEMU $ACCEL, -smp 2 -m 4096; commit $COMMIT)"
    printf '%s' "$SUMMARY"
    echo "  total: $(($(date +%s) - T0)) s; logs: $LOGS"
    if [ $FAILED = 0 ]; then echo "vm-test: PASS"; else echo "vm-test: FAIL"; fi
}

main() {
    preflight
    WORK=$(mktemp -d /var/tmp/ftl-vm-test.XXXXXX) || exit 1  # mktemp -d: mode 0700
    trap cleanup EXIT
    trap 'say "interrupted: stopping the VM and the servers"; exit 130' INT TERM
    rm -rf "$LOGS" && mkdir -p "$LOGS"
    [ "$ACCEL" = tcg ] && say "QEMU emulates the whole machine (TCG: -accel tcg): /dev/kvm opens here but a KVM guest hangs at boot; slow, most of an hour"
    step tools ensure_tools &&
    step disk disk &&
    step serve serve &&
    step boot boot &&
    step cloud-init cloud_init_done &&
    { step lab-ready lab_ready; step typed typed_commands; step make-lab short_lab; }
    summary
    return $FAILED
}

main "$@"
