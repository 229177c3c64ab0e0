#!/usr/bin/env bash
# The packages of make deb, installed into a throw-away Debian 12 root made with mmdebstrap:
#   1. the packages install with their dependencies from Debian's archive (postinst: the
#      account, the uid ranges, the admin key, the base template), lintian-clean already;
#   2. systemd-analyze verify passes on sandboxd.service;
#   3. sandboxd starts as the unit would start it (there is no systemd as PID 1 here): its
#      EnvironmentFile, User=, CapabilityBoundingSet (setpriv), NoNewPrivileges, UMask,
#      LimitNOFILE, ProtectSystem=strict with its ReadWritePaths, ProtectHome and PrivateTmp
#      as mounts of its own; in a network namespace of its own (scripts/isolated.sh), so that
#      its nftables table is not the host's;
#   4. a member of the agent-sandbox group runs a command in a session with the CLI over the
#      socket, with its own key in ~/.config/agent-sandbox/api-key; without a key, or outside
#      the group, it is refused;
#   5. SIGTERM stops it cleanly within the unit's TimeoutStopSec;
#   6. sandboxd's AppArmor profile: none installed on Debian 12; accepted by AppArmor 4's parser
#      (trixie's, run from its package); installed and loaded where the kernel restricts user
#      namespaces (simulated: the sysctl's path given to the package's script, a stand-in
#      apparmor_parser that records its calls), removed by remove and by purge; refused by
#      Debian 12's own parser (AppArmor 3.0), which then gets none.
# docs/install.md lists the unit's options this cannot exercise.
#
# Usage: scripts/test-deb.sh [--build] DEB_DIR    (root; needs mmdebstrap and Debian's archive)
# --build makes the packages into DEB_DIR first (scripts/build-deb.sh; a failed build is a
# failed check). Prints a line per check, then `N passed, N failed` (the suite's summary for
# scripts/test.sh); stops at the first failure. KEEP_ROOT=1 keeps the root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'test-deb: %s\n' "$*" >&2; }
# A check that passed: said, and counted in $TEST_DEB_CHECKS (shared with the inner phase).
ok() {
	log "ok: $*"
	echo >>"$TEST_DEB_CHECKS"
}
die() {
	printf 'test-deb: FAIL: %s\n' "$*" >&2
	if [[ -z ${TEST_DEB_INNER:-} ]]; then
		echo "$(wc -l <"$TEST_DEB_CHECKS") passed, 1 failed"
	fi
	exit 1
}

# The value of a unit option, e.g. unit_opt CapabilityBoundingSet.
unit_opt() { sed -n "s/^$1=//p" "$root/lib/systemd/system/sandboxd.service" | tail -n 1; }

# aa4_check PROFILE: parses PROFILE with AppArmor 4's apparmor_parser (Debian 13's package,
# with Debian 13's C library beside it, since Debian 12's is too old for it: both fetched
# with apt from Debian's archive, extracted, never installed); its version in $aa4_version.
aa4_check() {
	local aa4 x out deb
	aa4=$(mktemp -d)
	mkdir -p "$aa4/lists/partial" "$aa4/cache/archives/partial" "$aa4/debs"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
		>"$aa4/sources.list"
	local apt=(-q -o Dir::Etc::SourceList="$aa4/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o Dir::State::Lists="$aa4/lists" -o Dir::Cache="$aa4/cache" -o APT::Sandbox::User=root
		-o Debug::NoLocking=1)
	if ! out=$({ apt-get "${apt[@]}" update && cd "$aa4/debs" &&
		apt-get "${apt[@]}" download apparmor libc6; } 2>&1); then
		rm -rf "$aa4"
		die "Debian 13's apparmor and libc6 could not be fetched: $(tail -n 3 <<<"$out")"
	fi
	x=$aa4/x
	for deb in "$aa4"/debs/*.deb; do dpkg-deb -x "$deb" "$x"; done
	local parser=("$x/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path
		"$x/usr/lib/x86_64-linux-gnu" "$x/usr/sbin/apparmor_parser")
	aa4_version=$("${parser[@]}" --version | head -n 1)
	if ! out=$("${parser[@]}" -Q -K -b "$x/etc/apparmor.d" --config-file=/dev/null "$1" 2>&1); then
		rm -rf "$aa4"
		die "AppArmor 4's parser refuses $1: $out"
	fi
	rm -rf "$aa4"
}

# Phase 3 to 5, run by the outer phase inside scripts/isolated.sh: ROOT is ready.
inside() {
	root=$1
	mount -t proc proc "$root/proc"
	mount --rbind /sys "$root/sys"
	mount --rbind /dev "$root/dev"
	mount -t tmpfs -o mode=0755 tmpfs "$root/run"
	mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"

	# RuntimeDirectory= and StateDirectory=, as systemd makes them.
	install -d -m 0755 "$root/run/agent-sandbox" "$root/var/lib/agent-sandbox"

	local caps bound nofile hard stop_s
	caps=$(unit_opt CapabilityBoundingSet)
	[[ -n $caps ]] || die "the unit has no CapabilityBoundingSet"
	bound=-all
	for c in $caps; do
		c=${c#CAP_}
		bound+=",+${c,,}"
	done
	nofile=$(unit_opt LimitNOFILE)
	hard=$(ulimit -Hn)
	((nofile <= hard)) || {
		log "LimitNOFILE=$nofile is above this machine's hard limit $hard: $hard instead"
		nofile=$hard
	}
	stop_s=$(unit_opt TimeoutStopSec)
	[[ $(unit_opt User) == root && $(unit_opt NoNewPrivileges) == yes ]] ||
		die "the unit's User= or NoNewPrivileges= changed: update this test"

	# The daemon's own mount namespace: / read-only but for ReadWritePaths (ProtectSystem=
	# strict), empty /home and /root (ProtectHome), its own /tmp (PrivateTmp).
	log "starting sandboxd as the unit would (bounding set $bound, nofile $nofile)"
	local rw
	rw=$(unit_opt ReadWritePaths)
	# shellcheck disable=SC2016,SC2086 # the inner shell expands; ReadWritePaths is a list
	unshare --mount --propagation private -- bash -euo pipefail -c '
		root=$1 bound=$2 nofile=$3 umask_=$4
		shift 4
		for p in "$@"; do mount --bind "$root$p" "$root$p"; done
		# Recursive, so that /proc, /sys, /dev, /run and the paths above stay; read-only
		# applies to the top only.
		mount --rbind "$root" "$root"
		mount -o remount,bind,ro "$root"
		mount -t tmpfs -o mode=0755 tmpfs "$root/home"
		mount -t tmpfs -o mode=0700 tmpfs "$root/root"
		mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
		umask "$umask_"
		# pivot_root, not chroot: the kernel refuses user namespaces to a chrooted process.
		cd "$root"
		pivot_root . mnt
		cd /
		umount -l /mnt
		exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			/bin/sh -c "set -a; . /etc/agent-sandbox/sandboxd.env; set +a; exec setpriv --reuid=0 --regid=0 --init-groups --bounding-set=$bound --inh-caps=-all --no-new-privs prlimit --nofile=$nofile:$nofile /usr/sbin/sandboxd"
	' _ "$root" "$bound" "$nofile" "$(unit_opt UMask)" $rw 2>"$root/var/lib/agent-sandbox/sandboxd.log" &
	local pid=$! i
	for ((i = 0; i < 600; i++)); do
		[[ -S $root/run/agent-sandbox/sandboxd.sock ]] && break
		kill -0 "$pid" 2>/dev/null || {
			tail -n 30 "$root/var/lib/agent-sandbox/sandboxd.log" >&2
			die "sandboxd exited at start (its log above)"
		}
		sleep 0.1
	done
	[[ -S $root/run/agent-sandbox/sandboxd.sock ]] || die "no socket after 60 s"
	local mode group
	mode=$(stat -c %a "$root/run/agent-sandbox/sandboxd.sock")
	group=$(chroot "$root" stat -c %G /run/agent-sandbox/sandboxd.sock)
	[[ $mode == 660 && $group == agent-sandbox ]] ||
		die "the socket is $mode, group $group (want 660, agent-sandbox)"
	ok "sandboxd serves; its socket is 0660 root:agent-sandbox"
	# With agent-sandbox-vm, the qemu driver finds QEMU and the packaged kernel: on a host
	# without a usable KVM (this one), auto passes it over for that reason alone.
	grep -q 'driver qemu not usable: no usable KVM\|driver qemu selected' "$root/var/lib/agent-sandbox/sandboxd.log" ||
		die "the qemu driver did not find QEMU and the packaged kernel: $(grep -m1 'driver qemu' "$root/var/lib/agent-sandbox/sandboxd.log")"
	ok "the qemu driver finds QEMU and the packaged kernel: $(grep -m1 -o 'driver qemu [^"]*' "$root/var/lib/agent-sandbox/sandboxd.log" | cut -c1-100)"
	# The dashboard: installed by the package, served by the daemon from there.
	[[ -f $root/usr/share/agent-sandbox/ui/index.html && -f $root/usr/share/agent-sandbox/ui/app.js ]] ||
		die "the package holds no dashboard in /usr/share/agent-sandbox/ui"
	local page
	page=$(curl -sf --unix-socket "$root/run/agent-sandbox/sandboxd.sock" http://localhost/ui/) ||
		die "GET /ui/ failed"
	cmp -s <(printf '%s\n' "$page") "$root/usr/share/agent-sandbox/ui/index.html" ||
		die "GET /ui/ is not the installed index.html"
	curl -sfI --unix-socket "$root/run/agent-sandbox/sandboxd.sock" http://localhost/ui/app.js |
		grep -qi '^content-security-policy: default-src' || die "GET /ui/app.js has no CSP"
	ok "the daemon serves the packaged dashboard at /ui"
	grep -q '"key":' "$root/var/lib/agent-sandbox/sandboxd.log" &&
		die "the daemon logged a key (the package made one before the start)"

	# A member of the group, with a key of its own (made by root through the database).
	chroot "$root" useradd -m -G agent-sandbox alice
	chroot "$root" useradd -m bob
	local key
	key=$(chroot "$root" sandbox keys create alice --scopes exec 2>/dev/null |
		grep -o 'sk_test_[0-9a-f]*' | head -n 1)
	[[ -n $key ]] || die "sandbox keys create gave no key"
	# USER:GROUP COMMAND...: as that user with its groups, from the root's own /etc/group.
	as() {
		chroot "$root" setpriv --reuid="${1%%:*}" --regid="${1#*:}" --init-groups \
			/usr/bin/env -i HOME="/home/${1%%:*}" PATH=/usr/bin:/bin "${@:2}"
	}

	local out
	if out=$(as alice:alice sandbox ps 2>&1); then
		die "a member without a key was let in: $out"
	fi
	grep -q "API key required" <<<"$out" || die "no key: want 401 API key required, got: $out"
	ok "a member without a key: refused ($out)"

	as alice:alice mkdir -p -m 0700 /home/alice/.config/agent-sandbox
	printf '%s\n' "$key" | as alice:alice sh -c 'cat >~/.config/agent-sandbox/api-key'
	chmod 0644 "$root/home/alice/.config/agent-sandbox/api-key"
	if out=$(as alice:alice sandbox ps 2>&1); then
		die "a key file readable by others was used"
	fi
	ok "a key file readable by others: refused ($out)"
	chmod 0600 "$root/home/alice/.config/agent-sandbox/api-key"

	# shellcheck disable=SC2016 # for the sandbox's shell
	out=$(as alice:alice sandbox run --template base -- sh -c 'echo hello from $(id -u)') ||
		die "sandbox run as alice failed: $out"
	[[ $out == "hello from "[0-9]* ]] || die "sandbox run printed: $out"
	ok "alice (group agent-sandbox) ran a command in a session over the socket: $out"

	if out=$(as bob:bob env SANDBOX_API_KEY="$key" sandbox ps 2>&1); then
		die "a user outside the group reached the socket: $out"
	fi
	grep -qi "permission denied\|couldn't connect\|could not connect" <<<"$out" ||
		die "outside the group: want a refused connection, got: $out"
	ok "bob (not in the group): refused by the socket's mode"

	log "stopping (SIGTERM; the unit allows ${stop_s} s)"
	local start
	start=$(date +%s)
	kill -TERM "$pid"
	local rc=0
	for ((i = 0; i < stop_s * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && die "sandboxd still runs ${stop_s} s after SIGTERM"
	wait "$pid" || rc=$?
	((rc == 0)) || {
		tail -n 20 "$root/var/lib/agent-sandbox/sandboxd.log" >&2
		die "sandboxd exited with $rc"
	}
	grep -q '"level":"\(error\|fatal\)"' "$root/var/lib/agent-sandbox/sandboxd.log" &&
		die "sandboxd logged an error: $(grep -m1 '"level":"error"' "$root/var/lib/agent-sandbox/sandboxd.log")"
	ok "no error in the daemon's log"
	ok "stopped cleanly in $(($(date +%s) - start)) s"
}

if [[ ${1:-} == --inside ]]; then
	TEST_DEB_INNER=1
	inside "$2"
	exit 0
fi

build=0
if [[ ${1:-} == --build ]]; then
	build=1
	shift
fi
debs=${1:?usage: test-deb.sh [--build] DEB_DIR}
TEST_DEB_CHECKS=$(mktemp)
export TEST_DEB_CHECKS
t0=$(date +%s)
((EUID == 0)) || die "needs root (mmdebstrap, chroot, namespaces)"
if ((build)); then
	"$here/build-deb.sh" "$debs" >&2 || die "make deb failed"
	ok "the packages build, lintian-clean, in $(($(date +%s) - t0)) s"
fi
debs=$(cd "$debs" && pwd)
root=$(mktemp -d /var/tmp/agent-sandbox-deb.XXXXXX)
cleanup() {
	rm -f "$TEST_DEB_CHECKS"
	if [[ -n ${KEEP_ROOT:-} ]]; then
		log "kept $root"
	else
		rm -rf --one-file-system "$root"
	fi
}
trap cleanup EXIT

log "making a Debian 12 root with mmdebstrap (from Debian's archive)"
# bash-completion and man-db: the completion and the manual pages are tried there too.
mmdebstrap --quiet --variant=apt --include=systemd,bash-completion,man-db bookworm "$root" ||
	die "mmdebstrap failed"

log "installing the packages (postinst: account, uid ranges, admin key, base template)"
mkdir -p "$root/tmp/debs"
cp "$debs"/agent-sandbox_*.deb "$debs"/agent-sandbox-cli_*.deb "$debs"/agent-sandbox-vm_*.deb \
	"$root/tmp/debs/"
# In a mount namespace of its own: /proc, /dev and /sys for the postinst, gone afterwards.
# shellcheck disable=SC2016 # the inner shell expands
unshare --mount --propagation private -- bash -euo pipefail -c '
	root=$1
	mount -t proc proc "$root/proc"
	mount --rbind /dev "$root/dev"
	mount --rbind /sys "$root/sys"
	# mmdebstrap leaves neither package lists nor a resolver configuration behind.
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	chroot "$root" apt-get update -q
	# What the README'\''s install of the two packages brings, recommends included.
	chroot "$root" sh -c "apt-get install -s /tmp/debs/agent-sandbox_*.deb \
		/tmp/debs/agent-sandbox-cli_*.deb" | grep "^Inst " >"$root/tmp/lean.txt"
	chroot "$root" sh -c "DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends /tmp/debs/*.deb"
' _ "$root" >"$root/tmp/apt.log" 2>&1 || {
	tail -n 30 "$root/tmp/apt.log" >&2
	die "apt-get install failed"
}
grep '^agent-sandbox:' "$root/tmp/apt.log" | sed 's/^/    | /' >&2
# The main package is lean: the jail's needs, not QEMU's graphical stack (which came with a
# recommended qemu-system-x86: 381 packages, 1 GB).
lean=$(wc -l <"$root/tmp/lean.txt")
grep -q '^Inst qemu' "$root/tmp/lean.txt" && die "installing agent-sandbox brings QEMU: $(grep '^Inst qemu' "$root/tmp/lean.txt" | head -n 3)"
heavy=$({ grep -E '^Inst (libgtk|gtk|libgl1-mesa|mesa-|libpulse|pulseaudio|libx11-6 )' "$root/tmp/lean.txt" || true; } | cut -d' ' -f2 | paste -sd ' ')
[[ -z $heavy ]] || die "installing agent-sandbox brings a desktop's libraries: $heavy"
((lean <= 80)) || die "installing agent-sandbox and agent-sandbox-cli brings $lean packages (at most 80): $(cut -d' ' -f2 "$root/tmp/lean.txt" | paste -sd ' ')"
ok "agent-sandbox and agent-sandbox-cli with their recommends bring $lean packages, no QEMU"
[[ $(head -c 4 "$root/usr/lib/agent-sandbox/vmlinux" | od -An -c | tr -d ' ') == '177ELF' ]] ||
	die "agent-sandbox-vm holds no guest kernel at /usr/lib/agent-sandbox/vmlinux"
# shellcheck disable=SC2016 # dpkg-query's format
ok "agent-sandbox-vm installs the guest kernel and QEMU ($(chroot "$root" dpkg-query -W -f='${Version}' qemu-system-x86))"
grep -q 'sk_test_' "$root/tmp/apt.log" && die "the installation printed a key"
# Every documentation file the installation's messages point to is there (dh_compress
# compresses the larger ones: a name without .gz would be wrong).
named=$(tr -d '\r' <"$root/tmp/apt.log" | grep -oE '/usr/share/doc/[^ ]*[^ .,;:)]' | sort -u)
[[ -n $named ]] || die "the installation names no documentation file"
for f in $named; do
	[[ -f $root$f ]] || die "the installation points to $f, which is not there"
done
ok "the installation points to documentation that is there: $(paste -sd ' ' <<<"$named")"

# What postinst must have left.
[[ $(stat -c '%a %U' "$root/var/lib/agent-sandbox/state/admin-key") == "600 root" ]] ||
	die "the admin key file is not 0600 root"
grep -qx 'agent-sandbox:1879048192:67108864' "$root/etc/subuid" ||
	die "/etc/subuid has no range for agent-sandbox"
grep -qx 'agent-sandbox:1879048192:67108864' "$root/etc/subgid" ||
	die "/etc/subgid has no range for agent-sandbox"
[[ -f $root/var/lib/agent-sandbox/artifacts/templates/base/rootfs.ext4 ]] ||
	die "postinst built no base template"
[[ -L $root/etc/systemd/system/multi-user.target.wants/sandboxd.service ]] ||
	die "the service is not enabled"
ok "postinst: account, ranges in /etc/subuid and /etc/subgid, key 0600, base template, enabled"

# AppArmor: Debian 12's kernel has no kernel.apparmor_restrict_unprivileged_userns, and its
# AppArmor 3.0 cannot read the profile: it stays in /usr/share, inert.
profile=/usr/share/agent-sandbox/apparmor/sandboxd
[[ -f $root$profile && -x $root/usr/libexec/agent-sandbox/apparmor-profile ]] ||
	die "the package holds no AppArmor profile and script"
[[ ! -e $root/etc/apparmor.d/sandboxd ]] || die "postinst installed the AppArmor profile on Debian 12"
grep -qi '^agent-sandbox:.*apparmor' "$root/tmp/apt.log" &&
	die "postinst spoke of AppArmor on Debian 12: $(grep -m1 -i '^agent-sandbox:.*apparmor' "$root/tmp/apt.log")"
ok "Debian 12: no AppArmor profile installed, nothing said of it"
attach=$(sed -n 's/^profile sandboxd \([^ ]*\) flags=(unconfined) {$/\1/p' "$root$profile")
[[ $attach == "$(unit_opt ExecStart)" ]] ||
	die "the profile is attached to '$attach', the unit starts $(unit_opt ExecStart)"
aa4_check "$root$profile"
ok "the profile (attached to $attach) is accepted by AppArmor 4's parser ($aa4_version)"

# A user later added by useradd gets ids outside the registered range.
chroot "$root" useradd -m carol
awk -F: '$1 == "carol" && $2 + $3 > 1879048192 && $2 < 1879048192 + 67108864 { bad = 1 } END { exit bad }' \
	"$root/etc/subuid" || die "useradd gave carol ids inside the sandboxes' range"
ok "useradd gives a new user ids outside the range: $(grep '^carol:' "$root/etc/subuid")"

chroot "$root" systemd-analyze verify /lib/systemd/system/sandboxd.service ||
	die "systemd-analyze verify failed"
ok "systemd-analyze verify sandboxd.service"

chroot "$root" bash -c '. /usr/share/bash-completion/bash_completion; _completion_loader sandbox; complete -p sandbox' |
	grep -q -- '-F _sandbox' || die "the bash completion does not load"
[[ -f $root/usr/share/zsh/vendor-completions/_sandbox ]] || die "no zsh completion"
chroot "$root" man -w sandboxd.8 sandbox.1 >/dev/null || die "no manual pages"
ok "completion and manual pages installed"

# A daemon that the system runs, with a page of section 8: /usr/sbin, where the unit finds it.
[[ -x $root/usr/sbin/sandboxd && ! -e $root/usr/bin/sandboxd ]] ||
	die "sandboxd is not /usr/sbin/sandboxd (alone)"
[[ $(unit_opt ExecStart) == /usr/sbin/sandboxd ]] ||
	die "the unit starts $(unit_opt ExecStart), not /usr/sbin/sandboxd"
ok "sandboxd is /usr/sbin/sandboxd, which the unit starts"

"$here/isolated.sh" "$here/test-deb.sh" --inside "$root" || die "the daemon's checks failed (above)"

# Upgrade in place (the same version again: postinst as on an upgrade), on a kernel that
# restricts unprivileged user namespaces: simulated, with the sysctl's path given to the
# package's script and a stand-in apparmor_parser that records its arguments. Then removal,
# Debian 12's own AppArmor, and purge.
printf '1\n' >"$root/tmp/userns-sysctl"
install -m 0755 /dev/stdin "$root/usr/local/sbin/apparmor_parser" <<'SH'
#!/bin/sh
echo "$*" >>/tmp/apparmor_parser.calls
SH
# apt_in LOG ARGS...: apt-get in the root, on that simulated kernel (DPkg::Path: apt's PATH for
# the maintainer scripts, /usr/local/sbin first for the stand-in).
apt_in() {
	local log=$1
	shift
	chroot "$root" env DEBIAN_FRONTEND=noninteractive AGENT_SANDBOX_USERNS_SYSCTL=/tmp/userns-sysctl \
		apt-get -y -q -o DPkg::Path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		"$@" >"$root/tmp/$log" 2>&1
}
deb=/tmp/debs/$(basename "$root"/tmp/debs/agent-sandbox_*.deb)
key_before=$(sha256sum <"$root/var/lib/agent-sandbox/state/admin-key")
apt_in apt-again.log install --reinstall --no-install-recommends "$deb" || {
	tail -n 20 "$root/tmp/apt-again.log" >&2
	die "installing again failed"
}
[[ $(grep -c '^agent-sandbox:' "$root/etc/subuid") == 1 ]] || die "installing again registered the range twice"
[[ $(sha256sum <"$root/var/lib/agent-sandbox/state/admin-key") == "$key_before" ]] ||
	die "installing again changed the admin key file"
ok "installing again keeps the key and the one registration"
cmp -s "$root$profile" "$root/etc/apparmor.d/sandboxd" ||
	die "with the restriction, postinst did not install the profile: $(grep -i apparmor "$root/tmp/apt-again.log")"
if ! grep -qx -- "-Q -K $profile" "$root/tmp/apparmor_parser.calls" ||
	! grep -qx -- "-r -T -W /etc/apparmor.d/sandboxd" "$root/tmp/apparmor_parser.calls"; then
	die "postinst did not check, then load, the profile: $(paste -sd ';' "$root/tmp/apparmor_parser.calls")"
fi
grep -q 'installed and loaded the AppArmor profile' "$root/tmp/apt-again.log" || die "postinst did not say it loaded the profile"
ok "with kernel.apparmor_restrict_unprivileged_userns: the profile checked, installed, loaded"
# The operator's own profile (as docs/hosts.md once told them to write) is left alone.
printf 'profile sandboxd /usr/sbin/sandboxd flags=(unconfined) {\n  userns,\n}\n' >"$root/tmp/own"
cp "$root/tmp/own" "$root/etc/apparmor.d/sandboxd"
chroot "$root" env AGENT_SANDBOX_USERNS_SYSCTL=/tmp/userns-sysctl /usr/libexec/agent-sandbox/apparmor-profile install 2>"$root/tmp/own.log" ||
	die "apparmor-profile install failed"
cmp -s "$root/tmp/own" "$root/etc/apparmor.d/sandboxd" || die "the operator's own profile was replaced"
ok "an operator's own profile is left as it is: $(cat "$root/tmp/own.log")"
cp "$root$profile" "$root/etc/apparmor.d/sandboxd"

: >"$root/tmp/apparmor_parser.calls"
apt_in apt-remove.log remove agent-sandbox || die "remove failed: $(tail -n 5 "$root/tmp/apt-remove.log")"
[[ ! -e $root/etc/apparmor.d/sandboxd ]] || die "remove left the profile in /etc/apparmor.d"
grep -qx -- "-R /etc/apparmor.d/sandboxd" "$root/tmp/apparmor_parser.calls" ||
	die "remove did not unload the profile: $(paste -sd ';' "$root/tmp/apparmor_parser.calls")"
ok "remove unloads the profile and removes it from /etc/apparmor.d"

# Debian 12's AppArmor (3.0) on a kernel with the restriction (a newer kernel from elsewhere):
# its parser does not read the profile, which is therefore not installed, and a copy left
# there is taken away, since it would stop the loading of every profile at boot.
mv "$root/usr/local/sbin/apparmor_parser" "$root/tmp/apparmor_parser.stand-in"
apt_in apt-apparmor.log install --no-install-recommends apparmor || die "apt-get install apparmor failed: $(tail -n 5 "$root/tmp/apt-apparmor.log")"
apt_in apt-again2.log install --no-install-recommends "$deb" || {
	tail -n 20 "$root/tmp/apt-again2.log" >&2
	die "installing with Debian 12's AppArmor failed"
}
# shellcheck disable=SC2016 # dpkg-query's format
aa3=$(chroot "$root" dpkg-query -W -f='${Version}' apparmor)
[[ ! -e $root/etc/apparmor.d/sandboxd ]] || die "the profile was installed for AppArmor $aa3"
grep -q "apparmor_parser does not accept sandboxd's profile" "$root/tmp/apt-again2.log" ||
	die "postinst did not say why no profile was installed: $(grep -i apparmor "$root/tmp/apt-again2.log")"
cp "$root$profile" "$root/etc/apparmor.d/sandboxd"
chroot "$root" env AGENT_SANDBOX_USERNS_SYSCTL=/tmp/userns-sysctl /usr/libexec/agent-sandbox/apparmor-profile install 2>/dev/null
[[ ! -e $root/etc/apparmor.d/sandboxd ]] || die "a profile Debian 12's AppArmor cannot read was left in /etc/apparmor.d"
ok "Debian 12's AppArmor ($aa3) refuses the profile: none installed, and postinst says so"

mv "$root/tmp/apparmor_parser.stand-in" "$root/usr/local/sbin/apparmor_parser"
apt_in apt-again3.log install --reinstall --no-install-recommends "$deb" ||
	die "installing again failed: $(tail -n 5 "$root/tmp/apt-again3.log")"
cmp -s "$root$profile" "$root/etc/apparmor.d/sandboxd" || die "the profile was not installed again"
apt_in apt-purge.log purge agent-sandbox || die "purge failed"
[[ ! -e $root/var/lib/agent-sandbox ]] || die "purge left /var/lib/agent-sandbox"
! grep -q '^agent-sandbox:' "$root/etc/subuid" "$root/etc/subgid" || die "purge left the ranges registered"
[[ ! -e $root/etc/apparmor.d/sandboxd ]] || die "purge left the AppArmor profile"
ok "purge removes the state, the ranges' registration and the AppArmor profile"
log "done in $(($(date +%s) - t0)) s"
echo "$(wc -l <"$TEST_DEB_CHECKS") passed, 0 failed"
