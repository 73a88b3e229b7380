"""check_bench.py - a "shardload bench --json" result: every field of
shardload(1) there, of the right type, with sane values.

  check_bench.py RESULT.json KEY=VALUE...

Checks: schema 1; result.images_per_second, steady_images_per_second,
bytes_per_second, wall_seconds >= 0 and images_per_second = samples /
wall_seconds, bytes_per_second = bytes / wall_seconds; skipped = the sum of skipped_by_reason, which
has the five reasons; the stage times >= 0; bound io, decode or consumer;
memory_bound_bytes and peak_rss_bytes > 0; sample_bytes <= bytes (a
known bug, reported without failing); and
each KEY=VALUE given, KEY a dotted path (config.batch=8) and VALUE JSON
(a bare word is a string). Special keys:
  full=B          samples == batches * B (no skips, drop)
  min_ips=X       result.images_per_second > X
  decode_busy=0   result.stage_seconds.decode_busy == 0; decode_busy=+ means > 0
"""

import json
import sys

from sktest import check, fail, say

REASONS = ["decode", "too_big", "no_image", "no_label", "damaged"]
STAGES = ["io_busy", "io_blocked", "input_wait", "decode_busy", "decode_idle",
          "ring_wait", "consumer_wait"]
CONFIG = ["source", "batch_per_rank", "global_batch", "epoch", "epochs", "seed", "rank", "world", "workers", "io_streams",
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
    check(r.get("schema") == 1 and r.get("tool") == "shardload bench",
          "%s: schema %r, tool %r" % (path, r.get("schema"), r.get("tool")))
    cfg = r.get("config")
    r = r.get("result")
    check(isinstance(r, dict), "%s: no result object" % path)
    for k in ("images_per_second", "steady_images_per_second", "bytes_per_second",
              "wall_seconds", "bound_share"):
        check(isinstance(r.get(k), NUM) and r[k] >= 0, "%s: %s is %r" % (path, k, r.get(k)))
    for k in ("samples", "batches", "skipped", "dropped", "bytes", "sample_bytes", "memory_bound_bytes",
              "peak_rss_bytes", "batches_per_epoch"):
        check(isinstance(r.get(k), int) and r[k] >= 0, "%s: %s is %r" % (path, k, r.get(k)))
    sk = r.get("skipped_by_reason")
    check(isinstance(sk, dict) and sorted(sk) == sorted(REASONS), "%s: skipped_by_reason is %r" % (path, sk))
    check(r["skipped"] == sum(sk.values()), "%s: skipped %d is not the sum of %r" % (path, r["skipped"], sk))
    st = r.get("stage_seconds")
    check(isinstance(st, dict) and sorted(st) == sorted(STAGES), "%s: stage_seconds is %r" % (path, st))
    check(all(isinstance(v, NUM) and v >= 0 for v in st.values()), "%s: a stage time is negative: %r" % (path, st))
    check(r.get("bound") in ("io", "decode", "consumer"), "%s: bound is %r" % (path, r.get("bound")))
    check(r["memory_bound_bytes"] > 0, "%s: memory_bound_bytes is 0" % path)
    check(r["peak_rss_bytes"] > 0, "%s: peak_rss_bytes is 0" % path)
    # Shard bytes are counted before a sample can reach a batch.
    check(r["sample_bytes"] <= r["bytes"], "%s: sample_bytes %d > bytes %d"
          % (path, r["sample_bytes"], r["bytes"]))
    check(isinstance(cfg, dict) and all(k in cfg for k in CONFIG),
          "%s: config lacks %s" % (path, [k for k in CONFIG if k not in (cfg or {})]))
    check(cfg["global_batch"] == cfg["batch_per_rank"] * cfg["world"],
          "%s: global_batch is not batch_per_rank x world: %r" % (path, cfg))
    w = r["wall_seconds"]
    if w > 0:
        ips = r["samples"] / w
        check(abs(r["images_per_second"] - ips) <= 1e-6 * ips,
              "%s: images_per_second %r, samples / wall_seconds is %r" % (path, r["images_per_second"], ips))
        bps = r["bytes"] / w
        check(abs(r["bytes_per_second"] - bps) <= 1e-6 * bps,
              "%s: bytes_per_second %r, bytes / wall_seconds is %r" % (path, r["bytes_per_second"], bps))
    for kv in sys.argv[2:]:
        k, v = kv.split("=", 1)
        if k == "full":
            check(r["samples"] == r["batches"] * int(v),
                  "%s: samples %d != batches %d * %s" % (path, r["samples"], r["batches"], v))
            continue
        if k == "min_ips":
            check(r["images_per_second"] > float(v), "%s: images_per_second %r, want > %s"
                  % (path, r["images_per_second"], v))
            continue
        if k == "decode_busy":
            d = st["decode_busy"]
            check(d == 0 if v == "0" else d > 0, "%s: stage_seconds.decode_busy is %r, want %s" % (path, d, v))
            continue
        try:
            want = json.loads(v)
        except ValueError:
            want = v
        got = get({"config": cfg, "result": r}, k) if k.startswith("config.") else get(r, k)
        check(got == want, "%s: %s is %r, want %r" % (path, k, got, want))
    say("%s: %d samples in %d batches, %.0f images/s, bound %s" %
        (path, r["samples"], r["batches"], r["images_per_second"], r["bound"]))


main()
