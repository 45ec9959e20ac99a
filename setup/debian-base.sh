#!/bin/sh
# Makes the image's base with no container registry: Debian (minbase) by debootstrap
# from the Debian mirror this box's apt names (or DEBIAN_MIRROR; with neither it stops,
# saying so: setup/package_sources.py), imported into podman with the PATH and CMD of
# Docker's debian images. `make image-test` builds FROM it with --pull=never: nothing is pulled
# from a registry. SUITE (bookworm, trixie) and ARCH (amd64, arm64: a foreign one runs
# through qemu-user, registered with binfmt_misc) choose it; the name says both:
#   debian:12 (bookworm, this machine's arch), debian:13 (trixie), debian:12-arm64 ...
# (podman stores them as localhost/NAME).
#   sh setup/debian-base.sh           # make it unless podman already has it
#   sh setup/debian-base.sh --force   # make it again
#   SUITE=trixie ARCH=arm64 sh setup/debian-base.sh --name   # print the name only
# (Sourced with DEBIAN_BASE_FUNCTIONS=1, it defines its functions and runs nothing.)
set -eu
PATH="$PATH:/usr/sbin:/sbin"
SUITE=${SUITE:-bookworm}
HOST_ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH=${ARCH:-$HOST_ARCH}
case $SUITE in
    bookworm) NAME=debian:12 ;;
    trixie) NAME=debian:13 ;;
    *) echo "debian-base: SUITE=$SUITE: bookworm (Debian 12) or trixie (Debian 13)" >&2; exit 2 ;;
esac
case $ARCH in
    amd64|arm64) ;;
    *) echo "debian-base: ARCH=$ARCH: amd64 or arm64" >&2; exit 2 ;;
esac
[ "$ARCH" = "$HOST_ARCH" ] || NAME=$NAME-$ARCH
# ca-certificates: the host's pip and apt configuration may name
# /etc/ssl/certs/ca-certificates.crt, and a build step must not have to install it
INCLUDE=ca-certificates

say() { echo "debian-base: $*"; }
# what the box's apt names (run from the repository's root, as every caller does)
SOURCES="python3 setup/package_sources.py"

# The host's Debian mirror (its apt sources, or DEBIAN_MIRROR), so the base and every
# apt-get in the build use the mirror the host was configured for; one line and a
# failure when it names none.
host_mirror() {
    $SOURCES debian-mirror
}

# The host's apt configuration the base keeps: its Debian sources (only those that
# name Debian's archive, whose keys the base has; the host's release renamed to SUITE,
# so bookworm-updates becomes trixie-updates) and Acquire settings (proxies, date
# checks for snapshots); nothing that runs hooks.
copy_apt_config() {
    root=$1
    host_suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    for f in $($SOURCES debian-sources); do
        if [ -n "$host_suite" ]; then
            sed "s/\\b$host_suite\\b/$SUITE/g" "$f" \
                >"$root/etc/apt/sources.list.d/${f##*/}"
        else
            cp "$f" "$root/etc/apt/sources.list.d/"
        fi
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

# The command line of a tree cached by the hash of its inputs (setup/vm-disk.sh,
# setup/python314-root.sh), each of which defines `folder CACHE` (where its tree goes),
# `can_build` (its tools, in one line when missing) and `build FOLDER`:
#   cached_tree MARKER CACHE    prints the folder, built unless FOLDER/MARKER is there
#   cached_tree MARKER --key CACHE    prints the folder only
cached_tree() {
    marker=$1
    shift
    [ $# -ge 1 ] || { echo "usage: sh $0 [--key] CACHE" >&2; exit 2; }
    if [ "$1" = --key ]; then
        folder "$2"
        exit 0
    fi
    out=$(folder "$1")
    if [ -f "$out/$marker" ]; then
        say "cached: $out (delete it to build it again)" >&2
    else
        can_build
        build "$out" >&2
    fi
    echo "$out"
}

make_base() {
    command -v debootstrap >/dev/null || { say "no debootstrap: apt-get install debootstrap"; exit 1; }
    mirror=$(host_mirror)
    work=$(mktemp -d /var/tmp/ftl-debian-base.XXXXXX)
    # the unpacked tree goes whatever happens; nothing is mounted in it after debootstrap
    trap 'remove_tree "$work"' EXIT
    trap 'exit 130' INT TERM
    say "debootstrap --variant=minbase --arch=$ARCH $SUITE from $mirror"
    debootstrap --variant=minbase --arch="$ARCH" --include="$INCLUDE" "$SUITE" "$work/root" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; exit 1; }
    copy_apt_config "$work/root"
    slim "$work/root"
    tar -C "$work/root" --numeric-owner -c . |
        podman import --arch "$ARCH" --os linux --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            - "$NAME" >/dev/null
    say "imported as $NAME ($(podman image inspect --format '{{.Size}}' "$NAME") bytes)"
}

if [ "${DEBIAN_BASE_FUNCTIONS:-}" = 1 ]; then
    :  # sourced for its functions (setup/vm-disk.sh, setup/python314-root.sh: the mirror,
       # the apt config, remove_tree, cached_tree)
elif [ "${1:-}" = --name ]; then
    echo "$NAME"
elif [ "${1:-}" != --force ] && podman image exists "$NAME"; then
    say "$NAME is already in podman's storage (delete it, or --force, to make it again)"
else
    make_base
fi
