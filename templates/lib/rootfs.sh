# What every template rootfs gets, whatever built it, and its ext4 image.
# shellcheck shell=bash

# in_rootfs ROOT PATH: PATH (absolute, inside the rootfs) as a host path,
# following symlinks of its directories inside ROOT only, so that an
# absolute link in the image can never lead outside it.
in_rootfs() {
	local root=$1 path=$2 cur="" part target hops=0
	local -a todo more
	IFS=/ read -ra todo <<<"${path#/}"
	while ((${#todo[@]})); do
		part=${todo[0]}
		todo=("${todo[@]:1}")
		case $part in
		'' | .) continue ;;
		..)
			cur=${cur%/*}
			continue
			;;
		esac
		if [[ -L $root$cur/$part ]]; then
			((++hops <= 40)) || die "too many symlinks resolving $path in $root"
			target=$(readlink "$root$cur/$part")
			[[ $target == /* ]] && cur=""
			IFS=/ read -ra more <<<"${target#/}"
			todo=("${more[@]}" "${todo[@]}")
		else
			cur=$cur/$part
		fi
	done
	printf '%s%s\n' "$root" "$cur"
}

# rootfs_finalize ROOT AGENT ENV_JSON
# Installs the agent as /sbin/sandbox-agent, creates the mount points the
# agent and the drivers expect (/workspace kept if the image filled it,
# /tmp /proc /sys /dev /run emptied) and records the image's environment
# (ENV_JSON: array of "KEY=value") in /etc/sandbox/env, one per line, and makes
# /etc/resolv.conf a regular file.
rootfs_finalize() {
	local root=$1 agent=$2 env_json=${3:-[]} dir sbin
	chmod 0755 "$root"
	sbin=$(in_rootfs "$root" /sbin)
	mkdir -p "$sbin"
	install -m 0755 "$agent" "$sbin/sandbox-agent"

	for dir in tmp proc sys dev run; do
		if [[ -L $root/$dir || ( -e $root/$dir && ! -d $root/$dir ) ]]; then
			rm -f "$root/$dir"
		fi
		if [[ -d $root/$dir ]]; then
			find "$root/$dir" -mindepth 1 -delete
		else
			mkdir "$root/$dir"
		fi
	done
	chmod 1777 "$root/tmp"
	chmod 0555 "$root/proc" "$root/sys"
	chmod 0755 "$root/dev" "$root/run"
	[[ -d $root/workspace && ! -L $root/workspace ]] || {
		rm -f "$root/workspace"
		mkdir -m 0755 "$root/workspace"
	}

	rootfs_sandbox_user "$root"

	mkdir -p "$(in_rootfs "$root" /etc)/sandbox"
	jq -r '.[]' <<<"$env_json" >"$(in_rootfs "$root" /etc)/sandbox/env"

	# The sandbox's resolver is bind-mounted here (the jail) or written by the agent (VMs):
	# a regular file must be there to mount on, whatever the image had.
	local resolv
	resolv="$(in_rootfs "$root" /etc)/resolv.conf"
	if [[ -L $resolv || ! -f $resolv ]]; then
		rm -f "$resolv"
		: >"$resolv"
	fi
}

# rootfs_sandbox_user ROOT: the user commands run as (uid and gid 1000) gets a
# name and a home in /etc/passwd and /etc/group: `user`, home /home/user, the
# login shell bash when the image has it. An image that has a uid 1000 already
# (the node images' `node`) keeps its name, with its home made /home/user; a gid
# 1000 keeps its name too. When the name `user` is another id's, ours is
# `sandbox`. /home/user is where the sandbox mounts its workspace again: what
# the image put there moves into /workspace (the same directory inside).
rootfs_sandbox_user() {
	local root=$1 etc passwd group shell=/bin/sh name=user home
	etc=$(in_rootfs "$root" /etc)
	passwd=$etc/passwd
	group=$etc/group
	[[ -L $passwd || -L $group ]] && die "the image's /etc/passwd or /etc/group is a symlink"
	mkdir -p "$etc"
	touch "$passwd" "$group"
	[[ -x $(in_rootfs "$root" /bin/bash) ]] && shell=/bin/bash
	if awk -F: '$3 == "1000" { found = 1 } END { exit !found }' "$passwd"; then
		awk -F: -v OFS=: '$3 == "1000" && !done { $6 = "/home/user"; done = 1 } { print }' \
			"$passwd" >"$passwd.new"
		cat "$passwd.new" >"$passwd"
		rm -f "$passwd.new"
	else
		awk -F: '$1 == "user" { found = 1 } END { exit !found }' "$passwd" && name=sandbox
		printf '%s:x:1000:1000:sandbox user:/home/user:%s\n' "$name" "$shell" >>"$passwd"
	fi
	if ! awk -F: '$3 == "1000" { found = 1 } END { exit !found }' "$group"; then
		name=user
		awk -F: '$1 == "user" { found = 1 } END { exit !found }' "$group" && name=sandbox
		printf '%s:x:1000:\n' "$name" >>"$group"
	fi

	# The mount point is a plain directory of the root: a link in the way goes.
	home=$root/home
	if [[ -L $home || ( -e $home && ! -d $home ) ]]; then
		rm -f "$home"
	fi
	mkdir -p "$home"
	if [[ -L $home/user || ( -e $home/user && ! -d $home/user ) ]]; then
		rm -f "$home/user"
	fi
	mkdir -p "$home/user"
	# The image's files there are the workspace's: one directory inside the sandbox.
	if [[ -n $(ls -A "$home/user") ]]; then
		log "moving the image's /home/user into /workspace (the same directory in a sandbox)"
		cp -a --no-clobber "$home/user/." "$root/workspace/"
		find "$home/user" -mindepth 1 -delete
	fi
	chown 1000:1000 "$home/user" "$root/workspace"
	chmod 0755 "$home/user"
}

# rootfs_make_ext4 ROOT IMAGE HEADROOM_MIB: an ext4 image of ROOT's content
# (mkfs.ext4 -d, no mounting), sized to the content plus HEADROOM_MIB of
# free space. The image file is sparse: unused space costs no disk.
rootfs_make_ext4() {
	local root=$1 image=$2 headroom=$3 used_kib files inodes size_mib
	used_kib=$(du -sk --one-file-system "$root" | cut -f1)
	files=$(find "$root" -xdev | wc -l)
	# Room for the files there are, plus one inode per 16 KiB of headroom.
	inodes=$((files + files / 4 + headroom * 64 + 256))
	# Content rounded up by 10 % for ext4 metadata, inode tables (256 B each),
	# then the headroom.
	size_mib=$(((used_kib * 11 / 10 + inodes / 4) / 1024 + headroom + 8))
	for _ in 1 2 3; do
		rm -f "$image"
		truncate -s "${size_mib}M" "$image"
		# No journal: every session writes to its own throwaway copy.
		if mkfs.ext4 -q -F -L rootfs -b 4096 -m 0 -N "$inodes" -O ^has_journal \
			-E root_owner=0:0 -d "$root" "$image" >"$image.log" 2>&1; then
			rm -f "$image.log"
			return 0
		fi
		# Too small after all (unusual files, many hard links): grow and retry.
		size_mib=$((size_mib * 3 / 2))
	done
	sed 's/^/    | /' "$image.log" >&2
	rm -f "$image.log"
	die "mkfs.ext4 could not build $image"
}
