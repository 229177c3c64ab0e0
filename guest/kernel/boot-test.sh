#!/usr/bin/env bash
# Boots the guest kernel under QEMU's microvm machine the way the VM drivers
# do, with a template's rootfs.ext4 as a read-only virtio-blk root, and
# checks from inside the guest that what the drivers rely on is there:
# devtmpfs, the named virtio-serial port "agent", virtio-net, virtio-rng,
# the vsock transport. Prints the boot time to init.
#
# usage: guest/kernel/boot-test.sh [VMLINUX [ROOTFS_DIR]]
#   VMLINUX     default $ARTIFACTS/vmlinux
#   ROOTFS_DIR  a template's rootfs/ directory with busybox in it
#               (default $ARTIFACTS/templates/base/rootfs)
# Environment: FIRECRACKER_ARTIFACTS_DIR, QEMU_ACCEL (default tcg),
#              BOOT_TEST_ACPI (on|off, default on),
#              BOOT_TEST_TSC_KHZ (host TSC frequency; found out if unset),
#              BOOT_TEST_APPEND (more kernel parameters, e.g. quiet).
#
# Under TCG the guest's TSC runs at the host's TSC rate, but the kernel
# calibrates it against the emulated PIT, which fails on a loaded host; the
# kernel then has no working clock and hangs before init. Passing the rate
# as tsc_early_khz= skips that calibration (KVM guests use kvm-clock and do
# not need it).
set -euo pipefail

artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
vmlinux=${1:-$artifacts/vmlinux}
rootfs=${2:-$artifacts/templates/base/rootfs}
accel=${QEMU_ACCEL:-tcg}
acpi=${BOOT_TEST_ACPI:-on}

log() { printf 'boot-test: %s\n' "$*" >&2; }
die() {
	printf 'boot-test: error: %s\n' "$*" >&2
	exit 1
}

[[ -r $vmlinux ]] || die "no kernel at $vmlinux (run guest/kernel/build.sh)"
[[ -x $rootfs/bin/busybox ]] || die "no busybox rootfs at $rootfs (run templates/build.sh base)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is required (apt-get install qemu-system-x86)"

# host_tsc_khz: the host's TSC frequency in kHz, from the host kernel's own
# calibration when its log still has it, else from /proc/cpuinfo.
host_tsc_khz() {
	local mhz
	mhz=$(dmesg 2>/dev/null | sed -n 's/.*tsc: Refined TSC clocksource calibration: \([0-9.]*\) MHz.*/\1/p' | tail -n 1)
	[[ -n $mhz ]] || mhz=$(dmesg 2>/dev/null | sed -n 's/.*tsc: Detected \([0-9.]*\) MHz processor.*/\1/p' | tail -n 1)
	[[ -n $mhz ]] || mhz=$(awk -F: '/^cpu MHz/ { gsub(/ /, "", $2); print $2; exit }' /proc/cpuinfo)
	[[ -n $mhz ]] || return 1
	awk -v m="$mhz" 'BEGIN { printf "%d\n", m * 1000 + 0.5 }'
}

tmp=$(mktemp -d)
qemu_pid=""
cleanup() {
	if [[ -n $qemu_pid ]]; then kill "$qemu_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# A copy of the rootfs with a test init; the template itself stays as built.
cp -a "$rootfs" "$tmp/root"
cat >"$tmp/root/boot-test-init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo "BOOT-TEST: init reached, uptime $(cut -d' ' -f1 /proc/uptime) s"
for p in /sys/class/virtio-ports/*; do
	[ -e "$p/name" ] && echo "BOOT-TEST: port $(basename "$p") name=$(cat "$p/name") dev=$([ -c "/dev/$(basename "$p")" ] && echo yes || echo no)"
done
[ -d /sys/class/net/eth0 ] && echo "BOOT-TEST: net eth0"
[ -c /dev/hwrng ] && echo "BOOT-TEST: hwrng $(cat /sys/class/misc/hw_random/rng_current)"
[ -d /sys/bus/virtio/drivers/vmw_vsock_virtio_transport ] && echo "BOOT-TEST: vsock transport"
grep -q ' / ext4 ' /proc/mounts && echo "BOOT-TEST: root ext4"
grep -q '^devtmpfs /dev ' /proc/mounts && echo "BOOT-TEST: devtmpfs"
[ -x /sbin/sandbox-agent ] && echo "BOOT-TEST: agent present"
echo "BOOT-TEST: done"
poweroff -f
EOF
chmod 0755 "$tmp/root/boot-test-init"
mkfs.ext4 -q -F -O ^has_journal -E root_owner=0:0 -d "$tmp/root" "$tmp/root.ext4" 64M >/dev/null

# The command line the VM drivers pass (plus init= for this test).
cmdline="console=ttyS0 reboot=k panic=-1 root=/dev/vda rootfstype=ext4 ro init=/boot-test-init"
[[ $acpi == off ]] && cmdline+=" acpi=off"
[[ -n ${BOOT_TEST_APPEND:-} ]] && cmdline+=" $BOOT_TEST_APPEND"
if [[ $accel == tcg ]]; then
	tsc_khz=${BOOT_TEST_TSC_KHZ:-$(host_tsc_khz || true)}
	[[ -n $tsc_khz ]] && cmdline+=" tsc_early_khz=$tsc_khz"
fi
log "kernel command line: $cmdline"

start=$(date +%s.%N)
timeout 120 qemu-system-x86_64 -M "microvm,acpi=$acpi" -accel "$accel" -m 256 -smp 1 \
	-nodefaults -no-user-config -nographic -no-reboot -serial stdio \
	-kernel "$vmlinux" -append "$cmdline" \
	-drive "id=root,file=$tmp/root.ext4,format=raw,if=none,readonly=on" \
	-device virtio-blk-device,drive=root \
	-device virtio-serial-device \
	-chardev "socket,id=agent,path=$tmp/agent.sock,server=on,wait=off" \
	-device virtserialport,chardev=agent,name=agent \
	-netdev user,id=net0,restrict=on -device virtio-net-device,netdev=net0 \
	-device virtio-rng-device \
	</dev/null >"$tmp/console.log" 2>&1 &
qemu_pid=$!

reached=""
while kill -0 "$qemu_pid" 2>/dev/null; do
	if [[ -z $reached ]] && grep -q 'BOOT-TEST: init reached' "$tmp/console.log"; then
		reached=$(date +%s.%N)
	fi
	grep -q 'BOOT-TEST: done' "$tmp/console.log" && break
	sleep 0.05
done
[[ -n $reached ]] || reached=$(date +%s.%N)
wait "$qemu_pid" || true
qemu_pid=""

fail=0
expect() {
	if grep -q "BOOT-TEST: $1" "$tmp/console.log"; then
		log "ok: $2"
	else
		log "FAIL: $2"
		fail=1
	fi
}
expect 'init reached' "kernel booted to init (root=/dev/vda)"
expect 'port vport[0-9]*p1 name=agent dev=yes' "virtio-serial port 'agent' as /dev/vportNp1"
expect 'net eth0' "virtio-net eth0"
expect 'hwrng virtio_rng' "virtio-rng"
expect 'vsock transport' "virtio vsock transport"
expect 'root ext4' "ext4 root"
expect 'devtmpfs' "devtmpfs on /dev"
expect 'agent present' "/sbin/sandbox-agent in the rootfs"
if ((fail)); then
	sed 's/^/    | /' "$tmp/console.log" >&2
	die "guest checks failed"
fi
grep 'BOOT-TEST: ' "$tmp/console.log" | tr -d '\r' | sed 's/^/    /' >&2
printf 'boot-test: init reached %.2f s after qemu started (accel %s, acpi %s)\n' \
	"$(echo "$reached - $start" | bc)" "$accel" "$acpi" >&2
