#!/usr/bin/env bash
# Recipe of the `base` template: busybox (from Debian's busybox-static) with
# its applet links, and the few files a shell expects. No container engine,
# no network. Usage: build-rootfs.sh ROOTFS_DIR
# templates/build.sh adds the agent and the mount points afterwards.
set -euo pipefail

root=${1:?usage: build-rootfs.sh ROOTFS_DIR}
busybox=${BUSYBOX:-/bin/busybox}

[[ -x $busybox ]] || {
	echo "$busybox not found (apt-get install busybox-static)" >&2
	exit 1
}
if ldd "$busybox" >/dev/null 2>&1; then
	echo "$busybox is dynamically linked; the static one is in busybox-static" >&2
	exit 1
fi

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,root}
install -m 0755 "$busybox" "$root/bin/busybox"
# One symlink per applet, where busybox itself would install it.
"$busybox" --list-full | while IFS= read -r applet; do
	[[ -z $applet || $applet == bin/busybox ]] && continue
	mkdir -p "$root/$(dirname "$applet")"
	ln -sf /bin/busybox "$root/$applet"
done

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
cat >"$root/etc/hosts" <<'HOSTS'
127.0.0.1	localhost
::1	localhost
HOSTS
echo sandbox >"$root/etc/hostname"
chmod 0700 "$root/root"
