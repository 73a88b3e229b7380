#!/usr/bin/env bash
# help-man.sh - every long option in "shardtool CMD --help" appears in
# shardtool(1) (curl's test1139), every command has a --help that exits 0,
# and mandoc -Tlint finds nothing above STYLE in the man pages; the same
# for "shardload --help" and shardload(1), and for "shardtrain --help" and
# "shardtrain report --help" and shardtrain(1); shardkit(3) lints clean.
set -eu
. "$top_srcdir/tests/cli/lib.sh"

man1="$top_srcdir/man/shardtool.1"
man5="$top_srcdir/man/shardkit.5"
[ -f "$man1" ] || fail "$man1 does not exist"
[ -f "$man5" ] || fail "$man5 does not exist"

say "shardtool --help and --version exit 0"
st help --help
has help.out "usage: shardtool"
st version --version
has version.out "shardtool"
st_rc 2 nocmd

# The commands: the first word of each usage line under "commands:".
cmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p' "$T/help.out")
[ "$(echo "$cmds" | wc -w)" -ge 7 ] || fail "shardtool --help lists only: $cmds"

# The man page as text, with overstrike removed, for the search.
need_cmd mandoc
mandoc -Tascii -O width=200 "$man1" | sed 's/.\x08//g' >"$T/man1.txt" ||
    fail "mandoc cannot render $man1"

missing=
for c in $cmds; do
	say "shardtool $c --help: exit 0, and its options are in shardtool.1"
	st help-$c "$c" --help
	[ -s "$T/help-$c.out" ] || fail "shardtool $c --help prints nothing"
	grep -qw -- "$c" "$T/man1.txt" || missing="$missing $c(command)"
	for o in $(grep -o -- '--[a-z][a-z0-9-]*' "$T/help-$c.out" | sort -u); do
		# A whole option: not followed by a letter, digit or dash.
		grep -q -- "$o\([^a-z0-9-]\|$\)" "$T/man1.txt" ||
		    missing="$missing $c:$o"
	done
done
[ -z "$missing" ] || fail "not in shardtool.1:$missing"

say "mandoc -Tlint: no messages above STYLE"
set +e
mandoc -Tlint "$man1" "$man5" >"$T/lint" 2>&1
set -e
# Messages about the pages: "mandoc: FILE:LINE:COL: LEVEL: ...". Others (an
# outdated system mandoc.db) are about this machine, not the pages.
grep -E ': (WARNING|ERROR|UNSUPP|BADARG): ' "$T/lint" >"$T/lint.bad" || true
if [ -s "$T/lint.bad" ]; then
	cat "$T/lint.bad" >&2
	fail "mandoc -Tlint reports the messages above"
fi

say "shardkit.5 documents the shard and manifest formats"
mandoc -Tascii -O width=200 "$man5" | sed 's/.\x08//g' >"$T/man5.txt"
for w in wids-shard-index-v1 nsamples filesize md5sum ustar; do
	grep -qF -- "$w" "$T/man5.txt" || fail "shardkit.5 does not mention $w"
done
# shardload: its --help against shardload(1); shardload(1) and shardkit(3)
# lint clean.
sl_man="$top_srcdir/man/shardload.1"
lib_man="$top_srcdir/man/shardkit.3"
[ -f "$sl_man" ] || fail "$sl_man does not exist"
[ -f "$lib_man" ] || fail "$lib_man does not exist"

say "shardload --help and --version exit 0, no command exits 2"
sl slhelp --help
has slhelp.out "usage: shardload"
sl slversion --version
has slversion.out "shardload"
sl_rc 2 slnocmd
is_sl_usage_error slnocmd

say "every command and long option of shardload --help is in shardload.1"
mandoc -Tascii -O width=200 "$sl_man" | sed 's/.\x08//g' >"$T/slman.txt" ||
    fail "mandoc cannot render $sl_man"
slcmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p' "$T/slhelp.out")
[ "$(echo "$slcmds" | wc -w)" -eq 3 ] ||
    fail "shardload --help lists the commands: $slcmds (want bench dump keys)"
missing=
for c in $slcmds; do
	grep -qw -- "$c" "$T/slman.txt" || missing="$missing $c(command)"
	sl "slhelp-$c" "$c" --help
	cmp -s "$T/slhelp.out" "$T/slhelp-$c.out" ||
	    fail "shardload $c --help differs from shardload --help"
done
slopts=$(grep -o -- '--[a-z][a-z0-9-]*' "$T/slhelp.out" | sort -u)
[ "$(echo "$slopts" | wc -w)" -ge 30 ] ||
    fail "shardload --help shows only these options: $slopts"
for o in $slopts; do
	grep -q -- "$o\([^a-z0-9-]\|$\)" "$T/slman.txt" || missing="$missing $o"
done
# The environment variables shardload reads.
for v in OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE \
    PMIX_RANK PMIX_SIZE SLURM_PROCID SLURM_NTASKS SHARDKIT_LOG; do
	grep -qw -- "$v" "$T/slman.txt" || missing="$missing \$$v"
done
[ -z "$missing" ] || fail "not in shardload.1:$missing"

say "mandoc -Tlint: no messages above STYLE in shardload.1 and shardkit.3"
set +e
mandoc -Tlint "$sl_man" "$lib_man" >"$T/sllint" 2>&1
set -e
grep -E ': (WARNING|ERROR|UNSUPP|BADARG): ' "$T/sllint" >"$T/sllint.bad" || true
if [ -s "$T/sllint.bad" ]; then
	cat "$T/sllint.bad" >&2
	fail "mandoc -Tlint reports the messages above"
fi
mandoc -Tascii "$lib_man" >/dev/null || fail "mandoc cannot render $lib_man"
# shardtrain: its --help (and report's) against shardtrain(1), which lints
# clean.
: "${SHARDTRAIN:?SHARDTRAIN is not set; run the test through make check}"
stn_man="$top_srcdir/man/shardtrain.1"
[ -f "$stn_man" ] || fail "$stn_man does not exist"
[ -x "$SHARDTRAIN" ] || fail "$SHARDTRAIN is not built"

say "shardtrain --help, --version and report --help exit 0; a bad option exits 2"
run_rc 0 stnhelp "$SHARDTRAIN" --help
has stnhelp.out "usage: shardtrain"
run_rc 0 stnversion "$SHARDTRAIN" --version
has stnversion.out "shardtrain"
run_rc 0 stnrephelp "$SHARDTRAIN" report --help
has stnrephelp.out "usage: shardtrain report"
run_rc 2 stnbad "$SHARDTRAIN" --no-such-option
has stnbad.err "usage:"
run_rc 2 stnrepbad "$SHARDTRAIN" report --no-such-option
has stnrepbad.err "usage:"
for tag in stnhelp stnversion stnrephelp stnbad stnrepbad; do
	no_sanitizer_report "$tag"
done

say "every command and long option of shardtrain --help is in shardtrain.1"
mandoc -Tascii -O width=200 "$stn_man" | sed 's/.\x08//g' >"$T/stnman.txt" ||
    fail "mandoc cannot render $stn_man"
missing=
for c in info report mpirun; do
	grep -qw -- "$c" "$T/stnman.txt" || missing="$missing $c(command)"
done
stnopts=$(cat "$T/stnhelp.out" "$T/stnrephelp.out" |
    grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
[ "$(echo "$stnopts" | wc -w)" -ge 35 ] ||
    fail "shardtrain --help shows only these options: $stnopts"
for o in $stnopts; do
	grep -q -- "$o\([^a-z0-9-]\|$\)" "$T/stnman.txt" || missing="$missing $o"
done
# What the page must name besides the options: the launcher variables,
# the sections and the JSON layout's top level.
for w in OMP_NUM_THREADS OMPI_COMM_WORLD_SIZE PMI_SIZE SLURM_NTASKS \
    STRATEGIES CHECKPOINTS images_per_s wait_share loader_ips compute_ips; do
	grep -qw -- "$w" "$T/stnman.txt" || missing="$missing $w"
done
[ -z "$missing" ] || fail "not in shardtrain.1:$missing"

say "mandoc -Tlint: no messages above STYLE in shardtrain.1"
set +e
mandoc -Tlint "$stn_man" >"$T/stnlint" 2>&1
set -e
grep -E ': (WARNING|ERROR|UNSUPP|BADARG): ' "$T/stnlint" >"$T/stnlint.bad" || true
if [ -s "$T/stnlint.bad" ]; then
	cat "$T/stnlint.bad" >&2
	fail "mandoc -Tlint reports the messages above"
fi
echo "PASS: help-man"
