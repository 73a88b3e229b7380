#!/usr/bin/env bash
# train-report-hostile.sh - "shardtrain report" on hostile runs: file names
# and JSON strings that try to become gnuplot commands (a line of EOD, !cmd,
# `cmd`, system()), terminal escapes that must not reach stdout raw,
# malformed, huge, wrong-typed and non-regular run files (exit 1, the file
# and field named), and symlinks planted where the run's JSON and the plot
# are written, which must be replaced, never written through.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

# mkrun FILE [KEY=JSON...]: a run file as shardtrain --json writes it, with
# KEY (config.model, result.verdict, ...) set to the JSON value given.
mkrun() {
	python3 - "$@" <<'PY'
import json, sys
run = {
    "schema": 1,
    "tool": "shardtrain",
    "config": {"model": "resnet18", "family": "resnet", "strategy": "single",
               "world": 1, "batch_per_rank": 16, "global_batch": 16,
               "source": "synthetic", "backend": "cpu"},
    "result": {"images_per_second": 812.5, "wall_seconds": 4.2, "steps": 30,
               "images": 480, "wait_share": 0.01, "cost_per_epoch_usd": None,
               "verdict": "compute-bound", "reason": "r", "hint": "h"},
    "epochs": [{"epoch": 0, "wall_seconds": 4.2, "images_per_second": 812.5}],
}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    *path, last = k.split(".")
    d = run
    for p in path:
        d = d[p]
    if v == "DELETE":
        del d[last]
    else:
        d[last] = json.loads(v)
with open(sys.argv[1], "w") as f:
    json.dump(run, f, indent=2)
PY
}

# no_pwned: no PWNED* file anywhere gnuplot could have made one.
no_pwned() {
	local got
	got=$(find "$T" "$top_builddir" /tmp -maxdepth 3 -name 'PWNED*' \
	    2>/dev/null | head -5)
	[ -z "$got" ] || fail "$1: data became a command: $got"
}

# no_raw_ctl TAG: TAG.out holds no control byte but the newlines.
no_raw_ctl() {
	if LC_ALL=C tr -d '\n' <"$T/$1.out" | LC_ALL=C grep -q '[[:cntrl:]]'; then
		show "$1"
		od -c "$T/$1.out" | head -20 >&2
		fail "$1: a control character reached stdout raw"
	fi
}

mkdir -p "$T/runs" "$T/work" "$T/out"
# gnuplot's "!cmd" and `cmd` run in its working folder: make it ours.
cd "$T/work"
find /tmp -maxdepth 3 -name 'PWNED*' 2>/dev/null | grep -q . &&
    skip "a PWNED file is already in /tmp; remove it first"

say "file names that try to end the data block and run commands"
n1=$'a\nEOD\n!touch PWNED\nb.json'
n2='c `touch PWNED3` d.json'
n3='e"); system("touch PWNED2"); print("f.json'
n4=$'g\r\nset output "PWNED5"\n!touch PWNED6\nh.json'
n5="i'.system('touch PWNED7').'j.json"
n6=$'k\\\nEOD\nsystem("touch PWNED8")\nl.json'
for n in "$n1" "$n2" "$n3" "$n4" "$n5" "$n6"; do
	mkrun "$T/runs/$n"
done
mkrun "$T/runs/m.json" config.model='"x\nEOD\n!touch PWNED9\n`touch PWNED10`"' \
    config.data='"/d/`touch PWNED11`\nEOD\n!touch PWNED12\n.json"'
runs=("$T/runs/$n1" "$T/runs/$n2" "$T/runs/$n3" "$T/runs/$n4" \
    "$T/runs/$n5" "$T/runs/$n6" "$T/runs/m.json")

trn table report "${runs[@]}"
no_raw_ctl table
has table.out 'touch PWNED'		# shown, escaped, not run
[ "$(wc -l <"$T/table.out")" -eq 8 ] ||
    { show table; fail "a name's newline split a row of the table"; }
no_pwned table

if command -v gnuplot >/dev/null 2>&1; then
	trn plot-svg report --plot "$T/out/runs.svg" "${runs[@]}"
	no_pwned plot-svg
	grep -q '</svg>' "$T/out/runs.svg" || fail "the plot is not a whole SVG"
	[ -z "$(ls -A "$T/work")" ] || fail "gnuplot wrote in the working folder: $(ls -A "$T/work")"
	trn plot-png report --plot "$T/out/runs.png" "${runs[@]}"
	no_pwned plot-png
	[ "$(head -c 4 "$T/out/runs.png" | od -An -c | tr -d ' ')" = '211PNG' ] ||
	    fail "the plot is not a PNG"
else
	say "gnuplot is not installed: the plot part is skipped"
fi

say "terminal escapes in names and JSON strings are shown escaped"
esc=$'\033]0;owned\007\033[2J'
mkrun "$T/runs/esc${esc}.json" config.model='"\u001b[31mred\r\u0007"' \
    config.strategy='"ddp\u001b[H"' config.data='"gs://b/\u009b31m\u202e.tar"' \
    result.verdict='"input-bound\u001b[0m\r"'
utf=$'\xff\xfebad-utf8.json'
mkrun "$T/runs/$utf" config.model='"caf\u00e9"'
trn escapes report "$T/runs/esc${esc}.json" "$T/runs/$utf"
no_raw_ctl escapes
has escapes.out 'red'
has escapes.out '\x1b'
has escapes.out 'café'			# valid UTF-8 is kept
if LC_ALL=C grep -q $'\xc2\x9b\|\xe2\x80\xae\|\xff' "$T/escapes.out"; then
	show escapes
	fail "escapes: a C1 control, bidi override or bad UTF-8 reached stdout raw"
fi
no_pwned escapes

say "malformed, wrong-typed, huge and odd run files: exit 1, file named"
good="$T/runs/good.json"
mkrun "$good"
printf '{"schema": 1, "config": {' >"$T/runs/cut.json"
trn_rc 1 cut report "$good" "$T/runs/cut.json"
has cut.err "cut.json"
[ ! -s "$T/cut.out" ] || fail "cut: a table printed over a bad run"

# bad NAME FIELD KEY=JSON...: a run with KEY set is refused, NAME and
# FIELD in the message.
bad() {
	local name=$1 field=$2
	shift 2
	mkrun "$T/runs/$name.json" "$@"
	trn_rc 1 "$name" report "$good" "$T/runs/$name.json"
	has "$name.err" "shardtrain report: "
	has "$name.err" "$name.json"
	has "$name.err" "$field"
}
bad model-int config.model config.model=5
bad ips-str result.images_per_second result.images_per_second='"fast"'
bad ips-neg result.images_per_second result.images_per_second=-3
bad ips-null result.images_per_second result.images_per_second=null
bad world-str config.world config.world='"2"'
bad world-neg config.world config.world=-1
bad no-verdict result.verdict result.verdict=DELETE
bad version "schema 4294967297" schema=4294967297
bad old-run 'no "schema", not 1: written by an older shardtrain? rerun it' \
    schema=DELETE shardtrain=1
bad schema0 'schema 0, not 1: written by an older shardtrain? rerun it' schema=0
bad other-tool 'written by shardload bench, not shardtrain' \
    tool='"shardload bench"'
bad no-tool 'tool is missing' tool=DELETE
bad wait-big result.wait_share result.wait_share=1e300
bad cost-str result.cost_per_epoch_usd result.cost_per_epoch_usd='"cheap"'
bad epochs-obj epochs epochs='{"wall_seconds": 1}'
bad epoch-str 'epochs[1].wall_seconds' epochs='[{"wall_seconds": 1}, {"wall_seconds": "x"}]'
bad epoch-int 'epochs[0]' epochs='[7]'
bad config-arr config config='[1, 2]'
printf '[1, 2, 3]\n' >"$T/runs/array.json"
trn_rc 1 array report "$T/runs/array.json"
has array.err "array.json"

# Every bad file is named, not only the first.
trn_rc 1 two-bad report "$T/runs/cut.json" "$good" "$T/runs/model-int.json"
has two-bad.err "cut.json"
has two-bad.err "model-int.json"

# A valid run padded past the size limit is refused before it is parsed.
python3 - "$T/runs/huge.json" <<'PY'
import sys
run = open(sys.argv[1].replace("huge.json", "good.json")).read()
with open(sys.argv[1], "w") as f:
    f.write(" " * (80 << 20))
    f.write(run)
PY
trn_rc 1 huge report "$good" "$T/runs/huge.json"
has huge.err "huge.json"
has huge.err "larger than"
rm -f "$T/runs/huge.json"

# A folder and a FIFO: refused at once, never read (a FIFO would block).
mkfifo "$T/runs/fifo.json"
run_rc 1 fifo timeout 20 "$SHARDTRAIN" report "$good" "$T/runs/fifo.json"
has fifo.err "fifo.json"
has fifo.err "not a regular file"
trn_rc 1 folder report "$good" "$T/runs"
has folder.err "runs"
trn_rc 1 missing report "$T/runs/none.json"
has missing.err "none.json"

say "symlinks planted at the output names are replaced, not written through"
echo victim >"$T/victim"
ln -s "$T/victim" "$T/out/run.json.part"
ln -s "$T/victim" "$T/out/run.json"
trn json "${TINY_VIT[@]}" --batch 8 --steps 2 --ceiling-steps 0 \
    --log-every 0 --json "$T/out/run.json"
[ "$(cat "$T/victim")" = victim ] || fail "--json wrote through a symlink"
[ -f "$T/out/run.json" ] && [ ! -L "$T/out/run.json" ] ||
    fail "--json left no regular run.json"
[ -L "$T/out/run.json.part" ] || fail "the planted .part symlink was touched"
[ "$(jget "$T/out/run.json" result.steps)" = 2 ] || fail "--json content"
if command -v gnuplot >/dev/null 2>&1; then
	ln -s "$T/victim" "$T/out/link.svg"
	ln -s "$T/victim" "$T/out/link.svg.part"
	trn plot-link report --plot "$T/out/link.svg" "$good"
	[ "$(cat "$T/victim")" = victim ] || fail "--plot wrote through a symlink"
	[ -f "$T/out/link.svg" ] && [ ! -L "$T/out/link.svg" ] ||
	    fail "--plot left no regular file"
	grep -q '</svg>' "$T/out/link.svg" || fail "--plot: not a whole SVG"
fi
rm -f "$T/out/run.json.part" "$T/out/link.svg.part"
no_partial "$T/out"
no_pwned end
echo "PASS: train-report-hostile"
