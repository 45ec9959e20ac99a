#!/bin/sh
# services-off.sh PACKAGE...: apt-get install these Debian packages, each of which starts
# a service of its own as it is installed and at every boot (Debian's `prometheus`: a
# Prometheus on 0.0.0.0:9090 scraping this machine; its exporters, on :9113 and :9121),
# and leave every one of those services stopped and disabled. The lab runs its own
# Prometheus and exporters on its hosts, per stage, started and stopped with the stage
# (benchmarks/run/prometheus.py); a daemon left on the machine would be one more process
# on the lab's CPUs, and one more listener on the machine's network.
#   sh setup/services-off.sh prometheus prometheus-nginx-exporter prometheus-redis-exporter
set -eu
POLICY=/usr/sbin/policy-rc.d
made=""
if [ ! -e "$POLICY" ]; then
    # What invoke-rc.d (SysV) and deb-systemd-invoke (systemd) ask before a package's
    # script starts its service; 101: "action forbidden". An image build usually has one
    # already (a container cannot start services); a box or a VM does not. Ours only
    # while apt-get runs.
    printf '#!/bin/sh\nexit 101\n' > "$POLICY"
    chmod 755 "$POLICY"
    made=1
fi
trap '[ -z "$made" ] || rm -f "$POLICY"' EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
for pkg in "$@"; do
    # not at boot either: update-rc.d removes the SysV script's links and, where systemctl
    # is installed, the systemd unit's (`systemctl --root=/ disable`: systemd need not run)
    if [ -x "/etc/init.d/$pkg" ]; then
        update-rc.d "$pkg" disable >/dev/null 2>&1 || true
    elif command -v systemctl >/dev/null 2>&1; then
        systemctl --root=/ --quiet disable "$pkg.service" >/dev/null 2>&1 || true
    fi
done
