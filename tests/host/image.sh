#!/usr/bin/env bash
# Builds the host lane's Debian 12 system: a stock bookworm from Debian's archive (mmdebstrap),
# with Debian's own kernel (linux-image-amd64), systemd as init and cgroup v2, as a raw ext4
# image made with `mkfs.ext4 -d` (no loop mount). The packages are tests/host/packages.txt.
#
# The result is cached outside the checkout, keyed by this script and the package list:
#   ${HOST_IMAGE_CACHE_DIR:-/var/cache/agent-sandbox/host}/<sha256>/{root.img,vmlinuz,initrd.img,packages}
# and its directory printed on stdout. Nothing in it is specific to this tree: the packages of
# the tree are installed at each run, in the VM (tests/host/run.sh).
#
# The system runs the lane by itself: host-lane.service (tests/host/system) mounts the second
# disk (/dev/vdb, read-only), runs its inside.sh with its output on the second serial port
# (/dev/ttyS1), and powers the machine off.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${HOST_IMAGE_CACHE_DIR:-/var/cache/agent-sandbox/host}
size=${HOST_IMAGE_SIZE:-6G}

log() { printf 'host-image: %s\n' "$*" >&2; }
die() {
	printf 'host-image: error: %s\n' "$*" >&2
	exit 1
}

((EUID == 0)) || die "needs root (mmdebstrap)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed"
mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages.txt" | sort -u)
key=$({
	cat "${BASH_SOURCE[0]}" "$here"/system/*
	printf '%s\n' "${packages[@]}" "$size"
} | sha256sum | cut -d' ' -f1)
dir=$cache_root/$key

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting"
	flock 9
fi
if [[ -f $dir/done ]]; then
	log "cached: $dir"
	echo "$dir"
	exit 0
fi

tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
root=$tmp/root
t0=$SECONDS
log "mmdebstrap bookworm (${#packages[@]} packages) into $root"
include=$(
	IFS=,
	echo "${packages[*]}"
)
# The lane's runner and unit (tests/host/system) are part of the image, and of its key.
# shellcheck disable=SC2016 # mmdebstrap's hooks get the root as $1
mmdebstrap --quiet --variant=minbase --include="$include" \
	--customize-hook='echo host-lane >"$1/etc/hostname"' \
	--customize-hook='printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\n" >"$1/etc/fstab"' \
	--customize-hook="copy-in $here/system/host-lane /usr/local/sbin" \
	--customize-hook="copy-in $here/system/host-lane.service /etc/systemd/system" \
	--customize-hook='chroot "$1" systemctl enable host-lane.service' \
	--customize-hook='chroot "$1" passwd -d root >/dev/null' \
	--customize-hook='chroot "$1" dpkg-query -W -f="\${Package}\n" >"$1/.packages"' \
	bookworm "$root" >&2 || die "mmdebstrap failed"

mv "$root/.packages" "$tmp/packages"
kernel=$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -n 1)
initrd=$(find "$root/boot" -maxdepth 1 -name 'initrd.img-*' | sort | tail -n 1)
[[ -n $kernel && -n $initrd ]] || die "no kernel or initrd in the image's /boot"
cp "$kernel" "$tmp/vmlinuz"
cp "$initrd" "$tmp/initrd.img"
basename "$kernel" | sed 's/^vmlinuz-//' >"$tmp/kernel-release"
log "mkfs.ext4 -d ($size)"
mkfs.ext4 -q -F -L host-lane -d "$root" "$tmp/root.img" "$size" >&2 || die "mkfs.ext4 failed"
rm -rf --one-file-system "$root"
touch "$tmp/done"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
log "built in $((SECONDS - t0)) s: $dir (kernel $(cat "$dir/kernel-release"))"
echo "$dir"
