# Static checks of a template's Dockerfile, before any engine runs it, and
# the mapping of a failed build step back to its Dockerfile line.
# shellcheck shell=bash

DOCKERFILE_INSTRUCTIONS=" FROM RUN CMD LABEL MAINTAINER EXPOSE ENV ADD COPY ENTRYPOINT VOLUME USER WORKDIR ARG ONBUILD STOPSIGNAL HEALTHCHECK SHELL "

# Parsed instructions of the last dockerfile_check, in order.
df_lines=()    # line number where the instruction starts
df_keywords=() # upper-case keyword
df_args=()     # arguments, continuation lines joined
df_stage_start=() # index into df_* of each FROM
df_final_image=""  # image of the last stage, aliases resolved
df_uses_base=0     # 1 if some FROM may refer to $BASE_IMAGE

# Splits a Dockerfile into instructions, one per output line:
# "LINE<TAB>KEYWORD<TAB>ARGS". Honours parser directives (escape), comments,
# blank lines and line continuations the way the Dockerfile format does.
dockerfile_split() {
	awk '
	function emit(n, s,   kw, args) {
		sub(/^[ \t]+/, "", s)
		sub(/[ \t]+$/, "", s)
		if (s == "") return
		kw = s
		sub(/[ \t].*/, "", kw)
		args = substr(s, length(kw) + 1)
		sub(/^[ \t]+/, "", args)
		printf "%d\t%s\t%s\n", n, toupper(kw), args
	}
	BEGIN { esc = "\\"; directives = 1; cont = 0 }
	{
		sub(/\r$/, "")
		line = $0
		if (directives) {
			if (line ~ /^[ \t]*#[ \t]*[A-Za-z]+[ \t]*=/) {
				d = line
				sub(/^[ \t]*#[ \t]*/, "", d)
				key = tolower(d); sub(/[ \t]*=.*/, "", key)
				val = d; sub(/^[^=]*=[ \t]*/, "", val); sub(/[ \t]+$/, "", val)
				if (key == "escape") esc = val
				next
			}
			directives = 0
		}
		if (line ~ /^[ \t]*$/ || line ~ /^[ \t]*#/) next
		if (!cont) { start = NR; buf = "" }
		t = line
		sub(/[ \t]+$/, "", t)
		if (substr(t, length(t)) == esc) {
			buf = buf substr(t, 1, length(t) - 1) " "
			cont = 1
			next
		}
		buf = buf line
		cont = 0
		emit(start, buf)
	}
	END { if (cont) emit(start, buf) }
	' "$1"
}

# dockerfile_check FILE: fills df_* and fails (printing every problem found)
# on a Dockerfile that no engine would accept.
dockerfile_check() {
	local file=$1 n kw args i errors=() seen_from=0 first word image words
	local -A stage_image=()
	df_lines=() df_keywords=() df_args=() df_stage_start=()
	df_final_image="" df_uses_base=0

	[[ -f $file ]] || die "no Dockerfile at $file"
	while IFS=$'\t' read -r n kw args; do
		df_lines+=("$n")
		df_keywords+=("$kw")
		df_args+=("$args")
	done < <(dockerfile_split "$file")

	((${#df_lines[@]} > 0)) || die "$file: no instructions (a Dockerfile starts with FROM)"

	for i in "${!df_lines[@]}"; do
		n=${df_lines[i]} kw=${df_keywords[i]} args=${df_args[i]}
		if [[ $DOCKERFILE_INSTRUCTIONS != *" $kw "* ]]; then
			errors+=("line $n: unknown instruction '$kw'")
			continue
		fi
		[[ -n $args ]] || errors+=("line $n: $kw needs arguments")
		if [[ $kw == FROM ]]; then
			seen_from=1
			df_stage_start+=("$i")
			image=""
			read -ra words <<<"$args"
			for word in "${words[@]}"; do
				[[ $word == --* ]] && continue
				image=$word
				break
			done
			# FROM <image> [AS <name>]: a later stage may name an earlier one.
			first=${stage_image[$image]:-$image}
			if [[ $args =~ [[:space:]][Aa][Ss][[:space:]]+([^[:space:]]+)$ ]]; then
				stage_image[${BASH_REMATCH[1]}]=$first
			fi
			df_final_image=$first
			if [[ $first == "$BASE_IMAGE" || $first == agent-sandbox-base || $first == *'$'* ]]; then
				df_uses_base=1
			fi
		elif ((!seen_from)) && [[ $kw != ARG ]]; then
			errors+=("line $n: $kw before FROM (only ARG may come before the first FROM)")
		fi
	done
	((seen_from)) || errors+=("no FROM instruction")

	if ((${#errors[@]})); then
		for i in "${errors[@]}"; do
			printf '[%s] error: %s: %s\n' "$log_prefix" "$file" "$i" >&2
		done
		die "$file is not a valid Dockerfile"
	fi
}

# dockerfile_step_line STAGE STEP: the Dockerfile line of the STEP-th
# instruction (FROM being 1) of the STAGE-th stage, as buildah numbers them.
dockerfile_step_line() {
	local stage=$1 step=$2 start idx
	((stage >= 1 && stage <= ${#df_stage_start[@]})) || return 1
	start=${df_stage_start[stage - 1]}
	idx=$((start + step - 1))
	((idx < ${#df_lines[@]})) || return 1
	printf '%s\n' "${df_lines[idx]}"
}

# dockerfile_report_failure LOG FILE: explains a failed build from its log:
# which Dockerfile line failed and what it printed.
dockerfile_report_failure() {
	local logfile=$1 file=$2 header stage step text line="" from
	header=$(grep -nE '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+: ' "$logfile" | tail -n 1 || true)
	if [[ -n $header && $header =~ ^([0-9]+):(\[([0-9]+)/[0-9]+\] )?STEP\ ([0-9]+)/[0-9]+:\ (.*)$ ]]; then
		from=${BASH_REMATCH[1]}
		stage=${BASH_REMATCH[3]:-1}
		step=${BASH_REMATCH[4]}
		text=${BASH_REMATCH[5]}
		line=$(dockerfile_step_line "$stage" "$step" || true)
		log "error: $(basename "$file") line ${line:-?} failed: $text"
		tail -n +"$((from + 1))" "$logfile" | tail -n 60 | sed 's/^/    | /' >&2
	else
		log "error: the build failed before running a Dockerfile step:"
		tail -n 30 "$logfile" | sed 's/^/    | /' >&2
	fi
}
