#!/usr/bin/env bash
# Runs the dashboard's browser tests (tests/ui/dashboard.test.mjs, `node --test`): headless
# Chromium (Debian's) driven by puppeteer-core (ui/package-lock.json) through the dashboard
# at /ui of a real daemon, with authentication on.
#
# Starts a sandboxd of its own (port picked by the kernel, fresh state and run directories)
# after making three keys with `sandbox keys create` on its state directory: admin (admin,
# exec, metrics), and two exec-only keys. Runs the tests, which save a screenshot of each
# page into the output directory; stops the daemon with SIGTERM (it must exit with status 0,
# its log must hold no sanitizer report and no key: each counts as a test) and prints, last,
# `N passed, N failed, N skipped`. Exits non-zero when anything failed.
#
# Environment:
#   SANDBOXD                   the daemon (default build/src/sandboxd; build-asan/src/sandboxd
#                              runs the tests under AddressSanitizer and UBSan)
#   SANDBOX_CLI                the client (default build/cli/sandbox)
#   SANDBOX_UI_DIR             the dashboard (default: the daemon's own default, build/ui
#                              beside it)
#   CHROMIUM                   the browser (default /usr/bin/chromium)
#   DRIVER                     the daemon's SANDBOX_DRIVER (default jail)
#   FIRECRACKER_ARTIFACTS_DIR  where the base template is; when it is not built there, it is
#                              built into a temporary directory (templates/build.sh base)
#   TEST_LOG_DIR               the screenshots go to $TEST_LOG_DIR/ui (default build/test-logs)
#   UI_TEST_KEEP               keep the temporary directory (daemon log, TAP output)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/tests/ui
sandboxd=${SANDBOXD:-$root/build/src/sandboxd}
cli=${SANDBOX_CLI:-$root/build/cli/sandbox}
driver=${DRIVER:-jail}
chromium=${CHROMIUM:-/usr/bin/chromium}
[[ $sandboxd == /* ]] || sandboxd=$root/$sandboxd
[[ $cli == /* ]] || cli=$root/$cli
out=${TEST_LOG_DIR:-build/test-logs}
[[ $out == /* ]] || out=$root/$out
out=$out/ui

daemon_pid=
work=
passed=0
failed=0

give_up() {
	echo "ui: $1"
	[[ -n $work && -f $work/sandboxd.log ]] && tail -n 40 "$work/sandboxd.log"
	echo "0 passed, 1 failed"
	exit 1
}

cleanup() {
	if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -KILL "$daemon_pid" 2>/dev/null
	fi
	if [[ -n $work && -z ${UI_TEST_KEEP:-} ]]; then
		rm -rf "$work"
	elif [[ -n $work ]]; then
		echo "ui: kept $work"
	fi
}
trap cleanup EXIT

command -v node >/dev/null || give_up "node is not installed"
[[ -x $chromium ]] || give_up "no browser at $chromium (the chromium package: scripts/install-deps.sh)"
[[ -x $sandboxd ]] || give_up "no daemon at $sandboxd (build it first: make build)"
[[ -x $cli ]] || give_up "no client at $cli (build it first: make build)"
if [[ ! -d $root/ui/node_modules/puppeteer-core ]]; then
	"$root/scripts/install-deps.sh" --npm >&2 || give_up "cannot install the npm packages of ui/"
fi

work=$(mktemp -d /tmp/ui-tests.XXXXXX) || give_up "mktemp failed"
mkdir -p "$work/state" "$work/run" "$work/downloads" "$out" || give_up "mkdir failed"
rm -f "$out"/*.png

artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
if [[ ! -f $artifacts/templates/base/template.json ]]; then
	echo "ui: no base template in $artifacts: building one in $work/artifacts"
	FIRECRACKER_ARTIFACTS_DIR=$work/artifacts bash "$root/templates/build.sh" base \
		>"$work/template.log" 2>&1 || {
		tail -n 20 "$work/template.log"
		give_up "building the base template failed"
	}
	artifacts=$work/artifacts
fi

new_key() {
	SANDBOX_STATE_DIR=$work/state "$cli" keys create "$1" --scopes "$2" --json 2>/dev/null |
		node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).key))'
}
key_admin=$(new_key ui-admin admin,exec,metrics)
key_a=$(new_key ui-tenant-a exec)
key_b=$(new_key ui-tenant-b exec)
[[ -n $key_admin && -n $key_a && -n $key_b ]] || give_up "sandbox keys create failed"

ui_env=()
[[ -n ${SANDBOX_UI_DIR:-} ]] && ui_env=(SANDBOX_UI_DIR="$SANDBOX_UI_DIR")
env AUTH_ENABLED=true PORT=0 HOST=127.0.0.1 SANDBOX_PORT_FILE="$work/port" \
	SANDBOX_STATE_DIR="$work/state" SANDBOX_RUN_DIR="$work/run" \
	FIRECRACKER_ARTIFACTS_DIR="$artifacts" SANDBOX_DEFAULT_TEMPLATE=base \
	SANDBOX_DRIVER="$driver" SANDBOX_NETWORK=off SANDBOX_WARM_POOL=1 \
	LOG_LEVEL=info "${ui_env[@]}" "$sandboxd" 2>"$work/sandboxd.log" &
daemon_pid=$!
for ((i = 0; i < 600; i++)); do
	[[ -s $work/port ]] && break
	kill -0 "$daemon_pid" 2>/dev/null || give_up "the daemon exited at start"
	sleep 0.1
done
[[ -s $work/port ]] || give_up "the daemon did not write its port in 60 s"

port=$(cat "$work/port")
export UI_TEST_URL=http://127.0.0.1:$port
export UI_TEST_KEY_ADMIN=$key_admin UI_TEST_KEY_A=$key_a UI_TEST_KEY_B=$key_b
export UI_TEST_OUT=$out UI_TEST_DOWNLOADS=$work/downloads UI_TEST_CHROMIUM=$chromium
export UI_TEST_LOG=$work/sandboxd.log UI_TEST_SECRETS=$work/secrets.txt
echo "ui: daemon $sandboxd ($UI_TEST_URL), driver $driver, screenshots in $out"

cd "$here" || give_up "cannot enter $here"
start=$SECONDS
node --test --test-reporter=tap --test-timeout=600000 --test-concurrency=1 ./dashboard.test.mjs ./prom.test.mjs ./series.test.mjs \
	2>&1 | tee "$work/tap.txt"
echo "ui: the browser tests took $((SECONDS - start)) s"

p=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
f=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
c=$(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
s=$(sed -nE 's/^# skipped ([0-9]+)$/\1/p' "$work/tap.txt" | tail -n 1)
if [[ -z $p || -z $f ]]; then
	echo "ui: node --test printed no summary"
	p=${p:-0} f=$((${f:-0} + 1))
fi
passed=$p
failed=$((f + ${c:-0}))
skipped=${s:-0}

# The daemon stops cleanly, said nothing a sanitizer would, and logged no key.
kill -TERM "$daemon_pid"
for ((i = 0; i < 600; i++)); do
	kill -0 "$daemon_pid" 2>/dev/null || break
	sleep 0.1
done
if kill -0 "$daemon_pid" 2>/dev/null; then
	echo "not ok: the daemon did not exit within 60 s of SIGTERM"
	failed=$((failed + 1))
else
	wait "$daemon_pid"
	rc=$?
	if ((rc != 0)); then
		echo "not ok: the daemon exited with status $rc after SIGTERM"
		tail -n 30 "$work/sandboxd.log"
		failed=$((failed + 1))
	else
		echo "ok: the daemon exited with status 0 after SIGTERM"
		passed=$((passed + 1))
	fi
fi
daemon_pid=
sanitizer_re='ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:'
if grep -qE "$sanitizer_re" "$work/sandboxd.log"; then
	echo "not ok: the daemon's log holds sanitizer reports:"
	grep -E -A 30 "$sanitizer_re" "$work/sandboxd.log" | head -n 80
	failed=$((failed + 1))
else
	echo "ok: no sanitizer report in the daemon's log"
	passed=$((passed + 1))
fi
# Every secret the run saw: the three made here and those the tests made through the page.
leaked=0
for k in "$key_admin" "$key_a" "$key_b" $(cat "$work/secrets.txt" 2>/dev/null); do
	grep -qF "$k" "$work/sandboxd.log" && leaked=1
done
if grep -qE 'ticket=[0-9a-f]{8}' "$work/sandboxd.log"; then
	leaked=1
fi
if ((leaked)); then
	echo "not ok: the daemon's log holds a key or a ticket"
	failed=$((failed + 1))
else
	echo "ok: the daemon's log holds no key and no ticket"
	passed=$((passed + 1))
fi

sed -nE 's/^ *ok [0-9]+ - (.*) # SKIP ?(.*)$/SKIP \1: \2/p' "$work/tap.txt"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
