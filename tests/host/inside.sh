#!/bin/bash
# `[[ ... ]] && ok ... || fail ...` is right here (ok never fails); single quotes hold what the
# sandbox's shell, bash -c or jq expands.
# shellcheck disable=SC2015,SC2016
# The host lane's checks, run inside the Debian 12 system (tests/host/image.sh) by its
# host-lane.service as root, from the read-only lane disk mounted on /lane: the packages in
# /lane/debs installed with apt as a user would, then the packaged sandboxd.service driven
# under Debian's kernel, systemd and cgroup v2. Prints `ok NAME` or `FAIL NAME: why` per
# check, the journal of the service when something failed, and `N passed, N failed`.
# Every check runs, whatever failed before it, except those that need the service up.
set -uo pipefail

passed=0 failed=0
SOCK=/run/agent-sandbox/sandboxd.sock
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
t_start=$(date +%s)

ok() {
	echo "ok $1"
	passed=$((passed + 1))
}
fail() {
	echo "FAIL $1: $2"
	failed=$((failed + 1))
}
# check NAME COMMAND...: ok when COMMAND succeeds; its output is the reason otherwise.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		ok "$name"
	else
		fail "$name" "$(tail -n 15 <<<"$out")"
	fi
}
finish() {
	if ((failed > 0)); then
		echo "--- journal of sandboxd.service (last 80 lines):"
		journalctl -u sandboxd.service --no-pager -n 80 -o cat 2>&1
		echo "---"
	fi
	echo "host lane: $(($(date +%s) - t_start)) s inside the system"
	if ((${skipped:-0} > 0)); then
		echo "$passed passed, $failed failed, $skipped skipped"
	else
		echo "$passed passed, $failed failed"
	fi
	exit 0
}

# api METHOD PATH [BODY]: the daemon's answer over its socket, with the admin key.
api() {
	local args=(-sS --max-time 120 --unix-socket "$SOCK" -X "$1" -H "Authorization: Bearer $KEY")
	[[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' -d "$3")
	curl "${args[@]}" "http://localhost$2"
}
# run SESSION JSON: execute in a session; prints the result's JSON.
run() { api POST "/exec/$1/execute" "$2"; }
# field JSON KEY: a top-level value of a JSON object.
field() { jq -r ".$2 // empty" <<<"$1"; }
# stdout of an execute's result, joined.
stdout_of() { jq -r '[.output[]? | select(.stream == "stdout") | .data] | join("")' <<<"$1"; }

wait_active() {
	local i state
	for ((i = 0; i < 240; i++)); do
		state=$(systemctl is-active sandboxd.service)
		[[ $state == active ]] && return 0
		[[ $state == failed ]] && break
		sleep 0.5
	done
	echo "sandboxd.service is $state"
	return 1
}

# --- the host is the one the lane is for
check "kernel is Debian's 6.1 ($(uname -r))" bash -c '[[ $(uname -r) == 6.1.* ]]'
check "PID 1 is systemd ($(readlink /proc/1/exe))" bash -c '[[ $(readlink /proc/1/exe) == */systemd ]]'
check "cgroup v2 is mounted alone on /sys/fs/cgroup" \
	bash -c '[[ $(stat -f -c %T /sys/fs/cgroup) == cgroup2fs ]]'

# --- the unit tests of the cgroup manager and the jail, on this kernel and cgroup v2: every
# limit and action (memory, CPU, pids, freeze, kill, OOM events) against the real hierarchy
for t in test-driver-cgroup test-driver-jail-keep test-driver-jail; do
	out=$(cd /tmp && JAIL_TEST_AGENT=/lane/unit/fake-agent timeout 300 "/lane/unit/$t" 2>&1)
	rc=$?
	while read -r name; do ok "unit $t: $name"; done < <(sed -nE 's/^\[ +OK +\] (.*)$/\1/p' <<<"$out")
	while read -r name; do
		fail "unit $t: $name" "$(grep -A8 -F "$name" <<<"$out" | head -n 12)"
	done < <(sed -nE 's/^\[ +(FAILED|SKIPPED) +\] ([^ ].*)$/\2/p' <<<"$out" | grep -v 'test(s)' | sort -u)
	((rc == 0)) || grep -q '^\[ *FAILED' <<<"$out" || fail "unit $t" "exit status $rc: $(tail -n 10 <<<"$out")"
done

# --- the packages, installed as the README says (no network here: every dependency is in
# the image; recommends are left out, as they would have to be downloaded)
# The python template as the host built it (the security and ingress tests use it).
mkdir -p /var/lib/agent-sandbox/artifacts/templates
cp -r --sparse=always /lane/templates/python /var/lib/agent-sandbox/artifacts/templates/
out=$(cd /lane/debs && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	--no-install-recommends ./agent-sandbox_*.deb ./agent-sandbox-cli_*.deb 2>&1)
rc=$?
if ((rc == 0)); then
	ok "apt installs the packages"
else
	fail "apt installs the packages" "$(tail -n 25 <<<"$out")"
	finish
fi
[[ -s /var/lib/agent-sandbox/state/admin-key ]] && ok "postinst made the admin key" ||
	fail "postinst made the admin key" "no /var/lib/agent-sandbox/state/admin-key"
KEY=$(cat /var/lib/agent-sandbox/state/admin-key 2>/dev/null)
# The journal says more when something fails.
echo LOG_LEVEL=debug >>/etc/agent-sandbox/sandboxd.env

# --- the service, as the package left it: enabled, started, active through sd_notify
check "sandboxd.service is enabled" systemctl is-enabled sandboxd.service
t0=$(date +%s)
if wait_active; then
	ok "sandboxd.service becomes active (Type=notify) in $(($(date +%s) - t0)) s"
else
	fail "sandboxd.service becomes active" "$(systemctl status sandboxd.service --no-pager 2>&1 | tail -n 20)"
	finish
fi
health=$(curl -sS --unix-socket "$SOCK" http://localhost/health)
driver=$(field "$health" driver)
[[ $driver == jail ]] && ok "/health: driver jail" || fail "/health: driver jail" "$health"

# --- cgroups as systemd expects: the service's cgroup is delegated, sandboxd sits in its leaf
unit_cg=/sys/fs/cgroup/system.slice/sandboxd.service
main_pid=$(systemctl show -p MainPID --value sandboxd.service)
own=$(sed -n 's/^0:://p' "/proc/$main_pid/cgroup")
[[ $own == /system.slice/sandboxd.service/daemon ]] && ok "sandboxd moved itself into its leaf ($own)" ||
	fail "sandboxd moved itself into its leaf" "its cgroup is $own"
[[ $(getfattr --only-values -n trusted.delegate "$unit_cg" 2>/dev/null) == 1 ]] &&
	ok "systemd marks the service's cgroup delegated" ||
	fail "systemd marks the service's cgroup delegated" "no trusted.delegate on $unit_cg"
tasks=$(systemctl show -p TasksMax --value sandboxd.service)
[[ $tasks == infinity ]] && ok "the unit does not cap all sandboxes' tasks together" ||
	fail "the unit does not cap all sandboxes' tasks together" "TasksMax=$tasks"

# --- a session: commands, files
r=$(run lane1 '{"template":"base","command":"sh","args":["-c","id -u; uname -r; cat /proc/self/cgroup"]}')
if [[ $(field "$r" exitCode) == 0 ]]; then
	ok "a command runs in a session ($(stdout_of "$r" | head -n 2 | paste -sd ' '))"
else
	fail "a command runs in a session" "$r"
fi
cgs=$(find "$unit_cg/agent-sandbox" -mindepth 1 -maxdepth 1 -type d -name 'sb-*' 2>/dev/null | wc -l)
# (The unit tests above made theirs below the root's agent-sandbox/, as a daemon started by
# hand does; none of the service's may be there.)
stray=$(find /sys/fs/cgroup/agent-sandbox -maxdepth 1 -name 'sb-*' 2>/dev/null)
if ((cgs > 0)) && [[ -z $stray ]]; then
	ok "sandboxes' cgroups are below the service's ($cgs), none at the root"
else
	fail "sandboxes' cgroups are below the service's" "$cgs below it; at the root: ${stray:-none}"
fi
api POST /exec/ '{"id":"cpu","template":"base","resources":{"cpuQuotaUs":20000}}' >/dev/null
quotas=$(cat "$unit_cg"/agent-sandbox/sb-*/cpu.max 2>/dev/null | sort | uniq -c | paste -sd ' ')
[[ $quotas == *"20000 100000"* ]] && ok "a session's CPU quota is its cgroup's cpu.max" ||
	fail "a session's CPU quota is its cgroup's cpu.max" "cpu.max of the sandboxes: $quotas"
api DELETE /exec/cpu >/dev/null
r=$(api POST /exec/lane1/write '{"path":"hello.txt","content":"hi from the lane\n"}')
r2=$(api GET '/exec/lane1/read?path=hello.txt')
[[ $(field "$r2" content) == "hi from the lane" ]] && ok "a file written is read back" ||
	fail "a file written is read back" "$r / $r2"

# --- limits: a process over the memory limit is killed and reported; a fork bomb is held
api POST /exec/ '{"id":"hog","template":"base","resources":{"memoryBytes":67108864}}' >/dev/null
r=$(run hog '{"command":"sh","args":["-c","x=a; while :; do x=$x$x; done"],"timeout":60000}')
[[ $(field "$r" oomKilled) == true ]] && ok "a process over the memory limit: oomKilled" ||
	fail "a process over the memory limit: oomKilled" "$r"
api POST /exec/ '{"id":"bomb","template":"base","resources":{"pidsMax":64}}' >/dev/null
r=$(run bomb '{"command":"sh","args":["-c","b() { b | b & }; b; sleep 5"],"timeout":20000}')
# The bomb fills its own pids.max and nothing else: the daemon and another session answer,
# and destroying the bomb's session ends it.
r2=$(run bystander '{"template":"base","command":"echo","args":["alive"]}')
h=$(curl -sS --max-time 10 --unix-socket "$SOCK" http://localhost/health)
if [[ $(stdout_of "$r2") == alive* && $(field "$h" status) == ok && $r == *"can't fork"* ]]; then
	ok "a fork bomb is held at its pids.max: the daemon and another session answer"
else
	fail "a fork bomb is held at its pids.max" "$(cut -c1-300 <<<"$r") / $r2 / $h"
fi
r=$(api DELETE /exec/bomb)
[[ $(field "$r" error) == "" ]] && ok "the bomb's session is destroyed" || fail "the bomb's session is destroyed" "$r"
api DELETE /exec/bystander >/dev/null
api DELETE /exec/hog >/dev/null

# --- pause and resume
run sleeper '{"template":"base","command":"true"}' >/dev/null
r=$(api POST /exec/sleeper/pause)
[[ $(field "$r" state) == paused ]] && ok "pause" || fail "pause" "$r"
r=$(api POST /exec/sleeper/resume)
r2=$(run sleeper '{"command":"echo","args":["back"]}')
[[ $(stdout_of "$r2") == back* ]] && ok "resume, then a command" || fail "resume, then a command" "$r / $r2"

# --- the CLI of a member of the group, over the socket
useradd -m -G agent-sandbox alice
akey=$(sandbox keys create alice --scopes exec 2>/dev/null | grep -o 'sk_test_[0-9a-f]*' | head -n 1)
install -d -o alice -g alice -m 0700 /home/alice/.config/agent-sandbox
printf '%s\n' "$akey" >/home/alice/.config/agent-sandbox/api-key
chown alice:alice /home/alice/.config/agent-sandbox/api-key
chmod 0600 /home/alice/.config/agent-sandbox/api-key
out=$(setpriv --reuid=alice --regid=alice --init-groups env -i HOME=/home/alice PATH=/usr/bin:/bin \
	sandbox run --template base -- sh -c 'echo member ok' 2>&1)
[[ $out == "member ok" ]] && ok "a group member's CLI runs a command over the socket" ||
	fail "a group member's CLI runs a command over the socket" "$out"

# --- systemctl restart: active again, serving
check "systemctl restart sandboxd" systemctl restart sandboxd.service
if wait_active; then
	r=$(run after-restart '{"template":"base","command":"echo","args":["again"]}')
	[[ $(stdout_of "$r") == again* ]] && ok "after a restart, sessions are served" ||
		fail "after a restart, sessions are served" "$r"
else
	fail "active again after a restart" "$(systemctl status sandboxd.service --no-pager 2>&1 | tail -n 20)"
fi

# --- networking: each session in a network namespace of its own behind the egress policy.
# A peer of the lane's own, in a network namespace it makes, serves HTTP on a private address:
# blocked by default, reachable once the server's policy allows it, blocked again for a
# session whose own policy denies it.
ip netns add peer && ip link add lane0 type veth peer name lane1 && ip link set lane1 netns peer &&
	ip addr add 10.99.0.1/24 dev lane0 && ip link set lane0 up &&
	ip -n peer addr add 10.99.0.2/24 dev lane1 && ip -n peer link set lane1 up &&
	ip -n peer link set lo up
mkdir -p /tmp/peer && echo peer-ok >/tmp/peer/index.html
ip netns exec peer python3 -m http.server 8000 --bind 10.99.0.2 --directory /tmp/peer \
	>/dev/null 2>&1 &
peer_pid=$!
# (busybox nc: Debian 12's busybox-static wget crashes, SIGSEGV, on any fetch.)
fetch='{"command":"sh","args":["-c","printf \"GET / HTTP/1.0\\r\\n\\r\\n\" | nc -w 5 10.99.0.2 8000 | tail -n 1"],"timeout":30000}'
r=$(run net1 "{\"template\":\"base\",${fetch#\{}")
[[ $(stdout_of "$r") != *peer-ok* ]] &&
	ok "a private address is blocked by default" || fail "a private address is blocked by default" "$r"
api DELETE /exec/net1 >/dev/null
mkdir -p /etc/systemd/system/sandboxd.service.d
printf '[Service]\nEnvironment=VM_DEST_MODE=allow VM_DEST_RULES=10.99.0.2/32\n' \
	>/etc/systemd/system/sandboxd.service.d/lane.conf
systemctl daemon-reload && systemctl restart sandboxd.service && wait_active >/dev/null
r=$(run net2 "{\"template\":\"base\",${fetch#\{}")
[[ $(stdout_of "$r") == *peer-ok* ]] && ok "allowed by the server's policy, it is reached" ||
	fail "allowed by the server's policy, it is reached" "$r"
api POST /exec/ '{"id":"net3","template":"base","egress":{"dest":{"mode":"deny","rules":["10.99.0.2/32"]}}}' >/dev/null
r=$(run net3 "$fetch")
[[ $(stdout_of "$r") != *peer-ok* ]] &&
	ok "a session's own policy denies it again" || fail "a session's own policy denies it again" "$r"
api DELETE /exec/net2 >/dev/null
api DELETE /exec/net3 >/dev/null
rm -f /etc/systemd/system/sandboxd.service.d/lane.conf
systemctl daemon-reload && systemctl restart sandboxd.service && wait_active >/dev/null
kill "$peer_pid" 2>/dev/null
ip netns del peer 2>/dev/null
ip link del lane0 2>/dev/null

# --- a crash: the daemon killed alone (its sandboxes stay, KillMode=process), systemd starts
# it again (Restart=on-failure), and the new daemon removes what the dead one left
before=$(find "$unit_cg/agent-sandbox" -mindepth 1 -maxdepth 1 -name 'sb-*' -printf '%f\n' | sort)
systemctl kill -s KILL --kill-whom=main sandboxd.service
sleep 6
if wait_active; then
	after=$(find "$unit_cg/agent-sandbox" -mindepth 1 -maxdepth 1 -name 'sb-*' -printf '%f\n' | sort)
	kept=$(comm -12 <(echo "$before") <(echo "$after") | grep . | paste -sd ' ')
	[[ -n $before && -z $kept ]] &&
		ok "after a crash, systemd restarts it, which removes the dead daemon's $(wc -l <<<"$before") sandboxes" ||
		fail "after a crash, the dead daemon's sandboxes are removed" "before: $before; still there: $kept"
else
	fail "after a crash, systemd restarts it" "$(systemctl status sandboxd.service --no-pager 2>&1 | tail -n 15)"
fi

# --- a host policy that forbids the jail's user namespaces: refused at start, by name
if [[ -e /proc/sys/kernel/unprivileged_userns_clone ]]; then
	sysctl -qw kernel.unprivileged_userns_clone=0
	since=$(date '+%Y-%m-%d %H:%M:%S')
	systemctl restart sandboxd.service 2>/dev/null
	for ((i = 0; i < 60; i++)); do
		journalctl -u sandboxd.service --since "$since" -o cat 2>/dev/null |
			grep -q 'kernel.unprivileged_userns_clone = 0' && break
		sleep 0.5
	done
	msg=$(journalctl -u sandboxd.service --since "$since" -o cat 2>/dev/null |
		grep -m1 -o 'unprivileged user namespaces are disabled[^"]*')
	[[ -n $msg ]] && ok "kernel.unprivileged_userns_clone=0: start refused, saying so" ||
		fail "kernel.unprivileged_userns_clone=0: start refused, saying so" \
			"$(journalctl -u sandboxd.service --since "$since" -o cat | tail -n 5)"
	sysctl -qw kernel.unprivileged_userns_clone=1
	systemctl restart sandboxd.service
	wait_active && ok "allowed again: active again" ||
		fail "allowed again: active again" "$(systemctl status sandboxd.service --no-pager | tail -n 10)"
else
	fail "Debian's kernel has kernel.unprivileged_userns_clone" "no /proc/sys/kernel/unprivileged_userns_clone"
fi

# --- stop: every sandbox destroyed, nothing left
run left1 '{"template":"base","command":"true"}' >/dev/null
run left2 '{"template":"base","command":"sh","args":["-c","sleep 600 &"]}' >/dev/null
check "systemctl stop sandboxd" systemctl stop sandboxd.service
left=$(ps -eo user:20,comm | awk '$1 ~ /^[0-9]+$/ && $1 >= 1879048192' | head -n 5)
[[ -z $left ]] && ok "no sandbox process is left after a stop" ||
	fail "no sandbox process is left after a stop" "$left"
cgs=$(find /sys/fs/cgroup -type d -name 'sb-*' 2>/dev/null | head -n 5)
[[ -z $cgs ]] && ok "no sandbox cgroup is left after a stop" ||
	fail "no sandbox cgroup is left after a stop" "$cgs"
ns=$(ip netns list 2>/dev/null | head -n 5)
if [[ -z $ns ]]; then
	ok "no network namespace is left after a stop"
else
	fail "no network namespace is left after a stop" "$(for n in $ns; do
		echo "$n: $(journalctl -u sandboxd.service -o cat | grep -F "${n#as-}" | cut -c1-240)"
	done)"
fi
loops=$(losetup -a 2>/dev/null | head -n 5)
[[ -z $loops ]] && ok "no loop device is left after a stop" ||
	fail "no loop device is left after a stop" "$loops"

# --- the integration suite's tests of what differs between drivers (tagged `driver`) and of
# limits, against the installed sandboxd, each daemon in a delegated transient scope
# (systemd-run --scope -p Delegate=yes) as the unit runs it; the templates' filesystem without
# idmapped mounts (tmpfs before 6.3: said at start, naming tmpfs and 6.3); then the jail's
# escapes, budgets, seccomp and user namespaces (tests/security/test_jail.py). The lifecycle tests run their
# daemons as a process started by hand instead (the v2 manager at the hierarchy's root): they
# kill a daemon while it makes a sandbox and restart another over its state, and a new scope
# each time would give the second a cgroup of its own, where the first's unrecorded sandbox
# is not (the packaged unit's cgroup stays the same across restarts).
skipped=0
for spec in driver:scope:test_exec.py driver:scope:test_files.py driver:scope:test_processes.py \
	driver:scope:test_pause.py driver:hand:test_lifecycle.py driver:scope:test_terminal.py \
	driver:scope:test_watch.py driver:scope:test_ingress.py all:scope:test_limits.py \
	all:scope:test_filesystems.py security:scope:test_jail.py; do
	file=${spec##*:} kind=${spec%%:*} mode=${spec#*:}
	mode=${mode%%:*} tags='' dir=/lane/integration scope=1
	[[ $kind == driver ]] && tags=driver
	[[ $kind == security ]] && dir=/lane/security
	[[ $mode == hand ]] && scope=0
	out=$(cd /tmp && PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/lane/integration \
		SANDBOXD=/usr/sbin/sandboxd SANDBOXD_SCOPE=$scope DRIVER=jail TEST_TAGS=$tags \
		timeout 600 python3 -u -m runner "$dir" "$file" 2>&1)
	rc=$?
	summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
	if [[ -z $summary ]]; then
		fail "integration $file" "no summary (status $rc): $(tail -n 15 <<<"$out")"
		continue
	fi
	read -r p _ f _ s _ <<<"${summary//,/}"
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + ${s:-0}))
	echo "integration $file: $summary"
	grep -E '^SKIP ' <<<"$out"
	if ((f > 0)); then
		grep -E -A 25 '^(FAIL|ERROR): ' <<<"$out" | head -n 120
	fi
done

finish
