#!/bin/sh
# Makes the image's base with no container registry: Debian 12 (minbase) by
# debootstrap from Debian's own mirror, imported into podman as `debian:12`
# (stored as localhost/debian:12) with the PATH and CMD of Docker's debian:12.
# `make image-test` builds FROM it with --pull=never: nothing is pulled from a registry.
#   sh setup/debian-base.sh           # make it unless podman already has it
#   sh setup/debian-base.sh --force   # make it again
set -eu
PATH="$PATH:/usr/sbin:/sbin"
NAME=debian:12
SUITE=bookworm
# ca-certificates: the host's pip and apt configuration may name
# /etc/ssl/certs/ca-certificates.crt, and a build step must not have to install it
INCLUDE=ca-certificates

say() { echo "debian-base: $*"; }

# The host's Debian mirror (its apt sources), so the base and every apt-get in the
# build use the mirror the host was configured for; Debian's CDN when none is named.
host_mirror() {
    mirror=$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources \
                 /etc/apt/sources.list.d/*.list /etc/apt/sources.list |
             grep -o -E 'https?://[^ ]+/debian/?( |$)' | head -n 1 | tr -d ' ')
    echo "${mirror:-http://deb.debian.org/debian}"
}

# The host's apt configuration the base keeps: its Debian sources (only those that
# name Debian's archive, whose keys the base has) and Acquire settings (proxies,
# date checks for snapshots); nothing that runs hooks.
copy_apt_config() {
    root=$1
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] && grep -q -E 'https?://[^ ]*debian\.(org|net)/' "$f" || continue
        cp "$f" "$root/etc/apt/sources.list.d/"
        : >"$root/etc/apt/sources.list"  # the copied sources replace debootstrap's line
    done
    for f in /etc/apt/apt.conf.d/*; do
        [ -f "$f" ] && grep -q '^Acquire::' "$f" && ! grep -q -i 'invoke' "$f" || continue
        cp "$f" "$root/etc/apt/apt.conf.d/"
    done
}

# Debian's images leave out what a container never needs; the same here keeps the
# base small (apt lists and caches, man pages are rebuilt or fetched on demand).
slim() {
    root=$1
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
           "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
}

# debootstrap mounts /proc and /sys in the tree while it works and can leave them on a
# failure: unmount whatever is under it (deepest first) before the tree is deleted.
remove_tree() {
    findmnt -rn -o TARGET | grep "^$1/" | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf --one-file-system "$1"
}

make_base() {
    command -v debootstrap >/dev/null || { say "no debootstrap: apt-get install debootstrap"; exit 1; }
    work=$(mktemp -d /var/tmp/ftl-debian-base.XXXXXX)
    # the unpacked tree goes whatever happens; nothing is mounted in it after debootstrap
    trap 'remove_tree "$work"' EXIT
    trap 'exit 130' INT TERM
    mirror=$(host_mirror)
    say "debootstrap --variant=minbase $SUITE from $mirror"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$work/root" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; exit 1; }
    copy_apt_config "$work/root"
    slim "$work/root"
    tar -C "$work/root" --numeric-owner -c . |
        podman import --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            - "$NAME" >/dev/null
    say "imported as $NAME ($(podman image inspect --format '{{.Size}}' "$NAME") bytes)"
}

if [ "${1:-}" != --force ] && podman image exists "$NAME"; then
    say "$NAME is already in podman's storage (delete it, or --force, to make it again)"
else
    make_base
fi
