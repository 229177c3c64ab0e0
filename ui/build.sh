#!/usr/bin/env bash
# Builds the dashboard into OUT_DIR: the npm packages of ui/ (npm ci from the committed
# lockfile, only when node_modules is older than it), a type check (tsc), and the bundle
# (esbuild): index.html, app.js, app.css. Run by the Meson build (ui/meson.build).
# Usage: ui/build.sh OUT_DIR
set -euo pipefail

out=${1:?usage: ui/build.sh OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$here/node_modules/.installed

command -v node >/dev/null || {
	echo "ui: node is not installed (nodejs is in scripts/debian-packages.txt)" >&2
	exit 1
}
# Two build trees may build at once: one installs, the other waits for it.
exec 9>"$here/.npm-lock"
flock 9
if [[ ! -f $stamp || $here/package-lock.json -nt $stamp || $here/package.json -nt $stamp ]]; then
	echo "ui: npm ci in ${here}" >&2
	(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
	touch "$stamp"
fi
flock -u 9
(cd "$here" && node_modules/.bin/tsc --noEmit -p .)
node "$here/build.mjs" "$out"
