#!/bin/sh
# Run a command on a box slower than this one: in a CPU cgroup whose quota is a share of
# the CPUs this process may use (SHARE percent, 50 by default: one CPU's time across two
# cores). `make test-slow` runs the suite this way, to prove it on a box half as fast as
# the one it was written on (an attendee's laptop, a VM, an older CI runner).
#
# Why a quota and not CPU hogs beside the suite: the lab pins its roles to CPUs and the
# scheduler favours a task that wakes over one that never sleeps, so hogs slow it far
# less than a slower CPU does; a quota takes the time away whoever wants it.
# The period is short (10 ms) so that the box is slow all the time, not fast for 50 ms
# and stopped for 50.
#
# Root, cgroup v1's cpu controller (Debian 12's kernel here) or v2's cpu.max. The cgroup
# is made under this process's own, named after this shell's pid, and removed at the
# end, on success, error and Ctrl-C; the machine's other processes are not touched.
#
#   sh setup/slow-box.sh make test          # SHARE=50
#   SHARE=33 sh setup/slow-box.sh make test # a third of the box
set -eu

SHARE=${SHARE:-50}
PERIOD_US=10000

fail() { echo "slow-box: $*" >&2; exit 2; }

[ $# -gt 0 ] || fail "usage: sh setup/slow-box.sh COMMAND [ARGS...] (SHARE=50: percent of this box's CPU time)"
case "$SHARE" in
    ''|*[!0-9]*) fail "SHARE=$SHARE is not a whole percentage: give 10 to 100 (50: half the box)" ;;
esac
[ "$SHARE" -ge 10 ] && [ "$SHARE" -le 100 ] || fail "SHARE=$SHARE is out of range: give 10 to 100 (50: half the box)"
[ "$(id -u)" = 0 ] || fail "a CPU cgroup needs root: run it as root (sudo sh setup/slow-box.sh ...)"

cpus=$(nproc)
quota=$((PERIOD_US * cpus * SHARE / 100))
v1=$(sed -n -E 's/^[0-9]+:([^:]*,)?cpu(,[^:]*)?:(.*)$/\3/p' /proc/self/cgroup)
v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
if [ -n "$v1" ] && [ -w "/sys/fs/cgroup/cpu${v1%/}/cgroup.procs" ]; then
    parent="/sys/fs/cgroup/cpu${v1%/}"
    group="$parent/ftl-slow-$$"
    mkdir "$group"
    echo "$PERIOD_US" >"$group/cpu.cfs_period_us"
    echo "$quota" >"$group/cpu.cfs_quota_us"
elif [ -n "$v2" ] && grep -qw cpu "/sys/fs/cgroup${v2%/}/cgroup.controllers" 2>/dev/null; then
    parent="/sys/fs/cgroup${v2%/}"
    group="$parent/ftl-slow-$$"
    mkdir "$group"
    echo "$quota $PERIOD_US" >"$group/cpu.max"
else
    fail "no CPU controller to set a quota in (cgroup v1's cpu or v2's cpu.max) for this process"
fi

cleanup() {
    status=$?
    trap - EXIT INT TERM
    echo $$ >"$parent/cgroup.procs"
    # what the command left running is stopped by the command itself; a leftover keeps
    # the cgroup, and says so
    rmdir "$group" 2>/dev/null || echo "slow-box: $group still holds processes: $(cat "$group/cgroup.procs" | tr '\n' ' ')" >&2
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo $$ >"$group/cgroup.procs"
echo "slow-box: $* on $SHARE% of $cpus CPUs' time (quota $quota us every $PERIOD_US us, $group)" >&2
"$@"
