#!/usr/bin/env bash
# Builds the TypeScript SDK and runs its tests (node's test runner) against a real sandboxd.
# Prints `N passed, N failed[, N skipped]` last; exits non-zero when a test failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
if ! npx --no-install tsc -p tsconfig.json; then
	echo "sdk-typescript: tsc failed"
	echo "0 passed, 1 failed"
	exit 1
fi
out=$(node --test --test-reporter=tap test/ 2>&1)
status=$?
printf '%s\n' "$out"
pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' <<<"$out")
fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' <<<"$out")
skip=$(sed -n 's/^# skipped \([0-9]*\)$/\1/p' <<<"$out")
if [ -z "$pass" ]; then
	echo "0 passed, 1 failed"
	exit 1
fi
line="$pass passed, ${fail:-0} failed"
[ "${skip:-0}" != 0 ] && line="$line, $skip skipped"
echo "$line"
[ "$status" = 0 ]
