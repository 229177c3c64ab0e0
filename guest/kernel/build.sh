#!/usr/bin/env bash
# Builds the guest kernel (an uncompressed ELF vmlinux) for the VM drivers.
#
# Source: Debian's linux-source-6.1 package (/usr/src/linux-source-6.1.tar.xz).
# Config: `make allnoconfig` plus guest/kernel/microvm.config, merged with the
# kernel's own scripts/kconfig/merge_config.sh.
#
# The result is cached outside the checkout, keyed by the fragment and the
# source package version:
#   ${KERNEL_CACHE_DIR:-/var/cache/agent-sandbox/kernel}/<sha256>/vmlinux
# and installed (copied only when it differs) to
#   ${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}/vmlinux
#
# Progress goes to stderr; the installed path is printed on stdout.
# Running it again with nothing changed does nothing but print that path.
#
# Environment:
#   FIRECRACKER_ARTIFACTS_DIR  where to install vmlinux
#   KERNEL_CACHE_DIR           cache root (default /var/cache/agent-sandbox/kernel)
#   KERNEL_SOURCE_PACKAGE      Debian package holding the source (linux-source-6.1)
#   KERNEL_BUILD_JOBS          parallel jobs (default: number of CPUs)
#   KERNEL_NO_INSTALL=1        build/cache only, do not touch the artifacts dir
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fragment="$here/microvm.config"
package=${KERNEL_SOURCE_PACKAGE:-linux-source-6.1}
tarball="/usr/src/$package.tar.xz"
cache_root=${KERNEL_CACHE_DIR:-/var/cache/agent-sandbox/kernel}
artifacts=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
jobs=${KERNEL_BUILD_JOBS:-$(nproc)}

log() { printf 'kernel: %s\n' "$*" >&2; }
die() {
	printf 'kernel: error: %s\n' "$*" >&2
	exit 1
}

[[ -r $fragment ]] || die "config fragment $fragment not found"
version=$(dpkg-query -W -f='${Version}' "$package" 2>/dev/null) ||
	die "package $package is not installed (apt-get install $package)"
[[ -r $tarball ]] || die "$tarball not found (is $package installed?)"

# The key covers everything that decides the output: the fragment and the
# exact source version.
key=$({
	cat "$fragment"
	printf '%s %s\n' "$package" "$version"
} | sha256sum | cut -d' ' -f1)
cache_dir="$cache_root/$key"
cached="$cache_dir/vmlinux"

mkdir -p "$cache_root"
# One build at a time per cache; a second caller waits and then finds the
# result cached.
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting"
	flock 9
fi

# Checks that every value the fragment asks for made it into .config.
# Kconfig silently drops values whose dependencies are unmet.
check_config() {
	local config=$1 line sym missing=0
	while IFS= read -r line; do
		case $line in
		CONFIG_*=*)
			grep -qxF -- "$line" "$config" || {
				log "fragment asks for '$line'; .config has '$(grep -E "^(# )?${line%%=*}[= ]" "$config" || echo unset)'"
				missing=1
			}
			;;
		"# CONFIG_"*" is not set")
			sym=${line#\# }
			sym=${sym%% *}
			if grep -q "^$sym=" "$config"; then
				log "fragment disables $sym but .config enables it"
				missing=1
			fi
			;;
		esac
	done <"$fragment"
	return "$missing"
}

build() {
	local tmp src start
	tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
	# shellcheck disable=SC2064 # expand $tmp now: it is local
	trap "rm -rf '$tmp'" EXIT
	start=$(date +%s)

	log "extracting $tarball ($package $version)"
	tar -xJf "$tarball" -C "$tmp"
	src="$tmp/$package"
	[[ -d $src ]] || die "$tarball did not contain $package/"

	log "configuring: allnoconfig + $(basename "$fragment")"
	(cd "$src" && scripts/kconfig/merge_config.sh -n "$fragment") >"$tmp/config.log" 2>&1 || {
		tail -n 40 "$tmp/config.log" >&2
		die "configuration failed"
	}
	check_config "$src/.config" || die "the fragment asks for options this kernel cannot provide (see above)"

	log "compiling vmlinux with $jobs jobs (about 10 minutes on 2 cores)"
	# Fixed build metadata keeps the output independent of who built it when.
	if ! make -C "$src" -j"$jobs" \
		KBUILD_BUILD_USER=agent-sandbox KBUILD_BUILD_HOST=agent-sandbox \
		KBUILD_BUILD_TIMESTAMP="$package $version" \
		vmlinux >"$tmp/build.log" 2>&1; then
		tail -n 40 "$tmp/build.log" >&2
		die "kernel compilation failed"
	fi

	mkdir -p "$cache_dir"
	cp "$src/.config" "$cache_dir/config"
	printf '%s %s\n' "$package" "$version" >"$cache_dir/source"
	cp "$src/vmlinux" "$cache_dir/.vmlinux.tmp"
	mv -f "$cache_dir/.vmlinux.tmp" "$cached"
	log "built in $(($(date +%s) - start)) s: $cached"

	rm -rf "$tmp"
	trap - EXIT
}

if [[ -s $cached ]]; then
	log "cached: $cached"
else
	build
fi

if [[ ${KERNEL_NO_INSTALL:-0} == 1 ]]; then
	printf '%s\n' "$cached"
	exit 0
fi

dest="$artifacts/vmlinux"
mkdir -p "$artifacts"
if cmp -s "$cached" "$dest"; then
	log "up to date: $dest"
else
	cp "$cached" "$artifacts/.vmlinux.$$"
	mv -f "$artifacts/.vmlinux.$$" "$dest"
	log "installed: $dest"
fi
printf '%s\n' "$dest"
