"""check_bench.py - a "shardload bench --json" result: every field of
shardload(1) there, of the right type, with sane values.

  check_bench.py RESULT.json KEY=VALUE...

Checks: images_per_sec, images_per_sec_steady, mb_per_sec, wall_s >= 0
and images_per_sec = samples / wall_s, mb_per_sec = bytes / 1e6 / wall_s
(to the 3 decimals printed); skipped = the sum of skipped_by_reason, which
has the five reasons; the stage times >= 0; bound io, decode or consumer;
memory_bound_bytes and peak_rss_bytes > 0; sample_bytes <= bytes (a
known bug, reported without failing); and
each KEY=VALUE given, KEY a dotted path (config.batch=8) and VALUE JSON
(a bare word is a string). Special keys:
  full=B          samples == batches * B (no skips, drop)
  min_ips=X       images_per_sec > X
  decode_busy=0   stages.decode_busy_s == 0; decode_busy=+ means > 0
"""

import json
import sys

from sktest import check, fail, say

REASONS = ["decode", "too_big", "no_image", "no_label", "damaged"]
STAGES = ["io_busy_s", "io_blocked_s", "input_wait_s", "decode_busy_s", "decode_idle_s",
          "ring_wait_s", "consumer_wait_s"]
CONFIG = ["source", "batch", "epoch", "epochs", "seed", "rank", "world", "workers", "io_streams",
          "prefetch_bytes", "shuffle", "image_size", "crop", "flip", "dtype", "layout", "decode",
          "strict", "remainder", "resume_batch", "limit_batches"]
NUM = (int, float)


def get(r, path):
    for k in path.split("."):
        check(isinstance(r, dict) and k in r, "no %s in the result" % path)
        r = r[k]
    return r


def main():
    path = sys.argv[1]
    with open(path) as f:
        text = f.read()
    try:
        r = json.loads(text)
    except ValueError as e:
        fail("%s is not JSON (%s):\n%s" % (path, e, text[:2000]))
    for k in ("images_per_sec", "images_per_sec_steady", "mb_per_sec", "wall_s"):
        check(isinstance(r.get(k), NUM) and r[k] >= 0, "%s: %s is %r" % (path, k, r.get(k)))
    for k in ("samples", "batches", "skipped", "dropped", "bytes", "sample_bytes", "memory_bound_bytes",
              "peak_rss_bytes", "batches_per_epoch"):
        check(isinstance(r.get(k), int) and r[k] >= 0, "%s: %s is %r" % (path, k, r.get(k)))
    sk = r.get("skipped_by_reason")
    check(isinstance(sk, dict) and sorted(sk) == sorted(REASONS), "%s: skipped_by_reason is %r" % (path, sk))
    check(r["skipped"] == sum(sk.values()), "%s: skipped %d is not the sum of %r" % (path, r["skipped"], sk))
    st = r.get("stages")
    check(isinstance(st, dict) and sorted(st) == sorted(STAGES), "%s: stages is %r" % (path, st))
    check(all(isinstance(v, NUM) and v >= 0 for v in st.values()), "%s: a stage time is negative: %r" % (path, st))
    check(r.get("bound") in ("io", "decode", "consumer"), "%s: bound is %r" % (path, r.get("bound")))
    check(r["memory_bound_bytes"] > 0, "%s: memory_bound_bytes is 0" % path)
    check(r["peak_rss_bytes"] > 0, "%s: peak_rss_bytes is 0" % path)
    # Shard bytes are counted before a sample can reach a batch.
    check(r["sample_bytes"] <= r["bytes"], "%s: sample_bytes %d > bytes %d"
          % (path, r["sample_bytes"], r["bytes"]))
    cfg = r.get("config")
    check(isinstance(cfg, dict) and all(k in cfg for k in CONFIG),
          "%s: config lacks %s" % (path, [k for k in CONFIG if k not in (cfg or {})]))
    w = r["wall_s"]
    if w > 0:
        ips = r["samples"] / w
        check(abs(r["images_per_sec"] - ips) <= 0.002 + 1e-3 * ips,
              "%s: images_per_sec %r, samples / wall_s is %r" % (path, r["images_per_sec"], ips))
        mbs = r["bytes"] / 1e6 / w
        check(abs(r["mb_per_sec"] - mbs) <= 0.002 + 1e-3 * mbs,
              "%s: mb_per_sec %r, bytes / 1e6 / wall_s is %r" % (path, r["mb_per_sec"], mbs))
    for kv in sys.argv[2:]:
        k, v = kv.split("=", 1)
        if k == "full":
            check(r["samples"] == r["batches"] * int(v),
                  "%s: samples %d != batches %d * %s" % (path, r["samples"], r["batches"], v))
            continue
        if k == "min_ips":
            check(r["images_per_sec"] > float(v), "%s: images_per_sec %r, want > %s"
                  % (path, r["images_per_sec"], v))
            continue
        if k == "decode_busy":
            d = st["decode_busy_s"]
            check(d == 0 if v == "0" else d > 0, "%s: decode_busy_s is %r, want %s" % (path, d, v))
            continue
        try:
            want = json.loads(v)
        except ValueError:
            want = v
        got = get(r, k)
        check(got == want, "%s: %s is %r, want %r" % (path, k, got, want))
    say("%s: %d samples in %d batches, %.0f images/s, bound %s" %
        (path, r["samples"], r["batches"], r["images_per_sec"], r["bound"]))


main()
