#!/bin/sh
# vm-disk.sh CACHE: a Debian 12 (bookworm) cloud disk for `make vm-test`, made here by
# debootstrap (no image downloaded): a kernel, systemd, cloud-init, openssh-server and
# sudo, as Debian's genericcloud image has them, so cloud-init makes its default user
# `debian` with passwordless sudo and Debian's sudoers (secure_path). The tree becomes
# an ext4 file system image (mkfs.ext4 -d), the whole raw disk, no partition table nor
# boot loader: QEMU boots the tree's own kernel and initrd (-kernel/-initrd/-append
# root=/dev/vda), the simplest way to boot it, which vmlinuz and initrd.img beside the
# disk are for. Cached in CACHE/bookworm-KEY/, KEY a hash of the inputs (this script,
# setup/debian-base.sh, the mirror): a second run finds it and builds nothing.
#   sh setup/vm-disk.sh results/vm-cache          # prints the folder (builds it if need be)
#   sh setup/vm-disk.sh --key results/vm-cache    # prints the folder only
set -eu
PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."
SUITE=bookworm ARCH=amd64
DEBIAN_BASE_FUNCTIONS=1 . setup/debian-base.sh
# What a cloud image has beyond debootstrap's default (required and important): the
# kernel, cloud-init, sshd, sudo; dbus for hostnamectl (cloud-init names the host);
# ifupdown and a DHCP client, the network cloud-init's fallback config renders to (eni);
# locales, which cloud-init's locale module runs (update-locale; without it: an error).
PACKAGES=linux-image-amd64,systemd-sysv,udev,dbus,cloud-init,openssh-server,sudo,ifupdown,isc-dhcp-client,ca-certificates,locales
SIZE=20G  # the pages' disk (docs/laptops.md); sparse: only what is written takes space

say() { echo "vm-disk: $*"; }

folder() {
    mirror=$(host_mirror) || exit 1  # the box names none: host_mirror said which setting
    key=$({ cat setup/vm-disk.sh setup/debian-base.sh; echo "$mirror"; } | sha256sum | cut -c 1-12)
    echo "$1/$SUITE-$key"
}

# The tree made a cloud image: no host keys, no machine id (each boot of a new VM makes
# its own, as cloud-init and systemd do on first boot), the root file system in fstab,
# a hostname until cloud-init sets one, and the host's resolv.conf gone (DHCP writes it).
cloud_image() {
    root=$1
    rm -f "$root"/etc/ssh/ssh_host_* "$root/var/lib/dbus/machine-id" "$root/etc/resolv.conf"
    : >"$root/etc/machine-id"
    echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" >"$root/etc/fstab"
    echo debian >"$root/etc/hostname"
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
    # en_US.UTF-8, the locale cloud-init's locale module sets: Debian's locale-gen makes
    # what /etc/locale.gen names, not its argument (else update-locale fails, an error)
    sed -i 's/^# *\(en_US.UTF-8 UTF-8\)$/\1/' "$root/etc/locale.gen" &&
        chroot "$root" locale-gen >/dev/null || return 1
    # as Debian's cloud images: cloud-init keeps /etc/hosts, so the VM's name resolves
    # (else sudo says "unable to resolve host" on every call)
    echo "manage_etc_hosts: true" >"$root/etc/cloud/cloud.cfg.d/01_debian_cloud.cfg"
    grep -q '^  *name: debian$' "$root/etc/cloud/cloud.cfg" ||
        { say "cloud-init's cloud.cfg has no default user debian"; return 1; }
    slim "$root"
}

# The cloud image's packages by apt-get in the tree (debootstrap's --include leaves
# cloud-init's Python half configured: "Failure while configuring base packages"), no
# service started in it (policy-rc.d), /proc, /sys and /dev for the kernel's initramfs.
install_packages() {
    root=$1
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
    mount -t proc proc "$root/proc" && mount -t sysfs sysfs "$root/sys" && mount --bind /dev "$root/dev"
    DEBIAN_FRONTEND=noninteractive nice -n 19 chroot "$root" apt-get install -y \
        --no-install-recommends $(echo "$PACKAGES" | tr ',' ' ')
    rc=$?
    umount "$root/dev" "$root/sys" "$root/proc"
    rm -f "$root/usr/sbin/policy-rc.d"
    return $rc
}

build() {
    out=$1 work=$(mktemp -d /var/tmp/ftl-vm-disk.XXXXXX)
    trap 'remove_tree "$work"' EXIT
    trap 'exit 130' INT TERM
    mirror=$(host_mirror)
    say "debootstrap --arch=$ARCH $SUITE from $mirror, then apt-get install $PACKAGES (nice -n 19)"
    nice -n 19 debootstrap --arch="$ARCH" "$SUITE" "$work/root" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; exit 1; }
    install_packages "$work/root" >"$work/apt.log" 2>&1 || { tail -n 20 "$work/apt.log"; exit 1; }
    cloud_image "$work/root"
    cp "$work"/root/boot/vmlinuz-* "$work/vmlinuz" && cp "$work"/root/boot/initrd.img-* "$work/initrd.img"
    truncate -s "$SIZE" "$work/disk.raw"
    nice -n 19 mkfs.ext4 -q -F -L root -d "$work/root" "$work/disk.raw"
    mkdir -p "$out"
    mv "$work/vmlinuz" "$work/initrd.img" "$work/disk.raw" "$out/"
    say "built $out ($(du -sh "$out/disk.raw" | cut -f 1) used of $SIZE)"
}

can_build() {
    command -v debootstrap >/dev/null && command -v mkfs.ext4 >/dev/null ||
        { say "no debootstrap or mkfs.ext4: apt-get install debootstrap e2fsprogs" >&2; exit 1; }
}

cached_tree disk.raw "$@"
