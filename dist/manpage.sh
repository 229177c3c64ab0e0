#!/usr/bin/env bash
# Writes a manual page from a binary's own --help and --version (help2man), so that the page
# and the help text cannot drift. For `sandbox`, every subcommand's --help is added as a
# COMMANDS section. Usage: manpage.sh BINARY SECTION 'one-line description' OUTPUT
set -euo pipefail

bin=$1 section=$2 description=$3 out=$4
include=$(mktemp)
trap 'rm -f "$include"' EXIT

# The subcommands of a CLI: the lines of its usage between "commands:" and the next blank.
commands=$("$bin" --help | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit } on { print $1 }')
if [[ -n $commands ]]; then
	{
		echo '[COMMANDS]'
		for c in $commands; do
			echo ".SS $(basename "$bin") $c"
			echo '.nf'
			# Backslashes and leading dots or quotes are roff syntax: escape them.
			"$bin" "$c" --help | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
			echo '.fi'
		done
	} >"$include"
fi
args=(--no-info --no-discard-stderr --section="$section" --name="$description" --output="$out")
[[ -s $include ]] && args+=(--include="$include")
help2man "${args[@]}" "$bin"
# (help2man dates the page from SOURCE_DATE_EPOCH when it is set: reproducible builds.)
