#!/bin/sh
# python314-root.sh CACHE: a root of Debian forky (testing) with its python3.14 and a
# venv of the real-time server's packages (/opt/venv), for the capacity study's
# --realtime-python (benchmarks/sandbox/python_root.py runs the server chrooted in it).
# Made here by debootstrap (minbase, plus python3.14 and its venv module) from the Debian
# mirror this box's apt names (setup/debian-base.sh's host_mirror), with debootstrap's sid
# script (Debian 12's debootstrap has none named forky). The venv holds requirements.lock's
# pins, with their hashes, of requirements-app.txt, gunicorn and gevent and what they need
# (setup/locks.py --subset), installed by the root's pip from the index this box's pip
# is configured with and its CA bundle (setup/package_sources.py), wheels only: every one
# has a cp314 or pure wheel, gevent's and greenlet's included, so nothing is built.
# Cached in CACHE/forky-KEY/ (results/python-roots, as the study's refusal says), KEY a hash of the inputs (this script, setup/debian-base.sh, the mirror, the pins): a
# second run finds it and builds nothing; about 50 s to build here (232 MB).
#   sh setup/python314-root.sh results/python-roots         # prints the root (builds it if need be)
#   sh setup/python314-root.sh --key results/python-roots   # prints the root's folder only
set -eu
PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."
DEBIAN_BASE_FUNCTIONS=1 . setup/debian-base.sh
FORKY=forky
PYTHON=python3.14
# ca-certificates: the root's pip reaches the index over HTTPS
INCLUDE=$PYTHON,$PYTHON-venv,ca-certificates
VENV=/opt/venv  # in the root: benchmarks/sandbox/python_root.py's VENV
SERVER="requirements-app.txt gunicorn gevent"  # what the real-time server imports

say() { echo "python314-root: $*"; }

pins() {
    python3 setup/locks.py --subset requirements.lock $SERVER
}

folder() {
    mirror=$(host_mirror) || exit 1  # the box names none: host_mirror said which setting
    key=$({ cat setup/python314-root.sh setup/debian-base.sh; echo "$mirror"; pins; } |
          sha256sum | cut -c 1-12)
    echo "$1/$FORKY-$key"
}

# A command in the root, with /proc mounted in a mount namespace of its own, and with
# CA set, that CA bundle in place of the root's: the mounts go with the command, whatever
# happens to it.
CA=
in_root() {
    root=$1
    shift
    unshare --mount --propagation private -- sh -c '
        root=$1 ca=$2
        shift 2
        mount -t proc proc "$root/proc" || exit 1
        [ -z "$ca" ] || mount --bind "$ca" "$root/etc/ssl/certs/ca-certificates.crt" || exit 1
        exec chroot "$root" "$@"' sh "$root" "$CA" "$@"
}

build() {
    out=$1 work=$(mktemp -d /var/tmp/ftl-python-root.XXXXXX)
    trap 'remove_tree "$work"' EXIT
    trap 'exit 130' INT TERM
    mirror=$(host_mirror)
    index=$(python3 setup/package_sources.py index)
    root=$work/root
    say "debootstrap --variant=minbase --include=$INCLUDE $FORKY (sid's script) from $mirror"
    debootstrap --variant=minbase --include="$INCLUDE" "$FORKY" "$root" "$mirror" \
        /usr/share/debootstrap/scripts/sid >"$work/debootstrap.log" 2>&1 ||
        { tail -n 20 "$work/debootstrap.log"; exit 1; }
    in_root "$root" "$PYTHON" -m venv "$VENV"
    pins >"$root/var/tmp/server.lock"
    say "pip install --require-hashes: $(grep -c '^[a-z]' "$root/var/tmp/server.lock") pins of requirements.lock, for $(in_root "$root" "$PYTHON" --version), from $index"
    # --isolated: no PIP_* variable of this box's (its local folders are not in the root);
    # the CA bundle its pip names, which may hold a proxy's CA that the root's lacks
    CA=$(python3 setup/package_sources.py pip-conf | sed -n 's/^cert = //p')
    in_root "$root" "$VENV/bin/pip" --isolated install --disable-pip-version-check \
        --index-url "$index" --only-binary=:all: --require-hashes -r /var/tmp/server.lock \
        >"$work/pip.log" 2>&1 || { tail -n 20 "$work/pip.log"; exit 1; }
    CA=
    in_root "$root" "$VENV/bin/pip" --isolated check --disable-pip-version-check
    rm "$root/var/tmp/server.lock"
    slim "$root"
    touch "$root$VENV/.installed"  # last: a root without it is unfinished
    mkdir -p "$(dirname "$out")"
    mv "$root" "$out"
    say "built $out ($(du -sh "$out" | cut -f 1))"
}

can_build() {
    command -v debootstrap >/dev/null && command -v unshare >/dev/null ||
        { say "no debootstrap or unshare: apt-get install debootstrap util-linux" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || { say "debootstrap and chroot need root: sudo sh $0" >&2; exit 1; }
}

cached_tree "${VENV#/}/.installed" "$@"
