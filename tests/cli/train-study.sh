#!/usr/bin/env bash
# train-study.sh - shardtrain study: a missing requirement gives its
# one-line reason (a skip, or exit 1 when --sources names it); a link
# capped below the compute makes files over it input-bound at the cap's
# images/s (within 5%); the study's findings reproduce on the emulated link
# (files over it far slower than local disk, shards over it keeping up with
# the compute, two DDP ranks narrowing the files gap); SIGINT in the middle
# of a cell leaves no server, proxy or mount behind.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

need_cmd nginx
need_cmd python3
[ -n "${SHARDTRAIN:-}" ] || skip "shardtrain is not built"

# The study starts its own servers; nothing of the caller's may steer them.
unset STORAGE_EMULATOR_HOST AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 \
    AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY http_proxy https_proxy \
    HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy

# Processes whose command line names DIR, and mounts under it.
leftovers() {
	local p
	for p in /proc/[0-9]*; do
		[ "$p" != "/proc/$$" ] || continue
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$1" &&
		    echo "process ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline")"
	done
	awk -v d="$1" 'index($2, d) == 1 { print "mount " $2 }' /proc/mounts
	return 0
}

# One thread each for the compute and the decode of a rank: on a 2-core
# machine shared with the servers, a team barrier of OpenMP threads stalls
# whenever a server takes a core, and the figures turn to noise.
small=(--model resnet18 --width 0.125 --image-size 32 --classes 4
    --per-class 32 --batch 16 --threads 1 --workers 1)

say "a requirement that is missing: its reason, a skip or exit 1"
mkdir "$T/nobin"
# With PATH empty of it, moto_server is missing (and python3 with it);
# shardtool, shardfs and linkproxy are found beside shardtrain in the build
# tree, nginx in /usr/sbin.
run_rc 1 named env PATH="$T/nobin" "$SHARDTRAIN" study --out "$T/named" \
    --forms shards --sources local,s3 --strategies single -q "${small[@]}"
has named.err "--sources names s3, which cannot run here: moto_server is missing"
[ "$(grep -c 'shardtrain study' "$T/named.err")" -eq 1 ] &&
    [ ! -e "$T/named/data/files" ] ||
    { show named; fail "not one line"; }
run_rc 0 skipped env PATH="$T/nobin" "$SHARDTRAIN" study \
    --out "$T/skipped" --forms shards --strategies single,ddp \
    "${small[@]}"
python3 - "$T/skipped/study.json" <<'PY' || { show skipped; fail "the skips"; }
import json, sys
d = json.load(open(sys.argv[1]))
cells = {(c["source"], c["strategy"]): c for c in d["cells"]}
assert cells[("local", "single")]["status"] == "ok", cells
assert cells[("local", "single")]["epoch_seconds"] > 0
why = {"s3": "moto_server is missing", "gs": "gcp-storage-emulator is missing"}
for (src, st), c in cells.items():
    if st == "single" and src not in why:
        # nginx is found in /usr/sbin: http may run; the mount needs
        # fusermount3 from PATH
        assert c["status"] == "ok" or "fusermount3" in c["skip_reason"], c
        continue
    assert c["status"] == "skipped", c
    assert c["error"] is None and c["epoch_seconds"] is None, c
    want = why[src] if st == "single" else "mpirun is missing"
    assert want in c["skip_reason"], (want, c)
print("skips:", {"%s/%s" % k: c["skip_reason"] for k, c in cells.items()
                 if c["skip_reason"]})
PY
has skipped.out "skipped: shards from s3 (single): moto_server is missing"

say "a link capped below the compute: files over it are input-bound at the cap"
cap=2000000
run_rc 0 capped "$SHARDTRAIN" study --out "$T/capped" --forms files \
    --sources local,http --strategies single --io-streams 8 \
    --link-ttfb 1ms --link-conn-rate 100M --link-total-rate $cap \
    "${small[@]}"
python3 - "$T/capped" $cap <<'PY' || { show capped; fail "the capped link"; }
import json, os, sys
out, cap = sys.argv[1], float(sys.argv[2])
d = json.load(open(os.path.join(out, "study.json")))
c = {x["source"]: x for x in d["cells"]}
files = os.path.join(out, "data", "files")
sizes = [os.path.getsize(os.path.join(files, k, f))
         for k in os.listdir(files) for f in os.listdir(os.path.join(files, k))]
want = cap / (sum(sizes) / len(sizes))
got = c["http"]["images_per_second"]
print("capped: %.1f images/s, cap / mean size %.1f, verdict %s, wait %.2f"
      % (got, want, c["http"]["verdict"], c["http"]["data_wait_share"]))
assert c["http"]["verdict"] == "input-bound", c["http"]
assert abs(got - want) <= 0.05 * want, (got, want)
assert c["http"]["remote"]["requests"] >= len(sizes), c["http"]["remote"]
assert c["local"]["images_per_second"] > 3 * got, c["local"]
PY

say "synthetic data: compute-bound"
trn synth "${TINY_VIT[@]}" --batch 16 --steps 20 --json "$T/synth.json" -q
[ "$(jget "$T/synth.json" result.verdict)" = compute-bound ] ||
    fail "synthetic data was not compute-bound"

say "the study's findings reproduce on the emulated link"
mpi_launcher || skip "$MPI_WHY"
# A sanitizer's build runs the same matrix for its checks, not its
# figures: its compute is several times slower than a real build's.
sanitized=0
if sed -n 's/^\(SK_CFLAGS\|CFLAGS\) = //p' "$top_builddir/Makefile" 2>/dev/null |
    grep -q -- '-fsanitize='; then
	sanitized=1
fi
# Three runs of the matrix, interleaved; each cell is its median run's.
repeats=3
[ $sanitized = 0 ] || repeats=1
# One I/O stream per rank: files over the link then arrive at about 60 a
# second per rank, well below the compute of any CPU this runs on, so the
# files gap does not hang on how fast this machine computes (with the
# default 2 streams, a slower CPU's compute nearly keeps up with them).
run_rc 0 study "$SHARDTRAIN" study --quick --out "$T/study" \
    --forms files,shards --sources local,http --strategies single,ddp \
    --io-streams 1 --repeats $repeats
cat "$T/study.out"
python3 - "$T/study/study.json" $sanitized <<'PY' || { show study; fail "the findings"; }
import json, sys
d = json.load(open(sys.argv[1]))
e = {(c["form"], c["source"], c["strategy"]): c for c in d["cells"]}
for c in d["cells"]:
    assert c["status"] == "ok", c
if sys.argv[2] == "1":
    print("a sanitizer's build: the figures are not checked")
    sys.exit(0)
def r(form, src, st):
    return e[(form, src, st)]["epoch_seconds"] / e[(form, "local", st)]["epoch_seconds"]
f1, s1, f2 = r("files", "http", "single"), r("shards", "http", "single"), \
    r("files", "http", "ddp")
print("files over the link %.3fx local, shards %.3fx, files with DDP %.3fx"
      % (f1, s1, f2))
assert f1 >= 1.25, "files over the link are not far slower: %.2fx" % f1
# Shards over the link: the input keeps up with the compute (the study's
# 1.02x). On 2 cores the epoch itself also carries the compute's run to run
# swing and the CPU of the servers and proxy that emulate the link, so the
# test holds the data wait to 5% of the step, as the study's finding
# reads; the epoch only to 1.5x local disk and below files over the link
# (see BENCHMARKS.md, "The seed study"): at 1.15x a CI run failed with
# 1.36x and a data wait of 2%, two of its three runs slowed down by the
# compute alone.
sh = e[("shards", "http", "single")]
assert e[("shards", "local", "single")]["verdict"] == "compute-bound"
assert sh["data_wait_share"] <= 0.05, sh
assert sh["verdict"] != "input-bound", sh
assert s1 <= 1.5, "shards over the link: %.3fx local disk" % s1
assert s1 < f1, "shards over the link are not faster than files: %.2fx vs %.2fx" % (s1, f1)
assert f2 < f1, "DDP does not narrow the files gap: %.2fx vs %.2fx" % (f2, f1)
text = " ".join(d["findings"])
assert "far slower than local disk, as in the study" in text, text
assert ("at most 5% slower than local disk" in text or
        "but the input kept up" in text), text
assert "narrows files over the link" in text, text
PY
for f in study.svg study.png; do
	[ -s "$T/study/$f" ] || fail "no $f"
done
has study.out "seconds per epoch"

say "SIGINT in the middle of a cell: no server, proxy or mount is left"
# The mount is the cell that starts the most: nginx, its proxy, shardfs.
if [ -c /dev/fuse ] && command -v fusermount3 >/dev/null; then
	src=mount
else
	src=http
fi
"$SHARDTRAIN" study --out "$T/sig" --forms files --sources $src \
    --strategies single --link-total-rate 200K "${small[@]}" \
    >"$T/sig.out" 2>"$T/sig.err" &
pid=$!
# Should a check below fail, the study still stops its servers and mount.
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; sk_cleanup' EXIT
for _ in $(seq 600); do
	[ -e "$T/sig/cells/files-$src-single1.log" ] && break
	kill -0 $pid 2>/dev/null || break
	sleep 0.1
done
[ -e "$T/sig/cells/files-$src-single1.log" ] ||
    { show sig; fail "the cell never started"; }
sleep 2
# Before: servers and proxies of the study, and the mount.
before=$(leftovers "$T/sig")
echo "$before" | grep -q nginx || { show sig; fail "no nginx before SIGINT"; }
echo "$before" | grep -q linkproxy || { show sig; fail "no proxy before SIGINT"; }
if [ $src = mount ]; then
	echo "$before" | grep -q "^mount " || { show sig; fail "no mount before SIGINT"; }
fi
kill -INT $pid
set +e
wait $pid
rc=$?
set -e
trap sk_cleanup EXIT
[ "$rc" -ne 0 ] || { show sig; fail "SIGINT: exit status 0"; }
has sig.err "stopped by signal"
left=$(leftovers "$T/sig")
[ -z "$left" ] || { show sig; echo "$left" >&2; fail "left behind"; }
echo "PASS: train-study"
