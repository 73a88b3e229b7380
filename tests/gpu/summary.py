#!/usr/bin/env python3
"""tests/gpu/summary.py - one line per shardtrain --json FILE: the model,
precision and batch, images/s over busy time (compute alone on synthetic
data) and overall, the peak GPU memory and the stage seconds."""
import json
import sys

for path in sys.argv[1:]:
    try:
        j = json.load(open(path))
    except (OSError, ValueError) as e:
        print("summary: %s: %s" % (path, e))
        continue
    c, r = j["config"], j["result"]
    print("shardtrain %s %s batch %d: %.1f images/s busy, %.1f overall, "
          "peak %.2f GiB, verdict %s, stages %s" % (
              c["model"], c["precision"], c["global_batch"],
              r.get("compute_images_per_second") or -1,
              r.get("images_per_second") or -1,
              (r.get("peak_gpu_bytes") or 0) / 2**30, r.get("verdict"),
              json.dumps(r.get("stage_seconds"))))
