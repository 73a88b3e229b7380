#!/usr/bin/env bash
# help-man.sh - the tools speak one command-line language (shardkit-cli(7))
# and their pages say what their --help says: for shardtool, shardload,
# shardtrain and shardfs, every command's --help exits 0 and every long
# option it prints appears in the tool's man page (curl's test1139); -V,
# --version, "help COMMAND", an unknown option, a missing value, a bad
# size and an unknown command read the same in every tool; the pages say
# what is built: every URL scheme lib/url.c takes, the remote option group
# as --help names it, every environment variable the library and the
# bucket tools read (found in their sources), and no "not built into" or
# "this version does not read"; and mandoc -Tlint finds nothing above
# STYLE in any page.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
: "${SHARDTRAIN:?SHARDTRAIN is not set; run the test through make check}"
need_cmd mandoc

man="$top_srcdir/man"

# render PAGE: the page as text, overstrike removed, for searching.
render() {
	mandoc -Tascii -O width=200 "$man/$1" | sed 's/.\x08//g' >"$T/$1.txt" ||
	    fail "mandoc cannot render $man/$1"
}

# in_page PAGE WORD...: each WORD appears whole in the rendered PAGE.
in_page() {
	local page=$1 w missing=
	shift
	for w in "$@"; do
		# A whole word or option: not followed by a letter, digit or dash.
		grep -q -- "$w\([^a-zA-Z0-9_-]\|$\)" "$T/$page.txt" ||
		    missing="$missing $w"
	done
	[ -z "$missing" ] || fail "not in $page:$missing"
}

# check_cmd TOOL PAGE CMD...: each "TOOL CMD --help" exits 0 and its long
# options are in PAGE; CMD "-" is the tool's default command.
check_cmd() {
	local bin=$1 page=$2 c tag args
	shift 2
	for c in "$@"; do
		tag=help-$(basename "$bin")-${c#-}
		args=("$c" --help)
		[ "$c" = - ] && args=(--help)
		say "$(basename "$bin") ${args[*]}: exit 0, and its options are in $page"
		run_rc 0 "$tag" "$bin" "${args[@]}"
		no_sanitizer_report "$tag"
		[ -s "$T/$tag.out" ] || fail "$bin ${args[*]} prints nothing"
		has "$tag.out" "usage: $(basename "$bin")"
		for o in --quiet --verbose --help --version; do
			has "$tag.out" "$o"
		done
		[ "$c" = - ] || in_page "$page" "$c"
		# shellcheck disable=SC2046
		in_page "$page" $(grep -o -- '--[a-z][a-z0-9-]*' "$T/$tag.out" | sort -u)
		if [ "$c" != - ]; then
			run_rc 0 "$tag.h" "$bin" help "$c"
			cmp -s "$T/$tag.out" "$T/$tag.h.out" ||
			    fail "$bin help $c differs from $bin $c --help"
		fi
	done
}

# same_language TOOL CMD SOURCE: the errors every tool words the same way.
same_language() {
	local bin=$1 c=$2 name tag
	shift 2
	name=$(basename "$bin")
	say "$name: -V, --version, and usage errors worded as shardkit-cli(7) says"
	for v in -V --version; do
		run_rc 0 "ver$v" "$bin" "$v"
		grep -qE "^$name \(shardkit\) [0-9]+\.[0-9]+" "$T/ver$v.out" ||
		    fail "$name $v printed: $(cat "$T/ver$v.out")"
	done
	# shellcheck disable=SC2206
	local cmd=($c)
	[ "$c" = - ] && cmd=()
	local prog="$name${cmd[*]:+ ${cmd[*]}}"
	tag=bogus.$name
	run_rc 2 "$tag" "$bin" "${cmd[@]}" "$@" --bogus
	has "$tag.err" "$prog: --bogus: unknown option"
	has "$tag.err" "usage: $name"
	has "$tag.err" "Try '$prog --help'"
	[ ! -s "$T/$tag.out" ] || fail "$name: a usage error wrote to stdout"
	tag=noval.$name
	run_rc 2 "$tag" "$bin" "${cmd[@]}" "$@" --workers
	has "$tag.err" "$prog: --workers needs a value"
	has "$tag.err" "usage: $name"
	tag=badnum.$name
	run_rc 2 "$tag" "$bin" "${cmd[@]}" "$@" --workers 0
	has "$tag.err" "$prog: --workers 0: not a whole number from 1 to"
	for tag in "ver-V" "ver--version" "bogus.$name" "noval.$name" \
	    "badnum.$name"; do
		no_sanitizer_report "$tag"
	done
}

# --------------------------------------------------------------------------
render shardtool.1
say "shardtool: the command list, then each command"
st sthelp --help
has sthelp.out "usage: shardtool"
cmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p' "$T/sthelp.out")
[ "$(echo "$cmds" | wc -w)" -ge 7 ] || fail "shardtool --help lists only: $cmds"
# shellcheck disable=SC2086
check_cmd "$SHARDTOOL" shardtool.1 $cmds
same_language "$SHARDTOOL" pack cifar10 "$T/none" -o "$T/x-%06d.tar"
st_rc 2 stnocmd
has stnocmd.err "usage: shardtool"
st_rc 2 stunk frobnicate
has stunk.err "shardtool: frobnicate: not a command"
run_rc 2 stsize "$SHARDTOOL" pack cifar10 "$T/none" -o "$T/x-%06d.tar" \
    --max-size 12X
has stsize.err "--max-size 12X: not a size such as 64M"

render shardload.1
say "shardload: the command list, then each command"
sl slhelp --help
slcmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p' "$T/slhelp.out")
[ "$(echo "$slcmds" | wc -w)" -eq 3 ] ||
    fail "shardload --help lists the commands: $slcmds (want bench dump keys)"
# shellcheck disable=SC2086
check_cmd "$SHARDLOAD" shardload.1 $slcmds
same_language "$SHARDLOAD" bench "$T/none.json"
sl_rc 2 slnocmd
is_sl_usage_error slnocmd
sl_rc 2 slsize bench "$T/none.json" --prefetch 12X
has slsize.err "--prefetch 12X: not a size such as 64M"
# The environment variables shardload reads.
in_page shardload.1 OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK \
    PMI_SIZE PMIX_RANK PMIX_SIZE SLURM_PROCID SLURM_NTASKS \
    OMPI_COMM_WORLD_LOCAL_SIZE SLURM_NTASKS_PER_NODE SHARDKIT_LOG

render shardtrain.1
say "shardtrain: training is the default command; info and report"
check_cmd "$SHARDTRAIN" shardtrain.1 - info report study
same_language "$SHARDTRAIN" -
in_page shardtrain.1 mpirun OMP_NUM_THREADS OMPI_COMM_WORLD_SIZE PMI_SIZE \
    SLURM_NTASKS STRATEGIES CHECKPOINTS --global-batch
run_rc 2 stnsize "$SHARDTRAIN" --prefetch 12X
has stnsize.err "--prefetch 12X: not a size such as 64M"

# shardfs is built where configure found libfuse3.
if [ -n "${SHARDFS:-}" ] && [ -x "$SHARDFS" ]; then
	render shardfs.1
	say "shardfs: its options are in shardfs.1; -V and usage errors as the others"
	check_cmd "$SHARDFS" shardfs.1 -
	for v in -V --version; do
		run_rc 0 "fsver$v" "$SHARDFS" "$v"
		grep -qE "^shardfs \(shardkit\) [0-9]+\.[0-9]+" "$T/fsver$v.out" ||
		    fail "shardfs $v printed: $(cat "$T/fsver$v.out")"
	done
	run_rc 2 fsbogus "$SHARDFS" --bogus
	has fsbogus.err "shardfs: --bogus: unknown option"
	has fsbogus.err "usage: shardfs"
	has fsbogus.err "Try 'shardfs --help'"
	[ ! -s "$T/fsbogus.out" ] || fail "shardfs: a usage error wrote to stdout"
	run_rc 2 fsnoval "$SHARDFS" src mnt --cache-mb
	has fsnoval.err "shardfs: --cache-mb needs a value"
	# The mount options and the environment it reads.
	in_page shardfs.1 metadata_ttl negative_ttl cache_mb readahead cache_dir \
	    cache_max_mb io_timeout threads allow_other STORAGE_EMULATOR_HOST \
	    AWS_ENDPOINT_URL_S3 .shardfs/stats ESTALE EROFS EIO
	for tag in fsver-V fsver--version fsbogus fsnoval; do
		no_sanitizer_report "$tag"
	done
fi

say "shardkit.5 documents the shard and manifest formats"
render shardkit.5
in_page shardkit.5 wids-shard-index-v1 nsamples filesize md5sum ustar

say "shardkit-cli.7 documents the conventions"
render shardkit-cli.7
in_page shardkit-cli.7 schema --batch --global-batch --workers --quiet \
    --verbose --version _bytes _seconds _per_second

# --------------------------------------------------------------------------
# The pages say what is built (issue 27: they said gs:// and s3:// did not
# exist long after they did). What the code accepts is read from the code
# here, so a page cannot fall behind it unseen. Every finding goes into
# $T/untrue and the test fails once, listing them all.
pages="shardtool.1 shardload.1 shardtrain.1 shardfs.1 shardkit.3 shardkit.5
    shardkit-cli.7"
: >"$T/untrue"
untrue() { echo "  $*" >>"$T/untrue"; }
for p in $pages; do
	render "$p"
	# One line, spaces squeezed, as a phrase may break across lines; and
	# "http(s)://" or "http[s]://" names both schemes.
	tr -s ' \n' '  ' <"$T/$p.txt" |
	    sed 's#http[[(]s[])]://#http:// https://#g' >"$T/$p.flat"
done

say "every URL scheme sk_url_parse takes is in the pages of what takes URLs"
# The names sk_scheme_name gives, in lib/url.c: file, http, https, gs, s3.
schemes=$(grep 'names\[\] = {' "$top_srcdir/lib/url.c" | head -1 |
    grep -o '"[a-z0-9]*"' | tr -d '"')
[ "$(echo "$schemes" | wc -w)" -ge 5 ] ||
    fail "cannot read the URL schemes from lib/url.c: $schemes"
netschemes=$(echo "$schemes" | grep -vx file)
for p in shardtool.1 shardload.1 shardtrain.1 shardkit.3 shardkit.5 \
    shardkit-cli.7 shardfs.1; do
	# shardfs mounts the network only: no file://.
	want=$schemes
	[ "$p" = shardfs.1 ] && want=$netschemes
	for s in $want; do
		grep -qF -- "$s://" "$T/$p.flat" ||
		    untrue "$p: never names $s://, which the tool takes"
	done
done

say "each tool's remote option group is named in its page as --help names it"
# The group lists every scheme but file; the page and shardkit-cli(7) name
# it the same way, so neither can say the group is http(s) only.
group_in_page() {
	local tag=$1 page=$2 group s
	no_sanitizer_report "$tag"
	group=$(sed -n 's/^\(remote ([^)]*)\):$/\1/p' "$T/$tag.out")
	[ -n "$group" ] || fail "$tag: --help prints no 'remote (...):' group"
	for s in $netschemes; do
		echo "$group" | grep -qw -- "$s" ||
		    untrue "$tag: --help's group '$group' does not name $s"
	done
	grep -qiF -- "$group" "$T/$page.flat" ||
	    untrue "$page: does not name the option group '$group'"
	grep -qiF -- "$group" "$T/shardkit-cli.7.flat" ||
	    untrue "shardkit-cli.7: does not name the option group '$group'"
}
run_rc 0 grp-st "$SHARDTOOL" ls --help
group_in_page grp-st shardtool.1
run_rc 0 grp-stp "$SHARDTOOL" pack --help
group_in_page grp-stp shardtool.1
run_rc 0 grp-sl "$SHARDLOAD" bench --help
group_in_page grp-sl shardload.1
run_rc 0 grp-tr "$SHARDTRAIN" --help
group_in_page grp-tr shardtrain.1
if [ -n "${SHARDFS:-}" ] && [ -x "$SHARDFS" ]; then
	run_rc 0 grp-fs "$SHARDFS" --help
	group_in_page grp-fs shardfs.1
fi

say "every environment variable the library and the tools read is in a page"
# From the sources of the library (lib/, loader/) and of the tools that
# read buckets (shardtool/, fuse/): each getenv("NAME"); and where a file
# calls getenv() with anything but a literal, the name comes from
# elsewhere in it (aws.c's env("HOME") and aws_file("AWS_CONFIG_FILE", ..),
# cli.c's table of launcher variables, shardfs.c's list of paths made
# absolute), so every literal there spelled like a variable counts: one
# with an underscore, or a capitalised first argument of a call. A literal
# that is no variable would need a line here saying why it is left out;
# there is none.
env_names() {
	local f
	for f in "$top_srcdir"/lib/*.c "$top_srcdir"/loader/*.c \
	    "$top_srcdir"/shardtool/*.c "$top_srcdir"/fuse/*.c; do
		grep -q 'getenv(' "$f" || continue
		grep -o 'getenv("[A-Za-z_][A-Za-z0-9_]*")' "$f" |
		    sed 's/getenv("\(.*\)")/\1/'
		if grep -q 'getenv([^"]' "$f"; then
			grep -o '"[A-Z][A-Z0-9]*_[A-Z0-9_]*"' "$f" | tr -d '"'
			grep -o '[a-z_](\s*"[A-Z][A-Z0-9_]*"' "$f" |
			    sed 's/.*"\(.*\)"/\1/'
		fi
	done | sort -u
}
envs=$(env_names)
for v in AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE HOME SHARDKIT_LOG \
    STORAGE_EMULATOR_HOST SLURM_NTASKS TMPDIR; do
	# The collection itself is checked: these it must find.
	echo "$envs" | grep -qx "$v" ||
	    fail "the sources read $v, but the test did not find it"
done
cat "$T"/*.flat >"$T/all.flat"
for v in $envs; do
	grep -q -- "\(^\|[^A-Za-z0-9_]\)$v\([^A-Za-z0-9_-]\|$\)" \
	    "$T/all.flat" || untrue "no page: $v, which the code reads"
done

say "no page says that a built feature is missing"
# What the pages said of gs:// and s3:// while both were built. A true
# statement of what is not built ("fp16 is not in this version") is not
# one of these.
for p in $pages; do
	for phrase in "not built into" "this version does not" \
	    "this version reads" "are parsed, but" "parsed and expanded, but" \
	    "does not read them"; do
		if grep -qiF -- "$phrase" "$T/$p.flat"; then
			untrue "$p: says \"$(grep -oiF -- "$phrase" \
			    "$T/$p.flat" | head -1)\""
		fi
	done
done
if [ -s "$T/untrue" ]; then
	awk '!seen[$0]++' "$T/untrue" >&2
	fail "the pages are not true to the code: the findings above"
fi

say "mandoc -Tlint: no messages above STYLE in any page"
set +e
mandoc -Tlint "$man"/*.[1-9] >"$T/lint" 2>&1
set -e
# Messages about the pages: "mandoc: FILE:LINE:COL: LEVEL: ...". Others (an
# outdated system mandoc.db) are about this machine, not the pages.
grep -E ': (WARNING|ERROR|UNSUPP|BADARG): ' "$T/lint" >"$T/lint.bad" || true
if [ -s "$T/lint.bad" ]; then
	cat "$T/lint.bad" >&2
	fail "mandoc -Tlint reports the messages above"
fi
echo "PASS: help-man"
