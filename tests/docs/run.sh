#!/usr/bin/env bash
# Checks that every fenced code block of the documentation is tagged `run` or `no-run: why`,
# and runs every `run` block against a real sandboxd (tests/docs/snippets.py says how).
# Prints a line per block, `N run, M no-run`, and last `N passed, N failed`; exits non-zero
# when anything failed.
#
# Usage: tests/docs/run.sh [DOCUMENT...]   (default: every tracked *.md; needs root)
# Environment: SANDBOXD (default build/src/sandboxd), FIRECRACKER_ARTIFACTS_DIR,
# SNIPPET_TIMEOUT (seconds a block may run, default 90), SNIPPET_OUTPUT=1 (print every
# block's output, not only a failed one's).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
exec python3 -u tests/docs/snippets.py "$@"
