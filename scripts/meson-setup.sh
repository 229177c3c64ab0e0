#!/usr/bin/env bash
# Configures a Meson build directory, or leaves it alone when it is already configured with
# the same options and compiler (ninja regenerates it by itself when a meson.build changes).
#
# Usage: [CC=clang] scripts/meson-setup.sh DIR [meson options...]
set -euo pipefail

dir=${1:?usage: meson-setup.sh DIR [options...]}
shift
cd "$(dirname "${BASH_SOURCE[0]}")/.."

want="CC=${CC:-} $*"
stamp="$dir/.setup-options"
have=$(cat "$stamp" 2>/dev/null || true)

if [[ -f $dir/build.ninja && $want == "$have" ]]; then
	exit 0
fi
if [[ -f $dir/meson-private/coredata.dat ]]; then
	# The compiler is fixed when a directory is first set up: a new one needs a fresh start.
	if [[ ${have%% *} == "${want%% *}" ]]; then
		meson setup --reconfigure "$dir" "$@"
	else
		meson setup --wipe "$dir" "$@"
	fi
else
	meson setup "$dir" "$@"
fi
printf '%s' "$want" >"$stamp"
