#!/usr/bin/env bash
# Writes a manual page from a binary's own --help and --version (help2man), so that the page
# and the help text cannot drift. For `sandbox`, the SYNOPSIS is every subcommand's usage
# lines, and every subcommand's --help is added as a COMMANDS section. With DOCUMENTs (for
# `sandboxd`), the ENVIRONMENT section gives every setting its default and its meaning from
# those documents' tables (manpage_env.py).
# Usage: manpage.sh BINARY SECTION 'one-line description' OUTPUT [DOCUMENT...]
set -euo pipefail

bin=$1 section=$2 description=$3 out=$4
shift 4
include=$(mktemp)
trap 'rm -f "$include"' EXIT
name=$(basename "$bin")

# Backslashes and leading dots or quotes are roff syntax: escape them.
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

# The subcommands of a CLI: the lines of its usage between "commands:" and the next blank.
commands=$("$bin" --help | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit } on { print $1 }')
if [[ -n $commands ]]; then
	{
		# Each subcommand's usage lines (its first line and the `       NAME CMD ...` lines
		# under it), without the explanations some of them carry after a wide gap.
		echo '[SYNOPSIS]'
		echo '.nf'
		echo "$name COMMAND [OPTION]... [ARGUMENT]..." | roff
		for c in $commands; do
			"$bin" "$c" --help | awk -v name="$name" '
				NR == 1 && sub(/^usage: /, "") { print; next }
				NR > 1 && $1 == name { sub(/^ +/, ""); print; next }
				{ exit }' | sed -e 's/   .*//' | roff
		done
		echo '.fi'
		echo '[COMMANDS]'
		for c in $commands; do
			echo ".SS $name $c"
			echo '.nf'
			"$bin" "$c" --help | roff
			echo '.fi'
		done
	} >"$include"
fi
if (($# > 0)); then
	python3 "$(dirname "${BASH_SOURCE[0]}")/manpage_env.py" "$bin" "$@" >>"$include"
fi
args=(--no-info --no-discard-stderr --section="$section" --name="$description" --output="$out")
[[ -s $include ]] && args+=(--include="$include")
help2man "${args[@]}" "$bin"
# (help2man dates the page from SOURCE_DATE_EPOCH when it is set: reproducible builds.)
