#!/usr/bin/env bash
# Runs one `meson test` suite of a build directory and reports it the way every test runner
# of the project does: meson's per-test result lines, one line per failed or skipped case,
# the log's end when something failed, and last `N passed, N failed[, N skipped]`. With
# --cmocka every cmocka case counts (scripts/testlog-count.py), else every test executable.
# Exits non-zero when anything failed.
#
# Usage: scripts/meson-suite.sh SUITE BUILD_DIR [--cmocka]
# Environment: MESON_TEST_PROCESSES (default 2), MESON_TIMEOUT_MULTIPLIER (default 3).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

name=${1:?usage: meson-suite.sh SUITE BUILD_DIR [--cmocka]}
dir=${2:?usage: meson-suite.sh SUITE BUILD_DIR [--cmocka]}
mode=("${@:3}")

if [[ ! -f $dir/build.ninja ]]; then
	echo "SKIP $name: $dir is not configured"
	echo "0 passed, 1 failed"
	exit 1
fi
if ! meson introspect "$dir" --tests 2>/dev/null | grep -qE "\"([^\"]*:)?$name\""; then
	echo "meson-suite: no tests in suite $name of $dir"
	echo "0 passed, 1 failed"
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rm -f "$dir/meson-logs/$name.json"
meson test -C "$dir" --no-rebuild --suite "$name" --logbase "$name" --print-errorlogs \
	--timeout-multiplier "${MESON_TIMEOUT_MULTIPLIER:-3}" \
	--num-processes "${MESON_TEST_PROCESSES:-2}" >"$log" 2>&1
rc=$?
# The per-test result lines, without the repeat in meson's closing summary.
awk '/^Summary of Failures/ { exit } /^ *[0-9]+\/[0-9]+ / { print }' "$log"
if [[ ! -f $dir/meson-logs/$name.json ]]; then
	echo "meson test did not run (exit status $rc):"
	tail -n 80 "$log"
	echo "0 passed, 1 failed"
	exit 1
fi
mapfile -t counts < <(python3 scripts/testlog-count.py "${mode[@]}" "$dir/meson-logs/$name.json")
p=0 f=1 s=0
if ((${#counts[@]} > 0)); then
	read -r p f s <<<"${counts[-1]}"
	if ((${#counts[@]} > 1)); then
		printf '%s\n' "${counts[@]:0:${#counts[@]}-1}" | sed 's/^skipped: /SKIP /'
	fi
fi
if ((rc != 0 && f == 0)); then
	echo "meson test exited with status $rc"
	f=1
fi
if ((f > 0)); then
	echo "--- end of meson's log:"
	tail -n 150 "$log"
	echo "---"
fi
line="$p passed, $f failed"
((s > 0)) && line+=", $s skipped"
echo "$line"
((f == 0))
