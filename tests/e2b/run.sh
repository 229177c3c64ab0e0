#!/usr/bin/env bash
# Runs the E2B compatibility tests (tests/e2b/*.test.mjs, `node --test`): the stock `e2b`
# package from npm, unmodified, against the real daemon, plus raw-HTTP tests of the wire
# shapes (what the Python SDK needs, attacks on the data plane).
#
# Starts one sandboxd of its own (port picked by the kernel, fresh state and run directories)
# with authentication on and AUTH_KEY_PREFIX=e2b_, so that its keys pass the SDK's format
# check; creates two keys with `sandbox keys create`; checks that the installed SDK still
# has what the server relies on (a version-drift check); runs the tests; stops the daemon
# with SIGTERM (it must exit with status 0 and its log hold no sanitizer report: two more
# tests) and prints, last, `N passed, N failed, N skipped`. Exits non-zero when anything
# failed.
#
# Environment:
#   SANDBOXD                   the daemon (default build/src/sandboxd)
#   SANDBOX_CLI                the client (default build/cli/sandbox)
#   DRIVER                     SANDBOX_DRIVER (default jail)
#   FIRECRACKER_ARTIFACTS_DIR  where the templates are (default /var/lib/agent-sandbox/artifacts)
#   E2B_TEST_KEEP              keep the temporary directory (daemon log, TAP output)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/tests/e2b
sandboxd=${SANDBOXD:-$root/build/src/sandboxd}
cli=${SANDBOX_CLI:-$root/build/cli/sandbox}
driver=${DRIVER:-jail}
artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
[[ $sandboxd == /* ]] || sandboxd=$root/$sandboxd
[[ $cli == /* ]] || cli=$root/$cli

work=
daemon_pid=
passed=0 failed=0

give_up() {
	echo "e2b: $1"
	[[ -n $work && -f $work/sandboxd.log ]] && tail -n 40 "$work/sandboxd.log"
	echo "0 passed, 1 failed"
	exit 1
}

cleanup() {
	[[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null && kill -KILL "$daemon_pid"
	if [[ -n $work && -z ${E2B_TEST_KEEP:-} ]]; then
		rm -rf "$work"
	elif [[ -n $work ]]; then
		echo "e2b: kept $work"
	fi
}
trap cleanup EXIT

command -v node >/dev/null || give_up "node is not installed"
[[ -x $sandboxd ]] || give_up "no daemon at $sandboxd (make build)"
[[ -x $cli ]] || give_up "no client at $cli (make build)"
[[ -f $artifacts/templates/base/template.json ]] ||
	give_up "no base template in $artifacts (make base-template)"
if [[ ! -f $here/node_modules/e2b/package.json ]]; then
	"$root/scripts/install-deps.sh" --npm >&2 || give_up "cannot install the npm packages of tests/e2b"
fi

# The SDK still does what the server was built against: JSON Connect, the sandbox headers,
# E2B_SANDBOX_URL, the v2 list. A newer SDK that changed one of these fails here, plainly.
dist=$here/node_modules/e2b/dist/index.js
for needle in 'useBinaryFormat: false\|useBinaryFormat:!1' 'E2b-Sandbox-Id' 'E2B_SANDBOX_URL' \
	'/v2/sandboxes'; do
	if grep -q "$needle" "$dist"; then
		echo "ok: the installed e2b SDK has \`$needle\`"
		passed=$((passed + 1))
	else
		echo "not ok: the installed e2b SDK has no \`$needle\` (it changed: see docs/e2b.md)"
		failed=$((failed + 1))
	fi
done

# The code interpreter's template (Python and Node.js in one sandbox, with matplotlib), built
# as tests/templates builds the bundled ones: once per change of its inputs, under their lock.
# What it cost is printed; a cold build (the Debian base image included) takes minutes.
ci_template=
ci_start=$SECONDS
if ci_out=$(FIRECRACKER_ARTIFACTS_DIR=$artifacts python3 - "$root/tests/templates" 2>&1 <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import template_builds
b = template_builds.ensure("code-interpreter")
print("built" if b.built else "up to date")
EOF
); then
	echo "ok: the code-interpreter template is ${ci_out##*$'\n'} ($((SECONDS - ci_start)) s)"
	passed=$((passed + 1))
	ci_template=1
else
	echo "not ok: the code-interpreter template did not build ($((SECONDS - ci_start)) s):"
	tail -n 20 <<<"$ci_out"
	failed=$((failed + 1))
fi

work=$(mktemp -d /tmp/e2b-tests.XXXXXX) || give_up "mktemp failed"
mkdir -p "$work/state" "$work/run"

wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}
started() { [[ -s $work/port ]] || ! kill -0 "$daemon_pid" 2>/dev/null; }
gone() { ! kill -0 "$daemon_pid" 2>/dev/null; }

new_key() {
	SANDBOX_STATE_DIR=$work/state AUTH_KEY_PREFIX=e2b_ "$cli" keys create "$1" --scopes exec --json |
		node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).key))'
}
key_a=$(new_key e2b-tests-a)
key_b=$(new_key e2b-tests-b)
[[ $key_a == e2b_* && $key_b == e2b_* ]] || give_up "sandbox keys create failed"

env AUTH_ENABLED=true AUTH_KEY_PREFIX=e2b_ PORT=0 HOST=127.0.0.1 \
	SANDBOX_PORT_FILE="$work/port" SANDBOX_STATE_DIR="$work/state" SANDBOX_RUN_DIR="$work/run" \
	FIRECRACKER_ARTIFACTS_DIR="$artifacts" SANDBOX_DEFAULT_TEMPLATE=base \
	SANDBOX_DRIVER="$driver" SANDBOX_NETWORK=off SANDBOX_WARM_POOL=0 \
	SANDBOX_MAX_BODY_BYTES=1048576 SANDBOX_MAX_UPLOAD_BYTES=33554432 SANDBOX_PUBLIC_DOMAIN=e2b.test LOG_LEVEL="${LOG_LEVEL:-info}" \
	"$sandboxd" 2>"$work/sandboxd.log" &
daemon_pid=$!
wait_for 60 started
[[ -s $work/port ]] || give_up "the daemon did not start"
port=$(cat "$work/port")
echo "e2b: daemon $sandboxd on port $port, driver $driver"

cd "$here" || give_up "cannot enter $here"
# What an E2B user sets: both planes at the daemon, and nothing that would send the
# requests elsewhere.
env -u E2B_DEBUG -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy \
	E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" \
	E2B_DOMAIN=localhost E2B_API_KEY="$key_a" E2B_TEST_KEY_B="$key_b" \
	E2B_TEST_URL="http://127.0.0.1:$port" E2B_TEST_PUBLIC_DOMAIN=e2b.test \
	E2B_TEST_CI_TEMPLATE="$ci_template" \
	node --test --test-reporter=tap --test-timeout=120000 --test-concurrency=1 ./*.test.mjs 2>&1 |
	tee "$work/tap.txt"

p=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
f=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
c=$(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
sk=$(sed -nE 's/^# skipped ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
if [[ -z $p || -z $f ]]; then
	echo "e2b: node --test printed no summary"
	p=${p:-0} f=$((${f:-0} + 1))
fi
passed=$((passed + p)) failed=$((failed + f + ${c:-0}))
# What the daemon said around a failure (its directory goes when the suite ends).
if ((f + ${c:-0} > 0)); then
	echo "e2b: the daemon's log, last 60 lines:"
	tail -n 60 "$work/sandboxd.log"
fi

kill -TERM "$daemon_pid"
if ! wait_for 60 gone; then
	echo "not ok: the daemon did not exit within 60 s of SIGTERM"
	failed=$((failed + 1))
else
	wait "$daemon_pid"
	rc=$?
	daemon_pid=
	if ((rc != 0)); then
		echo "not ok: the daemon exited with status $rc after SIGTERM"
		tail -n 30 "$work/sandboxd.log"
		failed=$((failed + 1))
	else
		echo "ok: the daemon exited with status 0 after SIGTERM"
		passed=$((passed + 1))
	fi
fi
sanitizer_re='ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:'
if grep -qE "$sanitizer_re" "$work/sandboxd.log"; then
	echo "not ok: the daemon's log holds sanitizer reports:"
	grep -E -A 30 "$sanitizer_re" "$work/sandboxd.log" | head -n 80
	failed=$((failed + 1))
else
	echo "ok: no sanitizer report in the daemon's log"
	passed=$((passed + 1))
fi
sed -nE 's/^ *ok [0-9]+ - (.*) # SKIP ?(.*)$/SKIP \1: \2/p' "$work/tap.txt"
echo "$passed passed, $failed failed, ${sk:-0} skipped"
((failed == 0))
