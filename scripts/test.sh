#!/usr/bin/env bash
# Runs every test suite and ends with one line, `N passed, N failed` (`, N skipped` when any
# were), summing all suites. Exits non-zero if and only if something failed.
#
# Suites, in order; one whose runner is absent prints `suite X: not present` and counts nothing:
#   build      `make build`, `make asan`, `make fuzz-build` and `make base-template`, one test
#              each; Ninja keeps going past errors so that the other suites test what built
#   format     clang-format --dry-run over the tracked C sources (one test)
#   unit       `meson test --suite unit` in the ASan/UBSan build; every cmocka case counts
#   fuzz       `meson test --suite fuzz` in the libFuzzer build; every target counts once
#   sub-runners listed in `runners` below. Each is a script (with arguments) that prints, as
#              its last such line, `N passed, N failed[, N skipped]`, and one
#              `SKIP <test>: <reason>` line per skipped test; it exits non-zero when anything
#              failed. It is not present while the script, or a path among its arguments, is not.
#
# Logs go to $TEST_LOG_DIR.
#
# Environment:
#   BUILD, ASAN_BUILD, FUZZ_BUILD   build directories (build, build-asan, build-fuzz)
#   TEST_LOG_DIR             where each suite's full output is kept (build/test-logs)
#   TEST_BUDGET_SECONDS      time for all suites together (4200); a suite gets what is left
#   TEST_SUITE_SECONDS       longest any one sub-runner may take (1800)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

build=${BUILD:-build}
asan_build=${ASAN_BUILD:-build-asan}
fuzz_build=${FUZZ_BUILD:-build-fuzz}
log_dir=${TEST_LOG_DIR:-build/test-logs}
budget=${TEST_BUDGET_SECONDS:-4200}
suite_max=${TEST_SUITE_SECONDS:-1800}

# Sub-runners: "name script [arguments]". Add a line here for a new one.
runners=(
	"templates tests/templates/run.sh"
	"template-sessions tests/integration/run.sh tests/templates"
	"integration tests/integration/run.sh"
	"net tests/net/run.sh"
	"mcp tests/mcp/run.sh"
	"sdk-typescript sdk/typescript/run-tests.sh"
	"sdk-python tests/integration/run.sh sdk/python/tests"
	"cli tests/integration/run.sh tests/cli"
	"auth tests/integration/run.sh tests/auth"
	"metrics tests/integration/run.sh tests/metrics"
	"firecracker tests/integration/run.sh tests/firecracker"
	"e2e tests/e2e/run.sh"
)

mkdir -p "$log_dir"
# The suites drive the daemon built with ASan and UBSan, so that a memory error or a leak
# (reported at its exit, which the harness requires to be clean) fails the run.
export SANDBOXD=${SANDBOXD:-$root/$asan_build/src/sandboxd}
start=$SECONDS
passed=0 failed=0 skipped=0
skip_lines=()

# record NAME PASSED FAILED SKIPPED: adds to the totals and prints the suite's counts.
record() {
	passed=$((passed + $2)) failed=$((failed + $3)) skipped=$((skipped + $4))
	local line="suite $1: $2 passed, $3 failed"
	(($4 > 0)) && line+=", $4 skipped"
	echo "$line"
}

not_present() {
	echo "suite $1: not present ($2)"
}

# Prints the end of a log, for a suite that failed.
show_tail() {
	echo "--- last lines of $1:"
	tail -n "${2:-80}" "$1"
	echo "---"
}

suite_build() {
	local target log p=0 f=0
	for target in build asan fuzz-build base-template; do
		if [[ $target == base-template && ! -f templates/build.sh ]]; then
			echo "make base-template: not present (templates/build.sh)"
			continue
		fi
		log="$log_dir/make-$target.log"
		if make --no-print-directory NINJA_FLAGS="-k 0" BUILD="$build" \
			ASAN_BUILD="$asan_build" FUZZ_BUILD="$fuzz_build" "$target" >"$log" 2>&1; then
			echo "ok: make $target"
			p=$((p + 1))
		else
			echo "FAILED: make $target (full log: $log)"
			grep -E 'error|Error|FAILED' "$log" | head -n 40
			f=$((f + 1))
		fi
	done
	record build "$p" "$f" 0
}

suite_format() {
	local log="$log_dir/format.log" files
	if ! command -v clang-format >/dev/null; then
		not_present format "clang-format is not installed"
		return
	fi
	mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null)
	if ((${#files[@]} == 0)); then
		not_present format "no tracked C sources"
		return
	fi
	if clang-format --dry-run -Werror "${files[@]}" >"$log" 2>&1; then
		record format 1 0 0
	else
		grep -E '^[^ ].*: (error|warning):' "$log" | cut -d: -f1 | sort -u |
			sed 's/^/not formatted: /'
		record format 0 1 0
	fi
}

# meson_suite NAME BUILD_DIR [--cmocka]: runs one meson test suite and counts its cases.
meson_suite() {
	local name=$1 dir=$2 log="$log_dir/$1.log" rc counts
	local mode=("${@:3}")
	if [[ ! -f $dir/build.ninja ]]; then
		not_present "$name" "$dir is not configured"
		return
	fi
	if ! meson introspect "$dir" --tests 2>/dev/null | grep -qE "\"([^\"]*:)?$name\""; then
		not_present "$name" "no tests in suite $name"
		return
	fi
	rm -f "$dir/meson-logs/$name.json"
	meson test -C "$dir" --no-rebuild --suite "$name" --logbase "$name" --print-errorlogs \
		--timeout-multiplier 3 --num-processes 2 >"$log" 2>&1
	rc=$?
	# The per-test result lines, without the repeat in meson's closing summary.
	awk '/^Summary of Failures/ { exit } /^ *[0-9]+\/[0-9]+ / { print }' "$log"
	if [[ ! -f $dir/meson-logs/$name.json ]]; then
		echo "meson test did not run (exit status $rc)"
		show_tail "$log"
		record "$name" 0 1 0
		return
	fi
	mapfile -t counts < <(python3 scripts/testlog-count.py "${mode[@]}" "$dir/meson-logs/$name.json")
	local p=0 f=1 s=0 i
	if ((${#counts[@]} > 0)); then
		read -r p f s <<<"${counts[-1]}"
	fi
	for ((i = 0; i < ${#counts[@]} - 1; i++)); do
		echo "${counts[i]}"
	done
	if ((rc != 0 && f == 0)); then
		echo "meson test exited with status $rc"
		f=1
	fi
	((f > 0)) && show_tail "$log" 150
	record "$name" "$p" "$f" "$s"
}

# sub_runner NAME SCRIPT [ARGS...]: runs a script that reports its own counts.
sub_runner() {
	local name=$1 script=$2 log="$log_dir/$1.log" rc left limit summary arg
	local args=("${@:3}")
	for arg in "$script" "${args[@]}"; do
		if [[ $arg == */* && ! -e $arg ]]; then
			not_present "$name" "$arg"
			return
		fi
	done
	left=$((budget - (SECONDS - start)))
	limit=$((left < suite_max ? left : suite_max))
	if ((limit < 60)); then
		echo "suite $name: not run, the time budget of ${budget}s is spent"
		record "$name" 0 1 0
		return
	fi
	echo "== suite $name (${script}${args[*]:+ ${args[*]}}, at most ${limit}s)"
	timeout --kill-after=30 "$limit" bash "$script" "${args[@]}" 2>&1 </dev/null | tee "$log"
	rc=${PIPESTATUS[0]}
	summary=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" |
		tail -n 1)
	local p=0 f=0 s=0
	if [[ -n $summary ]]; then
		summary=${summary#*: }
		p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$summary")
		f=$(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$summary")
		[[ $summary == *skipped ]] && s=$(sed -E 's/.*, ([0-9]+) skipped$/\1/' <<<"$summary")
	fi
	if ((rc == 124 || rc == 137)); then
		echo "suite $name: timed out after ${limit}s"
		f=$((f + 1))
	elif [[ -z $summary ]]; then
		echo "suite $name: printed no \`N passed, N failed\` line (exit status $rc)"
		f=$((f + 1))
	elif ((rc != 0 && f == 0)); then
		echo "suite $name: exited with status $rc"
		f=$((f + 1))
	fi
	mapfile -t -O "${#skip_lines[@]}" skip_lines < <(grep -E '^SKIP ' "$log" | sed "s/^/$name: /")
	record "$name" "$p" "$f" "$s"
}

main() {
	local entry words summary
	suite_build
	suite_format
	meson_suite unit "$asan_build" --cmocka
	meson_suite fuzz "$fuzz_build"
	for entry in "${runners[@]}"; do
		read -r -a words <<<"$entry"
		sub_runner "${words[@]}"
	done

	if ((${#skip_lines[@]} > 0)); then
		echo "skipped tests:"
		printf '  %s\n' "${skip_lines[@]}"
	fi
	echo "time: $((SECONDS - start))s"
	summary="$passed passed, $failed failed"
	((skipped > 0)) && summary+=", $skipped skipped"
	echo "$summary"
	((failed == 0))
}

# Bash reads a script as it runs it: with everything inside main, and the exit on the same
# line, an edit to this file while a run is going on cannot change what that run does.
main "$@"; exit $?
