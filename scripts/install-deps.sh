#!/usr/bin/env bash
# Installs what building and testing need on Debian 12, and only what is missing:
#   --debian  the packages in scripts/debian-packages.txt (`apt-get update` only when one is
#             missing; needs root then)
#   --npm     the npm packages of the JavaScript tests and SDK (`npm ci` when a lockfile is
#             committed, else `npm install`), skipped while node_modules is up to date
# With no option, both.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list="$root/scripts/debian-packages.txt"

# Directories with a package.json whose packages the tests need.
npm_dirs=(tests/mcp sdk/typescript)

log() { printf 'deps: %s\n' "$*" >&2; }
die() {
	printf 'deps: error: %s\n' "$*" >&2
	exit 1
}

debian_wanted() {
	local p
	while read -r p; do
		case $p in
		nodejs | npm)
			# A newer Node.js installed another way must not be replaced.
			if command -v node >/dev/null && command -v npm >/dev/null; then
				continue
			fi
			;;
		esac
		printf '%s\n' "$p"
	done < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list" | grep -v '^$')
}

install_debian() {
	local wanted missing status p
	mapfile -t wanted < <(debian_wanted)
	# One dpkg-query for all; a package dpkg never heard of prints nothing.
	status=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${wanted[@]}" 2>/dev/null || true)
	missing=()
	for p in "${wanted[@]}"; do
		grep -qx "$p installed" <<<"$status" || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	if (($(id -u) != 0)); then
		die "missing Debian packages (run as root to install them): ${missing[*]}"
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# True when node_modules was installed after the last change to package.json and the lockfile.
npm_up_to_date() {
	local dir=$1 stamp=$1/node_modules/.installed
	[[ -f $stamp && $stamp -nt $dir/package.json ]] || return 1
	[[ ! -f $dir/package-lock.json || $stamp -nt $dir/package-lock.json ]]
}

install_npm() {
	local dir
	for dir in "${npm_dirs[@]}"; do
		dir="$root/$dir"
		[[ -f $dir/package.json ]] || continue
		npm_up_to_date "$dir" && continue
		command -v npm >/dev/null || die "npm is not installed (needed for $dir)"
		log "npm packages in ${dir#"$root"/}"
		if [[ -f $dir/package-lock.json ]]; then
			(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
		else
			(cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
		fi
		touch "$dir/node_modules/.installed"
	done
}

debian=0 npm=0
for arg in "$@"; do
	case $arg in
	--debian) debian=1 ;;
	--npm) npm=1 ;;
	*) die "unknown option $arg" ;;
	esac
done
if ((debian == 0 && npm == 0)); then
	debian=1 npm=1
fi
if ((debian)); then
	install_debian
fi
if ((npm)); then
	install_npm
fi
