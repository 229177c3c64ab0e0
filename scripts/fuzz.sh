#!/usr/bin/env bash
# Runs every libFuzzer target of the fuzz suite for FUZZ_SECONDS each (default 60), growing a
# working corpus in tests/fuzz/corpus-run/<target>/ from the seed directories the suite passes
# to the target. Crash reproducers are written to tests/fuzz/corpus-run/ as crash-*.
#
# Usage: FUZZ_SECONDS=300 scripts/fuzz.sh [BUILD_DIR]   (default build-fuzz)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
work=tests/fuzz/corpus-run

[[ -f $build/build.ninja ]] || {
	echo "fuzz: $build is not configured (run make fuzz)" >&2
	exit 1
}
ninja -C "$build" >/dev/null

# One line per target: the executable, then the directories among its test arguments.
mapfile -t targets < <(meson introspect "$build" --tests | python3 -c '
import json, os, sys
for t in json.load(sys.stdin):
    if not any(s == "fuzz" or s.endswith(":fuzz") for s in t.get("suite", [])):
        continue
    cmd = t["cmd"]
    dirs = [a for a in cmd[1:] if os.path.isdir(a)]
    print("\t".join([cmd[0]] + dirs))
')

if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz targets in $build"
	exit 0
fi

mkdir -p "$work"
failed=0
for line in "${targets[@]}"; do
	IFS=$'\t' read -r -a parts <<<"$line"
	exe=${parts[0]}
	name=$(basename "$exe")
	mkdir -p "$work/$name"
	echo "fuzz: $name for ${seconds}s"
	if ! "$exe" -max_total_time="$seconds" -print_final_stats=1 \
		-artifact_prefix="$work/" "$work/$name" "${parts[@]:1}"; then
		echo "fuzz: $name FAILED (reproducer in $work/)"
		failed=$((failed + 1))
	fi
done
echo "fuzz: ${#targets[@]} targets, $failed failed"
((failed == 0))
