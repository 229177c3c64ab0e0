#!/usr/bin/env bash
# End-to-end tests of the VM drivers, run against the real daemon:
#   1. the tests of the shared integration suite (tests/integration) that exercise what
#      differs between drivers (tagged `driver`, see tests/integration/runner.py), with
#      DRIVER=qemu; E2E_ALL=1 runs the whole suite instead;
#   2. the VM-specific checks of tests/e2e/test_qemu.py (entropy and clock of restored
#      sessions, shared pages, a killed VM, snapshot reuse and rebuild, a guest that panics)
#      , test_qemu_storage.py (disks and volumes of VMs) and test_qemu_lifecycle.py
#      (hibernation: a VM saved whole to disk, resumed with its processes running).
# Prints each part's output, then `N passed, N failed, N skipped` summed over both, last.
# Exits non-zero when a test failed. Fails at once, saying why, when QEMU, the guest kernel,
# the base template's rootfs.ext4 or the daemon is missing: `make test` installs or builds
# each of them, so none is a reason to skip.
#
# Environment: SANDBOXD (default build/src/sandboxd), FIRECRACKER_ARTIFACTS_DIR,
# E2E_ONLY_VM=1 to skip the integration suite, E2E_ALL=1 to run all of it, E2E_TESTS to name
# tests of either file to run (e.g. RestoreTest.test_snapshot_files DiskTest).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

export SANDBOXD=${SANDBOXD:-build/src/sandboxd}
artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
qemu=${SANDBOX_QEMU_BIN:-qemu-system-x86_64}

why=""
if ! command -v "$qemu" >/dev/null; then
	why="$qemu is not installed (apt-get install qemu-system-x86)"
elif [[ ! -f $artifacts/vmlinux ]]; then
	why="no guest kernel at $artifacts/vmlinux (run guest/kernel/build.sh)"
elif [[ ! -f $artifacts/templates/base/rootfs.ext4 ]]; then
	why="no $artifacts/templates/base/rootfs.ext4 (run templates/build.sh base)"
elif [[ ! -x $SANDBOXD ]]; then
	why="sandboxd is not built at $SANDBOXD"
fi
if [[ -n $why ]]; then
	echo "e2e (qemu): cannot run: $why"
	echo "0 passed, 1 failed"
	exit 1
fi

passed=0 failed=0 skipped=0
# Adds the counts of a part's closing `N passed, N failed[, N skipped]` line.
count() {
	local line
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n1)
	if [[ -z $line ]]; then
		echo "e2e: $2 printed no summary: counted as one failure"
		failed=$((failed + 1))
		return
	fi
	local p f s
	p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")
	f=$(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$line")
	s=$(sed -nE 's/.*, ([0-9]+) skipped.*/\1/p' <<<"$line")
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT

if [[ ${E2E_ONLY_VM:-0} != 1 ]]; then
	tags=driver
	[[ ${E2E_ALL:-0} == 1 ]] && tags=
	echo "== integration suite, DRIVER=qemu${tags:+, tests tagged $tags}"
	DRIVER=qemu TEST_TAGS=$tags tests/integration/run.sh 2>&1 | tee "$log"
	count "$log" "the integration suite"
fi

echo "== VM-specific checks (tests/e2e/test_qemu.py, test_qemu_storage.py, test_qemu_lifecycle.py)"
read -r -a names <<<"${E2E_TESTS:-}"
python3 -u - "${names[@]}" <<'PY' 2>&1 | tee "$log"
import sys
import unittest

sys.path[:0] = ["tests/e2e", "tests/integration"]
import runner  # noqa: E402
import test_qemu  # noqa: E402
import test_qemu_lifecycle  # noqa: E402
import test_qemu_storage  # noqa: E402

loader = unittest.defaultTestLoader
modules = [test_qemu, test_qemu_storage, test_qemu_lifecycle]
if len(sys.argv) > 1:
    # A name is looked up in the module that has its class.
    suite = unittest.TestSuite(
        loader.loadTestsFromName(name, m) for name in sys.argv[1:] for m in modules
        if name.split(".")[0] in vars(m) and vars(m)[name.split(".")[0]].__module__ == m.__name__)
else:
    suite = unittest.TestSuite(loader.loadTestsFromModule(m) for m in modules)
sys.exit(runner.run(suite))
PY
count "$log" "test_qemu.py, test_qemu_storage.py and test_qemu_lifecycle.py"

echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
