# shardkit.bash - bash completion for shardtool, shardload, shardtrain and
# shardfs. The words come from the tool itself (TOOL --completion-words,
# TOOL COMMAND --completion-words), from the option tables its parser
# uses, so they are never out of date. Installed by make install for each
# tool's name under bash-completion's completions folder.

_shardkit()
{
	local cur=${COMP_WORDS[COMP_CWORD]} tool=${COMP_WORDS[0]} words cmd

	COMPREPLY=()
	# A command name: the first word after the tool that is not an option.
	if [[ $COMP_CWORD -eq 1 && $cur != -* ]]; then
		words=$("$tool" --completion-words 2>/dev/null | grep -v '^-')
		if [[ -n $words ]]; then
			mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
			return 0
		fi
	fi
	if [[ $cur == -* ]]; then
		cmd=${COMP_WORDS[1]}
		words=
		if [[ $COMP_CWORD -gt 1 && $cmd != -* ]]; then
			words=$("$tool" "$cmd" --completion-words 2>/dev/null)
		fi
		[[ -n $words ]] ||
			words=$("$tool" --completion-words 2>/dev/null |
			    grep '^-')
		mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
		return 0
	fi
	# Anything else is a path, URL or value: the shell's own completion.
	return 1
}

complete -o bashdefault -o default -F _shardkit shardtool shardload \
    shardtrain shardfs
