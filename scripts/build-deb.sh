#!/usr/bin/env bash
# Builds the Debian packages from a clean copy of the committed tree plus the work tree's
# changes (git stash create), so that build trees and caches of the checkout stay out, and
# checks them with lintian. Usage: scripts/build-deb.sh OUT_DIR
set -euo pipefail

out=${1:?usage: build-deb.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The tracked files as they are in the work tree (uncommitted changes included).
src="$work/agent-sandbox"
mkdir "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
	xargs -0 tar --no-recursion -cf - 2>/dev/null) | tar -xf - -C "$src"

start=$(date +%s)
(cd "$src" && dpkg-buildpackage -b -us -uc -j"$(nproc)" >"$work/build.log" 2>&1) || {
	tail -n 40 "$work/build.log" >&2
	echo "build-deb: dpkg-buildpackage failed (log above)" >&2
	exit 1
}
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mv "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out"/
echo "build-deb: built in $(($(date +%s) - start)) s:"
for f in "$out"/*.deb; do
	printf '  %s %d bytes\n' "$f" "$(stat -c %s "$f")"
done

# lintian exits non-zero on errors and warnings; each override says why (debian/*.lintian-overrides).
lintian --fail-on error,warning --info "$out"/*.changes
echo "build-deb: lintian clean"
