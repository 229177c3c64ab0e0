#!/usr/bin/env bash
# The host lane: the packages of this tree on a stock Debian 12 server, booted here in a VM.
#
#   1. the system: Debian 12 from Debian's archive with its own kernel (6.1), systemd and
#      cgroup v2 (tests/host/image.sh, cached by its inputs);
#   2. the packages (`make deb`, or those in DEB_DIR), checked against what the system holds:
#      the VM has no network, so every dependency must be in tests/host/packages.txt;
#   3. a lane disk (mkfs.ext4 -d, no loop mount) with the packages and tests/host/inside.sh;
#   4. the system booted under QEMU (TCG; HOST_LANE_ACCEL=kvm where KVM runs guests), its root
#      disk in snapshot mode so that the cached image never changes; host-lane.service runs
#      inside.sh and powers the machine off. Its checks arrive on the second serial port.
#
# Usage: tests/host/run.sh [DEB_DIR]    (root; DEB_DIR default build-deb, built when empty;
# the unit tests of the cgroup manager and the jail from BUILD, default build/)
# Prints the checks, then `N passed, N failed` (scripts/test.sh's summary line); exits non-zero
# when anything failed. HOST_LANE_KEEP=1 keeps the run's directory (console log included);
# HOST_LANE_INSIDE=SCRIPT runs another script inside instead of tests/host/inside.sh.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
debs=${1:-$repo/build-deb}
build=${BUILD:-$repo/build}
accel=${HOST_LANE_ACCEL:-tcg}
mem=${HOST_LANE_MEMORY:-4G}
timeout_s=${HOST_LANE_TIMEOUT:-840}

log() { printf 'host: %s\n' "$*" >&2; }
# A failure before the checks inside could run: one failed check, said.
die() {
	echo "FAIL host lane: $*"
	echo "0 passed, 1 failed"
	exit 1
}

((EUID == 0)) || die "needs root (mmdebstrap, QEMU)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is not installed"
t0=$SECONDS

if ! compgen -G "$debs/agent-sandbox_*.deb" >/dev/null; then
	log "no packages in $debs: building them"
	"$repo/scripts/build-deb.sh" "$debs" >&2 || die "make deb failed"
fi
image=$("$repo/tests/host/image.sh") || die "the Debian 12 system could not be built (tests/host/image.sh)"
log "system: $image (kernel $(cat "$image/kernel-release")), ready at $((SECONDS - t0)) s"

# Every dependency of the packages must be installed in the system already.
missing=()
for deb in "$debs"/agent-sandbox_*.deb "$debs"/agent-sandbox-cli_*.deb; do
	while read -r dep; do
		[[ -z $dep || $dep == agent-sandbox* ]] && continue
		grep -qx "$dep" "$image/packages" || missing+=("$dep")
	done < <(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/\|.*//; s/\(.*\)//; s/:any//; s/^ +| +$//g')
done
((${#missing[@]} == 0)) ||
	die "the packages depend on what the system lacks: ${missing[*]} (add to tests/host/packages.txt)"

run=$(mktemp -d /var/tmp/agent-sandbox-host.XXXXXX)
cleanup() {
	if [[ -n ${HOST_LANE_KEEP:-} ]]; then
		log "kept $run"
	else
		rm -rf "$run"
	fi
}
trap cleanup EXIT
mkdir -p "$run/lane/debs"
cp "$debs"/agent-sandbox_*.deb "$debs"/agent-sandbox-cli_*.deb "$run/lane/debs/"
install -m 0755 "${HOST_LANE_INSIDE:-$repo/tests/host/inside.sh}" "$run/lane/inside.sh"
# The integration tests (their harness and the tests inside.sh names), the jail's security
# tests, and the python template they use, built here (suite build), never in the VM.
mkdir -p "$run/lane/integration" "$run/lane/security" "$run/lane/templates/python"
cp "$repo"/tests/integration/*.py "$run/lane/integration/"
cp "$repo/tests/security/test_jail.py" "$run/lane/security/"
python=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}/templates/python
[[ -f $python/template.json && -f $python/rootfs.ext4 ]] ||
	die "the python template is not built in $python (scripts/ensure-templates.py python)"
cp "$python/template.json" "$run/lane/templates/python/"
cp --sparse=always "$python/rootfs.ext4" "$run/lane/templates/python/"
# The unit tests of the cgroup manager and the jail, run there against cgroup v2 and 6.1.
mkdir -p "$run/lane/unit"
for t in test-driver-cgroup test-driver-jail test-driver-jail-keep fake-agent; do
	cp "$build/tests/unit/driver/$t" "$run/lane/unit/" ||
		die "no $build/tests/unit/driver/$t (make build first)"
done
size=$(($(du -sm "$run/lane" | cut -f1) + 256))
mkfs.ext4 -q -F -L lane -d "$run/lane" "$run/lane.img" "${size}M" || die "mkfs.ext4 of the lane disk failed"

log "booting Debian 12 under QEMU ($accel, $mem, 2 CPUs); console: $run/console.log"
t1=$SECONDS
# Under TCG a plain x86-64 CPU, which QEMU emulates completely; the host's own under KVM.
cpu=qemu64
[[ $accel == kvm ]] && cpu=host
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 -accel "$accel" -M q35 -cpu "$cpu" -smp 2 \
	-m "$mem" -nodefaults -display none -no-reboot \
	-kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
	-append "console=ttyS0 root=/dev/vda rw panic=-1 systemd.show_status=0" \
	-drive "file=$image/root.img,format=raw,if=virtio,snapshot=on" \
	-drive "file=$run/lane.img,format=raw,if=virtio,readonly=on" \
	-serial "file:$run/console.log" -serial "file:$run/results.log" >"$run/qemu.log" 2>&1
rc=$?
log "the system ran $((SECONDS - t1)) s (QEMU's status $rc)"
# A serial port's lines end in CR LF.
tr -d '\r' <"$run/results.log" >"$run/results.txt" 2>/dev/null
cat "$run/results.txt"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$run/results.txt" | tail -n 1)
if [[ -z $summary ]]; then
	echo "--- the system's console (last 60 lines):"
	tail -n 60 "$run/console.log" 2>/dev/null
	cat "$run/qemu.log"
	((rc == 124)) && die "the system did not finish within ${timeout_s} s"
	die "the checks inside did not finish (QEMU's status $rc)"
fi
log "lane: $((SECONDS - t0)) s in all"
[[ $summary == *" 0 failed"* ]]
