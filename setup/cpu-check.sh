#!/bin/sh
# How many CPUs this box (a container, a VM) lets the lab use, and one line with the fix
# when fewer than 2: the lab runs the servers on one CPU and Locust on another, so with
# one they share it and every figure is partly Locust's. Counts the CPUs this process
# may run on (its affinity: `docker run --cpuset-cpus`, Docker Desktop's VM) and its
# cgroup's CPU quota (cpu.max: `docker run --cpus`), the smaller.
#   sh setup/cpu-check.sh      exit 0 with 2 or more usable CPUs, else 1
set -eu

affinity=$(nproc)
usable=$affinity
# cgroup v2: the quota of this process's cgroup and of each one above it
path=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null || true)
while [ -n "$path" ]; do
    if [ -r "/sys/fs/cgroup$path/cpu.max" ]; then
        read -r quota period <"/sys/fs/cgroup$path/cpu.max"
        if [ "$quota" != max ]; then
            cpus=$(( (quota + period - 1) / period ))  # 1.5 CPUs of quota: 2 to share
            [ "$cpus" -lt "$usable" ] && usable=$cpus
        fi
    fi
    [ "$path" = / ] && break
    path=$(dirname "$path")
done

if [ "$usable" -lt 2 ]; then
    echo "cpu-check: $usable usable CPU here (affinity $affinity); the lab needs 2 (servers on one, Locust on the other): give the container more (Docker Desktop: Settings > Resources > CPUs; docker run --cpus 2, or no --cpus; a VM: 2 vCPUs)"
    exit 1
fi
echo "cpu-check: $usable usable CPUs"
