#!/usr/bin/env bash
# Tests of the template builder (templates/build.sh).
# Prints one line per test: "ok NAME" or "FAIL NAME: reason", then
# "N passed, N failed". Exits non-zero if any test failed.
#
# Builds go to a temporary artifacts directory. The tests of Dockerfile
# builds need a container engine (buildah, which `make test` installs) and
# Debian's archive (apt in the base image; a minute or two the first time,
# for the base image). Nothing is skipped: what these tests need is built
# or installed by `make test`, so its absence is a failure.
# The guest kernel has its own tests, tests/kernel/run.sh.
#
# The bundled templates in sessions are tested by test_sessions.py, run with
# `tests/integration/run.sh tests/templates`: it builds them into the real
# artifacts directory, where later runs reuse them.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$repo/templates/build.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export FIRECRACKER_ARTIFACTS_DIR="$tmp/artifacts"
unset TEMPLATES_DIR TEMPLATE_HEADROOM_MIB

# The real agent when it has been built, else a static stand-in.
agent="$repo/build/agent/sandbox-agent"
if [[ ! -x $agent ]] || ldd "$agent" >/dev/null 2>&1; then
	agent=/bin/busybox
fi
export SANDBOX_AGENT_BIN="$agent"

passed=0 failed=0
out="$tmp/out" # output of the last command run by `try`

# try CMD...: runs CMD with its output in $out; returns its status.
try() {
	"$@" >"$out" 2>&1
}

# A test prints nothing. It calls fail REASON for each problem it finds
# (the first one is reported).
fail() {
	printf '%s\n' "$*" >>"$tmp/failures"
	return 1
}

run_test() {
	local name=$1 status=0
	rm -f "$tmp/failures" "$out"
	"$name" || status=$?
	if [[ -s $tmp/failures ]]; then
		echo "FAIL $name: $(head -n 1 "$tmp/failures")"
		failed=$((failed + 1))
		if [[ -s $out ]]; then sed 's/^/    | /' "$out" | tail -n 20; fi
	elif ((status)); then
		echo "FAIL $name: exit status $status"
		failed=$((failed + 1))
	else
		echo "ok $name"
		passed=$((passed + 1))
	fi
}

# expect_failure PATTERN CMD...: CMD must fail and print PATTERN (an ERE).
expect_failure() {
	local pattern=$1
	shift
	if try "$@"; then
		fail "succeeded, expected a failure"
		return
	fi
	grep -qE -- "$pattern" "$out" || fail "no message matching /$pattern/"
}

# A private templates directory with one template NAME made of the
# given Dockerfile and template.json contents ("-" for none).
make_template() {
	local name=$1 dockerfile=$2 manifest=$3
	rm -rf "$tmp/src"
	mkdir -p "$tmp/src/$name"
	[[ $dockerfile == - ]] || printf '%s' "$dockerfile" >"$tmp/src/$name/Dockerfile"
	[[ $manifest == - ]] || printf '%s' "$manifest" >"$tmp/src/$name/template.json"
}

# No temporary trees left next to the artifacts.
no_leftovers() {
	local left
	left=$(find "$FIRECRACKER_ARTIFACTS_DIR/templates" -mindepth 1 -maxdepth 1 -name '.*' ! -name '*.lock' 2>/dev/null)
	[[ -z $left ]] || fail "left behind: $left"
}

manifest_fields_ok() {
	local file=$1
	python3 -m json.tool "$file" >/dev/null || return 1
	python3 - "$file" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for k in ("name", "displayName", "version", "description", "baseImage", "createdAt"):
    assert isinstance(m.get(k), str), k
assert isinstance(m.get("tools"), list) and all(isinstance(t, str) for t in m["tools"]), "tools"
r = m.get("resources")
assert isinstance(r, dict), "resources"
assert isinstance(r.get("memSizeMib"), int) and r["memSizeMib"] > 0, "memSizeMib"
assert isinstance(r.get("vcpuCount"), int) and r["vcpuCount"] > 0, "vcpuCount"
EOF
}

test_build_base() {
	local dir="$FIRECRACKER_ARTIFACTS_DIR/templates/base" d
	try "$build" base || {
		fail "templates/build.sh base failed"
		return
	}
	[[ $(tail -n 1 "$out") == "$dir" ]] || fail "did not print $dir on stdout"
	[[ -s $dir/rootfs.ext4 ]] || fail "no rootfs.ext4"
	[[ -x $dir/rootfs/sbin/sandbox-agent ]] || fail "no rootfs/sbin/sandbox-agent"
	cmp -s "$dir/rootfs/sbin/sandbox-agent" "$SANDBOX_AGENT_BIN" || fail "the agent is not $SANDBOX_AGENT_BIN"
	for d in workspace tmp proc sys dev run; do
		[[ -d $dir/rootfs/$d ]] || fail "no /$d in rootfs/"
	done
	[[ -x $dir/rootfs/bin/sh ]] || fail "no /bin/sh in rootfs/"
	debugfs -R 'stat /sbin/sandbox-agent' "$dir/rootfs.ext4" 2>/dev/null | grep -q 'Type: regular' ||
		fail "debugfs does not find /sbin/sandbox-agent in rootfs.ext4"
	debugfs -R 'ls /' "$dir/rootfs.ext4" 2>/dev/null | grep -qw workspace ||
		fail "no /workspace in rootfs.ext4"
	manifest_fields_ok "$dir/template.json" || fail "template.json is invalid or lacks fields"
	grep -q '"memSizeMib": 128' "$dir/template.json" || fail "base does not ask for 128 MiB"
	no_leftovers
}

test_base_ext4_fsck() {
	local img="$FIRECRACKER_ARTIFACTS_DIR/templates/base/rootfs.ext4"
	[[ -s $img ]] || {
		fail "no base rootfs.ext4 (test_build_base makes it)"
		return
	}
	try e2fsck -fn "$img" || fail "e2fsck reports errors"
}

test_base_rebuild_replaces() {
	local dir="$FIRECRACKER_ARTIFACTS_DIR/templates/base" before after
	before=$(jq -r .createdAt "$dir/template.json")
	touch "$dir/stale-marker"
	# createdAt counts whole seconds: the rebuild must come in another second to change it.
	sleep 1
	try "$build" --force base || {
		fail "rebuild failed"
		return
	}
	after=$(jq -r .createdAt "$dir/template.json")
	[[ $before != "$after" ]] || fail "createdAt did not change"
	[[ ! -e $dir/stale-marker ]] || fail "the old directory was not replaced"
	no_leftovers
}

# One call building several templates takes each lock once: a second flock of a lock the
# script holds would wait for itself (as `build.sh python node` did on the engine's lock).
test_one_call_takes_a_lock_once() {
	try timeout 300 "$build" --force base base || fail "build.sh base base failed or hung"
	no_leftovers
}

test_base_up_to_date_is_reused() {
	local dir="$FIRECRACKER_ARTIFACTS_DIR/templates/base"
	touch "$dir/kept-marker"
	try "$build" base || {
		fail "build failed"
		return
	}
	grep -q "up to date" "$out" || fail "an unchanged template was built again"
	[[ -e $dir/kept-marker ]] || fail "the build of unchanged inputs was replaced"
	[[ $(tail -n 1 "$out") == "$dir" ]] || fail "did not print $dir on stdout"
	rm -f "$dir/kept-marker"
}

test_changed_input_rebuilds() {
	local src="$tmp/src" dir="$FIRECRACKER_ARTIFACTS_DIR/templates/base"
	mkdir -p "$src"
	cp -a "$repo/templates/base" "$src/"
	TEMPLATES_DIR="$src" try "$build" base || {
		fail "build from a copy failed"
		return
	}
	touch "$dir/stale-marker"
	printf '\n' >>"$src/base/template.json"
	TEMPLATES_DIR="$src" try "$build" base || {
		fail "build after a change failed"
		return
	}
	grep -q "up to date" "$out" && fail "a changed template was not built again"
	[[ ! -e $dir/stale-marker ]] || fail "the build was not replaced"
	no_leftovers
}

# base is made from what the host has (its busybox, the agent): no download, so no network.
# How long it takes is bench material, not a test's: under the suites' load it varies 2x.
test_base_builds_offline() {
	try unshare --net "$build" --force base || fail "base did not build without a network"
}

test_unknown_template() {
	expect_failure "no template 'nosuch'" "$build" nosuch
}

test_invalid_name() {
	expect_failure "invalid template name" "$build" ../etc
}

test_missing_agent() {
	SANDBOX_AGENT_BIN="$tmp/no-agent" expect_failure "guest agent .*no-agent" "$build" base
}

test_dockerfile_without_from() {
	make_template bad $'# no FROM here\nRUN echo hi\n' -
	TEMPLATES_DIR="$tmp/src" expect_failure "line 2: RUN before FROM" "$build" bad
	grep -q "no FROM instruction" "$out" || fail "does not say that FROM is missing"
}

test_dockerfile_unknown_instruction() {
	make_template bad $'FROM agent-sandbox-base:latest\n\nRUN echo a \\\n    b\nFROBNICATE all\n' -
	TEMPLATES_DIR="$tmp/src" expect_failure "line 5: unknown instruction 'FROBNICATE'" "$build" bad
}

test_dockerfile_empty() {
	make_template bad $'# only a comment\n\n' -
	TEMPLATES_DIR="$tmp/src" expect_failure "no instructions" "$build" bad
}

test_dockerfile_missing_argument() {
	make_template bad $'FROM agent-sandbox-base:latest\nRUN\n' -
	TEMPLATES_DIR="$tmp/src" expect_failure "line 2: RUN needs arguments" "$build" bad
}

test_manifest_syntax_error() {
	make_template bad $'FROM agent-sandbox-base:latest\n' $'{\n  "name": "bad",\n  "tools": ["a" "b"]\n}\n'
	TEMPLATES_DIR="$tmp/src" expect_failure "template.json is not valid JSON.*line 3" "$build" bad
}

test_manifest_wrong_types() {
	make_template bad $'FROM agent-sandbox-base:latest\n' \
		'{"name": "bad", "tools": "git", "resources": {"memSizeMib": "lots", "vcpuCount": 0}}'
	TEMPLATES_DIR="$tmp/src" expect_failure "tools must be an array of strings" "$build" bad
	grep -q "resources.memSizeMib must be an integer" "$out" || fail "memSizeMib not reported"
	grep -q "resources.vcpuCount must be an integer" "$out" || fail "vcpuCount not reported"
}

test_manifest_not_object() {
	make_template bad $'FROM agent-sandbox-base:latest\n' '["bad"]'
	TEMPLATES_DIR="$tmp/src" expect_failure "must be a JSON object" "$build" bad
}

test_manifest_name_mismatch() {
	make_template bad $'FROM agent-sandbox-base:latest\n' '{"name": "other"}'
	TEMPLATES_DIR="$tmp/src" expect_failure 'name is "other" but the template directory is "bad"' "$build" bad
}

test_no_sources() {
	make_template bad - '{"name": "bad"}'
	TEMPLATES_DIR="$tmp/src" expect_failure "neither a Dockerfile nor a build-rootfs.sh" "$build" bad
}

# A failed rebuild leaves the previous artifacts as they were.
test_failed_rebuild_keeps_old() {
	local dir="$FIRECRACKER_ARTIFACTS_DIR/templates/recipe" sum
	make_template recipe - '{"name": "recipe", "resources": {"memSizeMib": 64, "vcpuCount": 1}}'
	# shellcheck disable=SC2016 # $1 belongs to the recipe
	printf '#!/bin/sh\nset -e\nmkdir -p "$1/bin"\ncp /bin/busybox "$1/bin/"\n' >"$tmp/src/recipe/build-rootfs.sh"
	chmod +x "$tmp/src/recipe/build-rootfs.sh"
	TEMPLATES_DIR="$tmp/src" try "$build" recipe || {
		fail "first build failed"
		return
	}
	sum=$(cat "$dir/template.json" "$dir/rootfs.ext4" | sha256sum)
	printf '#!/bin/sh\necho "recipe broke on purpose" >&2\nexit 3\n' >"$tmp/src/recipe/build-rootfs.sh"
	TEMPLATES_DIR="$tmp/src" expect_failure "recipe broke on purpose" "$build" recipe || return
	[[ $(cat "$dir/template.json" "$dir/rootfs.ext4" | sha256sum) == "$sum" ]] ||
		fail "the previous artifacts changed"
	no_leftovers
}

test_shellcheck() {
	command -v shellcheck >/dev/null || {
		fail "shellcheck is not installed (scripts/debian-packages.txt has it)"
		return
	}
	# Every script of the project but the libraries that build.sh sources (checked through
	# it, with -x, where their variables are known).
	local scripts=()
	mapfile -t scripts < <(git -C "$repo" ls-files '*.sh' ':!templates/lib/*' | sed "s|^|$repo/|")
	try shellcheck -x "$build" "${scripts[@]}" || fail "shellcheck reports problems"
}

# needs_engine: false (after recording the failure) when no container engine can build a
# Dockerfile here (templates/lib/engine.sh: docker, podman or buildah).
needs_engine() {
	local e
	for e in buildah podman docker; do
		command -v "$e" >/dev/null && return 0
	done
	fail "no container engine (docker, podman or buildah) is installed;" \
		"buildah is among the packages of scripts/debian-packages.txt"
}

test_dockerfile_step_failure() {
	needs_engine || return
	make_template bad $'FROM agent-sandbox-base:latest\nRUN echo first-step\nRUN echo "about to fail" \\\n && exit 7\nLABEL template.name="bad"\n' -
	TEMPLATES_DIR="$tmp/src" expect_failure "Dockerfile line 3 failed: RUN" "$build" bad || return
	grep -q "about to fail" "$out" || fail "the step's output is not shown"
	no_leftovers
}

test_build_python() {
	needs_engine || return
	local dir="$FIRECRACKER_ARTIFACTS_DIR/templates/python"
	try "$build" python || {
		fail "templates/build.sh python failed"
		return
	}
	manifest_fields_ok "$dir/template.json" || fail "template.json is invalid or lacks fields"
	jq -e '.tools == ["python3", "pip", "sqlite3", "xz", "git", "curl"] and .baseImage == "agent-sandbox-base:latest"' \
		"$dir/template.json" >/dev/null || fail "manifest does not reflect the Dockerfile labels"
	[[ -x $dir/rootfs/usr/bin/python3 ]] || fail "no python3 in rootfs/"
	debugfs -R 'stat /usr/bin/git' "$dir/rootfs.ext4" 2>/dev/null | grep -q 'Type: regular' ||
		fail "no git in rootfs.ext4"
	debugfs -R 'stat /sbin/sandbox-agent' "$dir/rootfs.ext4" 2>/dev/null | grep -q 'Type: regular' ||
		fail "no /sbin/sandbox-agent in rootfs.ext4"
	chroot "$dir/rootfs" /usr/bin/python3 -c 'import venv, ssl' >/dev/null 2>&1 ||
		fail "python3 in the rootfs cannot import venv and ssl"
	no_leftovers
	if command -v buildah >/dev/null; then
		[[ -z $(buildah --root /var/lib/agent-sandbox/containers/storage \
			--runroot /run/agent-sandbox/containers --storage-driver vfs containers -q 2>/dev/null) ]] ||
			fail "buildah containers left behind"
	fi
}

# sandbox_user ROOT: rootfs_sandbox_user (templates/lib/rootfs.sh) run on ROOT, output in $out.
sandbox_user() {
	# shellcheck disable=SC2016 # the script's own $1 and $2
	try bash -c 'set -euo pipefail; log_prefix=test
		source "$1/templates/lib/common.sh"; source "$1/templates/lib/rootfs.sh"
		rootfs_sandbox_user "$2"' _ "$repo" "$1"
}

# new_root: an empty rootfs in $tmp/root with the given /etc/passwd and /etc/group.
new_root() {
	rm -rf "$tmp/root"
	mkdir -p "$tmp/root/etc" "$tmp/root/workspace" "$tmp/root/bin"
	printf '%s' "$1" >"$tmp/root/etc/passwd"
	printf '%s' "$2" >"$tmp/root/etc/group"
}

test_sandbox_user_named() {
	new_root $'root:x:0:0:root:/root:/bin/sh\n' $'root:x:0:\n'
	sandbox_user "$tmp/root" || fail "rootfs_sandbox_user failed"
	grep -qx 'user:x:1000:1000:sandbox user:/home/user:/bin/sh' "$tmp/root/etc/passwd" ||
		fail "no user 1000 in /etc/passwd: $(cat "$tmp/root/etc/passwd")"
	grep -qx 'user:x:1000:' "$tmp/root/etc/group" || fail "no group 1000 in /etc/group"
	[[ -d $tmp/root/home/user && ! -L $tmp/root/home/user ]] || fail "no /home/user directory"
	[[ $(stat -c %u:%g "$tmp/root/home/user") == 1000:1000 ]] || fail "/home/user is not 1000's"
	# Again: nothing added twice.
	sandbox_user "$tmp/root" || fail "a second run failed"
	[[ $(grep -c ':1000:' "$tmp/root/etc/passwd") == 1 ]] || fail "user 1000 added twice"
	[[ $(grep -c ':1000:' "$tmp/root/etc/group") == 1 ]] || fail "group 1000 added twice"
}

test_sandbox_user_keeps_the_images_uid_1000() {
	new_root $'root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/bash\n' \
		$'root:x:0:\nnode:x:1000:\n'
	: >"$tmp/root/bin/bash"
	chmod +x "$tmp/root/bin/bash"
	sandbox_user "$tmp/root" || fail "rootfs_sandbox_user failed"
	grep -qx 'node:x:1000:1000::/home/user:/bin/bash' "$tmp/root/etc/passwd" ||
		fail "uid 1000 is not node with home /home/user: $(cat "$tmp/root/etc/passwd")"
	! grep -q '^user:' "$tmp/root/etc/passwd" "$tmp/root/etc/group" || fail "a user was added"
	grep -qx 'node:x:1000:' "$tmp/root/etc/group" || fail "group node changed"
}

test_sandbox_user_when_user_is_taken() {
	new_root $'user:x:1001:1001::/home/other:/bin/sh\n' $'user:x:1001:\n'
	: >"$tmp/root/bin/bash"
	chmod +x "$tmp/root/bin/bash"
	sandbox_user "$tmp/root" || fail "rootfs_sandbox_user failed"
	grep -qx 'sandbox:x:1000:1000:sandbox user:/home/user:/bin/bash' "$tmp/root/etc/passwd" ||
		fail "uid 1000 is not sandbox: $(cat "$tmp/root/etc/passwd")"
	grep -qx 'sandbox:x:1000:' "$tmp/root/etc/group" || fail "gid 1000 is not sandbox"
}

test_sandbox_user_home_content_moves_to_the_workspace() {
	new_root $'root:x:0:0:root:/root:/bin/sh\n' $'root:x:0:\n'
	mkdir -p "$tmp/root/home/user/app"
	echo from-image >"$tmp/root/home/user/app/main.py"
	echo kept >"$tmp/root/workspace/main.py"
	echo other >"$tmp/root/home/user/main.py"
	sandbox_user "$tmp/root" || fail "rootfs_sandbox_user failed"
	[[ $(cat "$tmp/root/workspace/app/main.py" 2>/dev/null) == from-image ]] ||
		fail "the image's /home/user/app is not in /workspace"
	[[ $(cat "$tmp/root/workspace/main.py") == kept ]] || fail "a workspace file was replaced"
	[[ -z $(ls -A "$tmp/root/home/user") ]] || fail "/home/user is not empty: a mount point"
	grep -q "moving the image's /home/user" "$out" || fail "the move is not said"
}

test_sandbox_user_without_etc() {
	rm -rf "$tmp/root"
	mkdir -p "$tmp/root/workspace"
	sandbox_user "$tmp/root" || fail "rootfs_sandbox_user failed on a root without /etc"
	grep -q '^user:x:1000:1000:' "$tmp/root/etc/passwd" || fail "no user 1000 in a new /etc/passwd"
}

test_sandbox_user_symlinked_home() {
	new_root $'root:x:0:0:root:/root:/bin/sh\n' $'root:x:0:\n'
	ln -s /etc "$tmp/root/home"
	sandbox_user "$tmp/root" || fail "rootfs_sandbox_user failed"
	[[ -d $tmp/root/home/user && ! -L $tmp/root/home ]] || fail "/home is still a link"
	[[ ! -e $tmp/root/etc/user ]] || fail "the link was followed"
}

for t in test_build_base test_base_ext4_fsck test_base_rebuild_replaces \
	test_base_up_to_date_is_reused test_one_call_takes_a_lock_once test_changed_input_rebuilds test_base_builds_offline \
	test_unknown_template test_invalid_name test_missing_agent \
	test_dockerfile_without_from test_dockerfile_unknown_instruction test_dockerfile_empty \
	test_dockerfile_missing_argument test_manifest_syntax_error test_manifest_wrong_types \
	test_manifest_not_object test_manifest_name_mismatch test_no_sources \
	test_failed_rebuild_keeps_old test_shellcheck \
	test_dockerfile_step_failure test_build_python \
	test_sandbox_user_named test_sandbox_user_keeps_the_images_uid_1000 \
	test_sandbox_user_when_user_is_taken test_sandbox_user_home_content_moves_to_the_workspace \
	test_sandbox_user_without_etc test_sandbox_user_symlinked_home; do
	run_test "$t"
done

echo "$passed passed, $failed failed"
((failed == 0))
