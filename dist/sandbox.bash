# bash completion for sandbox(1), the agent-sandbox CLI.
# Commands and options come from `sandbox --help` and `sandbox COMMAND --help`, so that they
# follow the installed binary; template names from the daemon (`sandbox templates`).

_sandbox() {
	local cur prev words cword
	_init_completion || return

	local cmd i
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		--url | --api-key) ((i++)) ;;
		-*) ;;
		*)
			cmd=${words[i]}
			break
			;;
		esac
	done

	if [[ -z $cmd ]]; then
		case $prev in
		--url | --api-key) return ;;
		esac
		if [[ $cur == -* ]]; then
			mapfile -t COMPREPLY < <(compgen -W '--url --api-key --help -h --version' -- "$cur")
		else
			local cmds
			cmds=$("${words[0]}" --help 2>/dev/null | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit } on { print $1 }')
			mapfile -t COMPREPLY < <(compgen -W "$cmds" -- "$cur")
		fi
		return
	fi

	case $prev in
	--template)
		local names
		names=$(timeout 2 "${words[0]}" templates 2>/dev/null | awk '{ print $1 }')
		mapfile -t COMPREPLY < <(compgen -W "$names" -- "$cur")
		return
		;;
	--state-dir | --cwd)
		_filedir -d
		return
		;;
	-s | --signal)
		mapfile -t COMPREPLY < <(compgen -W 'TERM INT KILL HUP QUIT USR1 USR2 CONT STOP TSTP WINCH ALRM' -- "$cur")
		return
		;;
	-t)
		# --template's short form, but for `keys` (no such option there).
		if [[ $cmd != keys ]]; then
			local names
			names=$(timeout 2 "${words[0]}" templates 2>/dev/null | awk '{ print $1 }')
			mapfile -t COMPREPLY < <(compgen -W "$names" -- "$cur")
		fi
		return
		;;
	--url | --api-key | --env | -e | --timeout | --memory | --disk | --pids | --cpu-quota | \
		--idle-timeout | --scopes | --rate-limit | --expires | --quota | --tag | --replay | --bind | \
		--volume | -v | --user | -u)
		return
		;;
	esac

	case $cmd in
	templates)
		if ((cword == i + 1)) && [[ $cur != -* ]]; then
			mapfile -t COMPREPLY < <(compgen -W 'build' -- "$cur")
			return
		fi
		;;
	keys)
		if ((cword == i + 1)) && [[ $cur != -* ]]; then
			mapfile -t COMPREPLY < <(compgen -W 'create list set rotate revoke delete' -- "$cur")
			return
		fi
		;;
	cp)
		[[ $cur != -* ]] && _filedir
		;;
	esac
	if [[ $cur == -* ]]; then
		# Long options anywhere in the help; short ones where the help offers them: at the
		# start of a line, or after `[`, `(`, `|`, `,` or `:` (`[-r|--recursive]`, `-e (--env)`).
		local help opts
		help=$("${words[0]}" "$cmd" --help 2>/dev/null)
		opts=$({
			grep -oE -- '--[a-z][a-z-]*' <<<"$help"
			grep -oE -- '(^[[:space:]]*|[[(|,:][[:space:]]*)-[a-zA-Z]\b' <<<"$help" | grep -oE -- '-[a-zA-Z]$'
		} | sort -u)
		mapfile -t COMPREPLY < <(compgen -W "$opts --help -h" -- "$cur")
	fi
}
complete -F _sandbox sandbox
