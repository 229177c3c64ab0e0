#!/usr/bin/env bash
# Tests of the guest kernel (guest/kernel/): the config fragment has what the VMs need, the
# kernel builds (or comes from its cache) into the artifacts directory, and it boots to init
# under QEMU with the base template's root filesystem, every device the drivers use present.
#
# The build is the one `make test` starts in the background when the run begins:
# guest/kernel/build.sh holds the cache's lock while it builds, so the call here waits for
# it and then finds the kernel cached. Run alone, it builds (about 10 minutes on 2 cores).
#
# Prints "ok NAME" or "FAIL NAME: reason" per test, then "N passed, N failed"; exits
# non-zero if a test failed. Nothing is skipped: QEMU is among the packages `make test`
# installs, the kernel and the base template are built by it.
#
# Environment: FIRECRACKER_ARTIFACTS_DIR, KERNEL_CACHE_DIR (see guest/kernel/build.sh).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

passed=0 failed=0

ok() {
	echo "ok $1"
	passed=$((passed + 1))
}
fail() {
	echo "FAIL $1: $2"
	[[ -s $tmp/out ]] && tail -n 30 "$tmp/out" | sed 's/^/    | /'
	failed=$((failed + 1))
}

test_config_fragment() {
	local f="$repo/guest/kernel/microvm.config" opt missing=()
	for opt in VIRTIO_MMIO VIRTIO_MMIO_CMDLINE_DEVICES VIRTIO_BLK VIRTIO_NET VIRTIO_CONSOLE \
		VSOCKETS VIRTIO_VSOCKETS EXT4_FS SERIAL_8250_CONSOLE HW_RANDOM_VIRTIO RANDOM_TRUST_CPU \
		DEVTMPFS DEVTMPFS_MOUNT TMPFS PVH; do
		grep -qx "CONFIG_$opt=y" "$f" || missing+=("CONFIG_$opt")
	done
	if ((${#missing[@]})); then
		fail kernel_config_fragment "microvm.config lacks ${missing[*]}"
	else
		ok kernel_config_fragment
	fi
}

test_builds() {
	local start=$SECONDS
	if ! "$repo/guest/kernel/build.sh" >"$tmp/path" 2>"$tmp/out"; then
		fail kernel_builds "guest/kernel/build.sh failed"
		return
	fi
	if [[ ! -s $artifacts/vmlinux ]]; then
		fail kernel_builds "no $artifacts/vmlinux after the build"
		return
	fi
	echo "kernel: $(cat "$tmp/path") ready after $((SECONDS - start)) s here"
	ok kernel_builds
}

test_boots() {
	local rootfs="$artifacts/templates/base/rootfs"
	if ! command -v qemu-system-x86_64 >/dev/null; then
		fail kernel_boots "qemu-system-x86_64 is not installed (package qemu-system-x86)"
		return
	fi
	if [[ ! -s $artifacts/vmlinux ]]; then
		fail kernel_boots "no kernel to boot"
		return
	fi
	if [[ ! -d $rootfs ]]; then
		fail kernel_boots "no base template at $rootfs (make base-template)"
		return
	fi
	if "$repo/guest/kernel/boot-test.sh" "$artifacts/vmlinux" "$rootfs" >"$tmp/out" 2>&1; then
		grep -i 'init' "$tmp/out" | tail -n 1
		ok kernel_boots
	else
		fail kernel_boots "the guest did not boot or lacks a device"
	fi
}

test_config_fragment
test_builds
test_boots

echo "$passed passed, $failed failed"
((failed == 0))
