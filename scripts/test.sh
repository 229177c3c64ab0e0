#!/usr/bin/env bash
# Runs every test suite and ends with one line, `N passed, N failed` (`, N skipped` when any
# were), summing all suites. Exits non-zero if and only if something failed.
#
# A run, in order:
#   1. The guest kernel's build starts in the background, niced (guest/kernel/build.sh; it
#      is cached by its inputs, so this is instant when nothing changed).
#   2. Suite `build` (`make build`, `make asan`, `make fuzz-build`, `make base-template`, a
#      test each; Ninja keeps going past errors so that the other suites test what built),
#      then suite `format` (clang-format over the tracked C sources, and the layering of
#      src/'s modules).
#   3. Two lanes at once, each running its suites in order (the table `suites` below), about
#      equally long on a fresh 2-core machine:
#        main  the suites that build (unit and fuzz targets, templates) and the integration
#              suites of the daemon;
#        vm    the client suites (MCP, SDKs, CLI, auth, ...) while the kernel builds, then
#              `kernel`, which waits for the background build (the kernel cache's lock) and
#              boots the kernel, then `docs` (every documented snippet, run), then the
#              CPU-bound VM suites (QEMU under TCG here). Each runs
#              in a network and mount namespace of its own (scripts/isolated.sh, or its own
#              runner's) so that its daemons and those of the main lane never share a sandbox
#              network, an nftables table or /run.
#   4. A table of every suite (lane, seconds, budget, counts), the skipped tests with their
#      reasons, the failed ones (their suites' FAIL and ERROR lines, at most 20 a suite), the
#      time, and the closing line.
#
# Every suite is a script that prints, as its last such line, `N passed, N failed[, N
# skipped]`, and one `SKIP <test>: <reason>` line per skipped test, and exits non-zero when
# anything failed. Its whole output goes to $TEST_LOG_DIR/<suite>.log; its counts are printed
# as it ends, and the end of its log when it failed. A suite whose script (or a path among its
# arguments) is absent is "not present" and counts nothing. A suite has a budget in seconds:
# one still running at its budget is stopped and counted as failed, saying so; so is a suite
# the run's own budget leaves no time for.
#
# Environment:
#   BUILD, ASAN_BUILD, FUZZ_BUILD   build directories (build, build-asan, build-fuzz)
#   TEST_LOG_DIR          where each suite's full output is kept (build/test-logs)
#   TEST_BUDGET_SECONDS   time for the whole run (4800, under CI's 90 minutes)
#   TEST_RUN_LIMIT_SECONDS  a run that takes longer fails (3600: a fresh machine's run must
#                         stay within an hour)
#   TEST_BUDGET_SCALE     multiplies every suite's budget (1; e.g. 2 on a slow machine)
#   TEST_SUITES           only these suites (names separated by spaces or commas), e.g.
#                         TEST_SUITES="unit integration" make test; build always runs
#   TEST_LANES=serial     one lane after the other instead of both at once
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

build=${BUILD:-build}
asan_build=${ASAN_BUILD:-build-asan}
fuzz_build=${FUZZ_BUILD:-build-fuzz}
log_dir=${TEST_LOG_DIR:-build/test-logs}
budget=${TEST_BUDGET_SECONDS:-4800}
run_limit=${TEST_RUN_LIMIT_SECONDS:-3600}
scale=${TEST_BUDGET_SCALE:-1}

# The suites: "name lane budget-seconds [VAR=value...] script [arguments]", in the order
# each lane runs them. A new suite gets a line here, in the lane whose kind of work it does; its budget is
# about three times what it takes on a 2-core machine with nothing cached.
suites=(
	"unit              main  600  scripts/meson-suite.sh unit $asan_build --cmocka"
	"fuzz              main  600  scripts/meson-suite.sh fuzz $fuzz_build"
	"templates         main  900  tests/templates/run.sh"
	"template-sessions main 1500  tests/integration/run.sh tests/templates"
	"integration       main 1200  tests/integration/run.sh"
	"security          main  600  tests/integration/run.sh tests/security"
	"net               vm    900  TEST_TAGS=-vm tests/net/run.sh"
	"mcp               vm    600  scripts/isolated.sh tests/mcp/run.sh"
	"ui                vm    300  scripts/isolated.sh tests/ui/run.sh"
	"sdk-typescript    vm    300  scripts/isolated.sh sdk/typescript/run-tests.sh"
	"e2b               vm    300  scripts/isolated.sh tests/e2b/run.sh"
	"sdk-python        vm    300  scripts/isolated.sh tests/integration/run.sh sdk/python/tests"
	"cli               vm    300  scripts/isolated.sh tests/integration/run.sh tests/cli"
	"auth              vm    600  scripts/isolated.sh tests/integration/run.sh tests/auth"
	"metrics           vm    300  scripts/isolated.sh tests/integration/run.sh tests/metrics"
	"cluster           vm    600  scripts/isolated.sh tests/integration/run.sh tests/cluster"
	"firecracker       vm    600  scripts/isolated.sh tests/integration/run.sh tests/firecracker"
	"kernel            vm   2400  tests/kernel/run.sh"
	"docs              vm    600  tests/docs/run.sh"
	"deb               vm   1500  scripts/test-deb.sh --build build-deb"
	"host              vm    900  tests/host/run.sh build-deb"
	"e2e               vm   1800  scripts/isolated.sh tests/e2e/run.sh"
	"net-vm            vm    900  tests/net/run.sh QemuVm"
)

# What the suites share: the daemon they drive is the one built with ASan and UBSan, so that a
# memory error or a leak (reported at its exit, which the harness requires to be clean)
# fails the run. The net suite leaves its VM class to net-vm, after the kernel.
export SANDBOXD=${SANDBOXD:-$root/$asan_build/src/sandboxd}

mkdir -p "$log_dir"
results=$log_dir/results
skips=$log_dir/skips
failures=$log_dir/failures
print_lock=$log_dir/.print-lock
: >"$results"
: >"$skips"
: >"$failures"
start=$SECONDS
kernel_pid=
host_image_pid=

# say TEXT...: prints a block whole, even with both lanes printing.
say() {
	{
		flock 8
		printf '%s\n' "$@"
	} 8>>"$print_lock"
}

# record NAME LANE SECONDS BUDGET PASSED FAILED SKIPPED NOTE
record() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"
}

chosen() {
	local want=${TEST_SUITES:-}
	[[ -z $want ]] && return 0
	[[ " ${want//,/ } " == *" $1 "* ]]
}

# counts LOG: "PASSED FAILED SKIPPED FOUND" from the last closing line of LOG.
counts() {
	local summary p=0 f=0 s=0
	summary=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$1" |
		tail -n 1)
	if [[ -z $summary ]]; then
		echo "0 0 0 0"
		return
	fi
	summary=${summary#*: }
	p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$summary")
	f=$(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$summary")
	[[ $summary == *skipped ]] && s=$(sed -E 's/.*, ([0-9]+) skipped$/\1/' <<<"$summary")
	echo "$p $f $s 1"
}

# run_suite NAME LANE BUDGET [VAR=value...] SCRIPT [ARGS...]
run_suite() {
	local name=$1 lane=$2 limit=$3 log=$log_dir/$1.log arg t0 rc left script
	local args=("${@:4}") vars=() note="" p f s found
	while [[ ${args[0]} == [A-Z_]*=* ]]; do
		vars+=("${args[0]}")
		args=("${args[@]:1}")
	done
	script=${args[0]}
	args=("${args[@]:1}")
	for arg in "$script" "${args[@]}"; do
		if [[ $arg == */* && ! -e $arg ]]; then
			say "[$lane] suite $name: not present ($arg)"
			record "$name" "$lane" 0 0 0 0 0 "not present"
			return
		fi
	done
	limit=$(awk -v b="$limit" -v k="$scale" 'BEGIN { printf "%d", b * k }')
	left=$((budget - (SECONDS - start)))
	if ((left < 60)); then
		say "[$lane] suite $name: not run: the run's budget of ${budget}s is spent (counted as a failure)"
		record "$name" "$lane" 0 "$limit" 0 1 0 "not run: out of time"
		return
	fi
	((left < limit)) && limit=$left
	say "[$lane] suite $name: started (${vars[*]:+${vars[*]} }${script}${args[*]:+ ${args[*]}}; budget ${limit}s)"
	t0=$SECONDS
	timeout --kill-after=30 "$limit" env "${vars[@]}" bash "$script" "${args[@]}" \
		>"$log" 2>&1 </dev/null
	rc=$?
	local took=$((SECONDS - t0))
	read -r p f s found < <(counts "$log")
	if ((rc == 124 || rc == 137)); then
		note="over its budget of ${limit}s: stopped"
		f=$((f + 1))
	elif ((found == 0)); then
		note="printed no \`N passed, N failed\` line (exit status $rc)"
		f=$((f + 1))
	elif ((rc != 0 && f == 0)); then
		note="exited with status $rc"
		f=$((f + 1))
	fi
	grep -E '^SKIP ' "$log" | sed "s/^SKIP /$name: /" >>"$skips"
	if ((f > 0)); then
		{
			[[ -n $note ]] && echo "$name: $note"
			grep -E '^(FAIL|ERROR|FAILED)[: ]|^not ok |^ *[0-9]+/[0-9]+ .* FAIL |^ FAIL ' "$log" |
				cut -c1-240 | head -n 20 | sed "s/^ */$name: /"
		} >>"$failures"
	fi
	local line="[$lane] suite $name: $p passed, $f failed"
	((s > 0)) && line+=", $s skipped"
	line+=" (${took}s)"
	[[ -n $note ]] && line+="; $note"
	if ((f > 0)); then
		say "$line" "--- last lines of $log:" "$(tail -n 100 "$log")" "---"
	else
		say "$line"
	fi
	record "$name" "$lane" "$took" "$limit" "$p" "$f" "$s" "$note"
}

run_lane() {
	local lane=$1 entry words
	lane_chosen "$lane" || return 0
	for entry in "${suites[@]}"; do
		read -r -a words <<<"$entry"
		[[ ${words[1]} == "$lane" ]] || continue
		if [[ ${words[0]} == kernel ]]; then
			needs_kernel || continue
		else
			chosen "${words[0]}" || continue
		fi
		run_suite "${words[0]}" "${words[1]}" "${words[2]}" "${words[@]:3}"
	done
}

lane_chosen() {
	local entry words
	for entry in "${suites[@]}"; do
		read -r -a words <<<"$entry"
		[[ ${words[1]} == "$1" ]] && chosen "${words[0]}" && return 0
	done
	return 1
}

# The kernel takes about 10 minutes to build on 2 cores: it starts now, at the lowest
# priority, so that the builds and the main lane's suites go first; suite `kernel` waits for
# it. Its own process group, so that an interrupted run stops it whole.
# The VM suites need the kernel: its suite runs whenever one of them does.
needs_kernel() {
	chosen kernel || chosen e2e || chosen net-vm
}

# The host lane's Debian 12 system (tests/host/image.sh, about 5 minutes from Debian's archive
# when not cached) is built meanwhile too, at the lowest priority; suite `host` waits for it
# (the image cache's lock).
start_host_image() {
	chosen host || return 0
	setsid nice -n 19 tests/host/image.sh >"$log_dir/host-image.log" 2>&1 </dev/null &
	host_image_pid=$!
	say "host: the Debian 12 system, built or taken from its cache in the background (log: $log_dir/host-image.log)"
}

start_kernel_build() {
	needs_kernel || return 0
	setsid nice -n 19 guest/kernel/build.sh >"$log_dir/kernel-build.log" 2>&1 </dev/null &
	kernel_pid=$!
	say "kernel: building or fetching from its cache in the background (log: $log_dir/kernel-build.log)"
}

# shellcheck disable=SC2317 # run by the EXIT trap
stop_kernel_build() {
	local pid
	for pid in "$kernel_pid" "$host_image_pid"; do
		if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM -- "-$pid" 2>/dev/null
		fi
	done
}

suite_build() {
	local target log p=0 f=0 t0=$SECONDS
	for target in build asan fuzz-build base-template; do
		if [[ $target == base-template && ! -f templates/build.sh ]]; then
			say "make base-template: not present (templates/build.sh)"
			continue
		fi
		log="$log_dir/make-$target.log"
		if make --no-print-directory NINJA_FLAGS="-k 0" BUILD="$build" \
			ASAN_BUILD="$asan_build" FUZZ_BUILD="$fuzz_build" "$target" >"$log" 2>&1; then
			say "ok: make $target"
			p=$((p + 1))
		else
			say "FAILED: make $target (full log: $log)" "$(grep -E 'error|Error|FAILED' "$log" | head -n 40)"
			f=$((f + 1))
		fi
	done
	# The bundled templates the suites use, before any suite starts: suites of the vm lane
	# run in a network namespace of their own (scripts/isolated.sh), where the Debian archive
	# cannot be reached, so they could not build one themselves. Built as the template
	# suites build them (tests/templates/template_builds.py: once per change of their inputs,
	# under their lock), so that those find them current.
	if [[ -f templates/build.sh ]]; then
		local t1=$SECONDS
		log="$log_dir/make-templates.log"
		if python3 scripts/ensure-templates.py python node code-interpreter >"$log" 2>&1; then
			say "ok: the templates python, node, code-interpreter ($((SECONDS - t1))s: $(paste -sd ' ' "$log"))"
			p=$((p + 1))
		else
			say "FAILED: the templates python, node, code-interpreter (full log: $log)" "$(tail -n 30 "$log")"
			f=$((f + 1))
		fi
	fi
	say "suite build: $p passed, $f failed ($((SECONDS - t0))s)"
	record build - $((SECONDS - t0)) - "$p" "$f" 0 ""
}

# suite format: clang-format over the tracked C sources, and the layering of src/'s modules
# (scripts/check-layers.py: each module includes only modules below it in the order of
# docs/architecture.md, no include cycle; and its self-test, that an upward include fails).
suite_format() {
	local log="$log_dir/format.log" files t0=$SECONDS p=0 f=0
	chosen format || return 0
	mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null)
	if ! command -v clang-format >/dev/null || ((${#files[@]} == 0)); then
		say "format: clang-format or tracked C sources missing"
		f=$((f + 1))
	elif clang-format --dry-run -Werror "${files[@]}" >"$log" 2>&1; then
		p=$((p + 1))
	else
		say "$(grep -E '^[^ ].*: (error|warning):' "$log" | cut -d: -f1 | sort -u |
			sed 's/^/not formatted: /')"
		f=$((f + 1))
	fi
	if python3 scripts/check-layers.py --self-test >"$log_dir/layers.log" 2>&1 &&
		python3 scripts/check-layers.py src >>"$log_dir/layers.log" 2>&1; then
		p=$((p + 1))
	else
		say "layering of src/:" "$(cat "$log_dir/layers.log")"
		f=$((f + 1))
	fi
	say "suite format: $p passed, $f failed"
	record format - $((SECONDS - t0)) - "$p" "$f" 0 ""
}

# The table of every suite that ran, in the order of `suites`.
print_table() {
	local entry words name lane secs limit p f s note order=(build format)
	for entry in "${suites[@]}"; do
		read -r -a words <<<"$entry"
		order+=("${words[0]}")
	done
	echo
	printf '%-18s %-5s %8s %7s %7s %7s %8s  %s\n' suite lane seconds budget passed failed \
		skipped note
	for name in "${order[@]}"; do
		while IFS=$'\t' read -r _ lane secs limit p f s note; do
			printf '%-18s %-5s %8s %7s %7s %7s %8s  %s\n' "$name" "$lane" "$secs" \
				"$limit" "$p" "$f" "$s" "$note"
		done < <(awk -F'\t' -v n="$name" '$1 == n' "$results")
	done
	for lane in main vm; do
		secs=$(awk -F'\t' -v l="$lane" '$2 == l { t += $3 } END { print t + 0 }' "$results")
		((secs > 0)) && echo "lane $lane: ${secs}s of suites"
	done
}

main() {
	local summary main_pid vm_pid lanes_start
	trap stop_kernel_build EXIT
	start_kernel_build
	start_host_image
	suite_build
	suite_format

	lanes_start=$SECONDS
	if [[ ${TEST_LANES:-} == serial ]]; then
		run_lane main
		run_lane vm
	else
		run_lane main &
		main_pid=$!
		run_lane vm &
		vm_pid=$!
		wait "$main_pid" "$vm_pid"
	fi

	print_table
	echo "lanes: $((SECONDS - lanes_start))s from the first suite to the last"
	if [[ -s $skips ]]; then
		echo "skipped tests:"
		sed 's/^/  /' "$skips"
	fi
	if [[ -s $failures ]]; then
		echo "failed tests:"
		sed 's/^/  /' "$failures"
	fi
	local passed failed skipped
	read -r passed failed skipped < <(awk -F'\t' '{ p += $5; f += $6; s += $7 }
		END { print p + 0, f + 0, s + 0 }' "$results")
	echo "time: $((SECONDS - start))s"
	if ((SECONDS - start > run_limit)); then
		echo "FAILED: the run took $((SECONDS - start))s, over its limit of ${run_limit}s (TEST_RUN_LIMIT_SECONDS)"
		failed=$((failed + 1))
	fi
	summary="$passed passed, $failed failed"
	((skipped > 0)) && summary+=", $skipped skipped"
	echo "$summary"
	((failed == 0))
}

# Bash reads a script as it runs it: with everything inside main, and the exit on the same
# line, an edit to this file while a run is going on cannot change what that run does.
main "$@"; exit $?
