#!/usr/bin/env bash
# Runs the MCP tests (tests/mcp/*.test.mjs, `node --test`) with the official MCP SDK client
# against the real daemon, over Streamable HTTP, HTTP+SSE and stdio (`sandbox mcp`).
#
# Starts two sandboxd of its own (ports picked by the kernel, fresh state and run
# directories): `main`, with authentication on, for which it creates the tests' API keys
# with `sandbox keys create` on the daemon's state directory; and `short`, whose MCP
# sessions expire after a second and are at most three. Runs the tests, stops the daemons
# with SIGTERM (each must exit with status 0, and its log must hold no sanitizer report;
# both count as tests) and prints, last,
# `N passed, N failed, N skipped`, after one `SKIP <test>: <reason>` line per skipped test.
# Exits non-zero when anything failed.
#
# Environment:
#   SANDBOXD                   the daemon (default build/src/sandboxd; build-asan/src/sandboxd
#                              runs the tests under AddressSanitizer and UBSan)
#   SANDBOX_CLI                the client (default build/cli/sandbox)
#   DRIVER                     the daemon's SANDBOX_DRIVER (default jail)
#   FIRECRACKER_ARTIFACTS_DIR  where the base template is; when it is not built there, it is
#                              built into a temporary directory (templates/build.sh base)
#   MCP_TEST_KEEP              keep the temporary directory (daemon log, TAP output)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/tests/mcp
sandboxd=${SANDBOXD:-$root/build/src/sandboxd}
cli=${SANDBOX_CLI:-$root/build/cli/sandbox}
driver=${DRIVER:-jail}
[[ $sandboxd == /* ]] || sandboxd=$root/$sandboxd
[[ $cli == /* ]] || cli=$root/$cli

daemon_pids=()
work=

# Counts one failure for a problem that stops the run, and ends it; give_up MESSAGE [DIR]
# shows the end of DIR's daemon log.
give_up() {
	echo "mcp: $1"
	[[ -n ${2:-} && -f $2/sandboxd.log ]] && tail -n 40 "$2/sandboxd.log"
	echo "0 passed, 1 failed"
	exit 1
}

cleanup() {
	local pid
	for pid in "${daemon_pids[@]}"; do
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	done
	if [[ -n $work && -z ${MCP_TEST_KEEP:-} ]]; then
		rm -rf "$work"
	elif [[ -n $work ]]; then
		echo "mcp: kept $work"
	fi
}
trap cleanup EXIT

command -v node >/dev/null || give_up "node is not installed"
[[ -x $sandboxd ]] || give_up "no daemon at $sandboxd (build it first: make build)"
[[ -x $cli ]] || give_up "no client at $cli (build it first: make build)"
if [[ ! -d $here/node_modules/@modelcontextprotocol/sdk ]]; then
	"$root/scripts/install-deps.sh" --npm >&2 ||
		give_up "cannot install the npm packages of tests/mcp"
fi

work=$(mktemp -d /tmp/mcp-tests.XXXXXX) || give_up "mktemp failed"

artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
if [[ ! -f $artifacts/templates/base/template.json ]]; then
	echo "mcp: no base template in $artifacts: building one in $work/artifacts"
	FIRECRACKER_ARTIFACTS_DIR=$work/artifacts bash "$root/templates/build.sh" base \
		>"$work/template.log" 2>&1 || {
		tail -n 20 "$work/template.log"
		give_up "building the base template failed"
	}
	artifacts=$work/artifacts
fi

# wait_for SECONDS CMD...: runs CMD every 0.1 s until it succeeds; fails once SECONDS passed.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# started PORTFILE PID: the daemon wrote its port, or it is gone.
started() {
	[[ -s $1 ]] || ! kill -0 "$2" 2>/dev/null
}

# gone PID: the process has exited.
gone() {
	! kill -0 "$1" 2>/dev/null
}

# start_daemon NAME VAR=VALUE...: starts a daemon with its own state, run directory and
# port; sets port_NAME and pid_NAME.
start_daemon() {
	local name=$1 dir=$work/$1 pid
	shift
	mkdir -p "$dir/run"
	[[ -d $dir/state ]] || mkdir -p "$dir/state"
	env AUTH_ENABLED=true PORT=0 HOST=127.0.0.1 SANDBOX_PORT_FILE="$dir/port" \
		SANDBOX_STATE_DIR="$dir/state" SANDBOX_RUN_DIR="$dir/run" \
		FIRECRACKER_ARTIFACTS_DIR="$artifacts" SANDBOX_DEFAULT_TEMPLATE=base \
		SANDBOX_DRIVER="$driver" SANDBOX_NETWORK=off SANDBOX_WARM_POOL=1 \
		LOG_LEVEL="${LOG_LEVEL:-info}" "$@" "$sandboxd" 2>"$dir/sandboxd.log" &
	pid=$!
	daemon_pids+=("$pid")
	wait_for 60 started "$dir/port" "$pid"
	if [[ ! -s $dir/port ]]; then
		gone "$pid" && give_up "the $name daemon exited at start" "$dir"
		give_up "the $name daemon did not write its port in 60 s" "$dir"
	fi
	printf -v "port_$name" '%s' "$(cat "$dir/port")"
	printf -v "pid_$name" '%s' "$pid"
}

# stop_daemon NAME: SIGTERM; counts a test that the daemon exits with status 0 and one that
# its log holds no sanitizer report.
stop_daemon() {
	local name=$1 dir=$work/$1 pidvar=pid_$1 pid rc
	pid=${!pidvar}
	kill -TERM "$pid"
	if ! wait_for 60 gone "$pid"; then
		echo "not ok: the $name daemon did not exit within 60 s of SIGTERM"
		failed=$((failed + 1))
	else
		wait "$pid"
		rc=$?
		if ((rc != 0)); then
			echo "not ok: the $name daemon exited with status $rc after SIGTERM"
			tail -n 30 "$dir/sandboxd.log"
			failed=$((failed + 1))
		else
			echo "ok: the $name daemon exited with status 0 after SIGTERM"
			passed=$((passed + 1))
		fi
	fi
	if grep -qE "$sanitizer_re" "$dir/sandboxd.log"; then
		echo "not ok: the $name daemon's log holds sanitizer reports:"
		grep -E -A 30 "$sanitizer_re" "$dir/sandboxd.log" | head -n 80
		failed=$((failed + 1))
	else
		echo "ok: no sanitizer report in the $name daemon's log"
		passed=$((passed + 1))
	fi
}

sanitizer_re='ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:'
daemon_pids=()
mkdir -p "$work/main/state"
# The keys, made the way an operator does, on the daemon's own database.
new_key() {
	SANDBOX_STATE_DIR=$work/main/state "$cli" keys create "$1" --scopes exec --json |
		node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).key))'
}
key_a=$(new_key mcp-tests-a)
[[ -n $key_a ]] || give_up "sandbox keys create failed"
key_b=$(new_key mcp-tests-b)
[[ -n $key_b ]] || give_up "sandbox keys create failed"
legacy_token=legacy-$RANDOM$RANDOM$RANDOM

echo "mcp: daemon $sandboxd, driver $driver, templates in $artifacts"
# main: what every transport test talks to.
start_daemon main MCP_AUTH_TOKEN="$legacy_token" \
	SANDBOX_MCP_ALLOWED_ORIGINS="https://allowed.example"
# short: MCP sessions that expire after a second of silence (looked for every 100 ms), at
# most three of them.
start_daemon short AUTH_ENABLED=false SANDBOX_MCP_SESSION_TIMEOUT=1 SANDBOX_MCP_MAX_SESSIONS=3 \
	SANDBOX_MCP_SWEEP_INTERVAL_MS=100

# start_daemon set port_main and port_short (printf -v).
# shellcheck disable=SC2154
export MCP_TEST_URL=http://127.0.0.1:$port_main
# shellcheck disable=SC2154
export MCP_TEST_SHORT_URL=http://127.0.0.1:$port_short
export MCP_TEST_KEY_A=$key_a MCP_TEST_KEY_B=$key_b MCP_TEST_LEGACY_TOKEN=$legacy_token
# The daemons' logs: what they say (an MCP session that expired) is state the tests wait on.
export MCP_TEST_MAIN_LOG=$work/main/sandboxd.log MCP_TEST_SHORT_LOG=$work/short/sandboxd.log
export MCP_TEST_CLI=$cli

cd "$here" || give_up "cannot enter $here"
node --test --test-reporter=tap --test-timeout=180000 ./*.test.mjs 2>&1 | tee "$work/tap.txt"

passed=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
failed=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
cancelled=$(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
skipped=$(sed -nE 's/^# skipped ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
todo=$(sed -nE 's/^# todo ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
if [[ -z $passed || -z $failed ]]; then
	echo "mcp: node --test printed no summary"
	passed=${passed:-0} failed=$((${failed:-0} + 1))
fi
failed=$((failed + ${cancelled:-0}))
skipped=$((${skipped:-0} + ${todo:-0}))

# The daemons stop cleanly, and said nothing a sanitizer would.
stop_daemon main
stop_daemon short

# `ok N - name # SKIP reason` -> `SKIP name: reason`
sed -nE 's/^ *ok [0-9]+ - (.*) # SKIP ?(.*)$/SKIP \1: \2/p' "$work/tap.txt"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
