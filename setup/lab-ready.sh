#!/bin/sh
# lab-ready [SOURCE]: a VM made ready for the lab, as root. The repository in /lab
# (SOURCE: a folder or a git URL; default: /lab as it is, else LAB_REPO), the `lab`
# command (setup/lab.sh) in /usr/local/bin, `make setup`, then a short `make lab`
# whose every check must pass (setup/ready-lab.sh). setup/cloud-init.yaml writes this
# same text to /usr/local/sbin/lab-ready (it runs before any clone exists); a VM made
# without that file (Lima) installs it from the clone (docs/laptops.md).
set -eu
CONF=/etc/flask-tuning-lab.conf
if [ "$(id -u)" != 0 ]; then
    echo "lab-ready: run it as root: sudo lab-ready $*" >&2
    exit 1
fi
# the box's own settings, where cloud-init wrote them (Lima's VM has none)
[ ! -f "$CONF" ] || . "$CONF"
source=${1:-${LAB_REPO:-}}
if [ -n "$source" ] && [ -d "$source" ] && [ "$source" != /lab ]; then
    mkdir -p /lab && cp -a "$source"/. /lab/
elif [ ! -f /lab/Makefile ] && [ -n "$source" ]; then
    git clone --depth 1 "$source" /lab
fi
if [ ! -f /lab/Makefile ]; then
    echo "lab-ready: no repository in /lab: copy one in and run lab-ready, or set LAB_REPO in $CONF" >&2
    exit 1
fi
cd /lab
# where sudo's secure_path finds it: `sudo lab`, the one way into the lab on a VM
install -m 0755 setup/lab.sh /usr/local/bin/lab
make setup
if ! sh setup/ready-lab.sh 0,2 10; then
    echo "lab-ready: the box is NOT ready (the lines above say why; /lab/results/latest/report.md)" >&2
    exit 1
fi
echo "lab-ready: the box is ready: sudo lab (a root shell in /lab with the lab's venv), then make lab"
if [ "${FTL_UI_ADDRESS:-127.0.0.1}" = 127.0.0.1 ]; then
    echo "lab-ready: Locust's web UI (lab up) listens on the VM's 127.0.0.1: from the laptop, ssh -L 8089:127.0.0.1:8089 USER@VM_ADDRESS, then http://localhost:8089 (Lima forwards it to the Mac's localhost itself)"
else
    echo "lab-ready: Locust's web UI (lab up) listens on $FTL_UI_ADDRESS: http://VM_ADDRESS:8089 from the laptop (Multipass: multipass info ftl gives the address)"
fi
