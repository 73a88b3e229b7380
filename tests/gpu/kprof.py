#!/usr/bin/env python3
"""kprof.py - the steady state's GPU time per step, by kernel, from two
kprof.so profiles of the same program run for a different number of steps.

usage: kprof.py SHORT.tsv LONG.tsv STEPS [TOP]
  SHORT.tsv, LONG.tsv  KPROF_OUT files of a short and a long run
  STEPS                how many more steps the long run took
  TOP                  kernels to list (default 30)

Prints the kernels with the most time per step (ms, share of the total,
launches per step), then the total. Launch counts that are not a multiple
of STEPS mean the two runs differ by more than their steps (autotuning that
did not finish in the short run, say).
"""
import sys


def load(path):
    t = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t", 2)
            if len(parts) != 3:
                continue
            ns, n, name = int(parts[0]), int(parts[1]), parts[2]
            a = t.setdefault(name, [0, 0])
            a[0] += ns
            a[1] += n
    return t


def short_name(name, width=90):
    # C++ mangled names: keep the identifier after _Z<len>
    if name.startswith("_Z"):
        i = 2
        while i < len(name) and name[i] in "LN":
            i += 1
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j > i:
            k = int(name[i:j])
            rest = name[j + k:]
            name = name[j:j + k] + ("<" + rest[:40] + ">" if rest else "")
    return name if len(name) <= width else name[:width - 3] + "..."


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    a, b, steps = load(argv[1]), load(argv[2]), int(argv[3])
    top = int(argv[4]) if len(argv) > 4 else 30
    rows = []
    for name, (ns, n) in b.items():
        ns0, n0 = a.get(name, (0, 0))
        d, dn = ns - ns0, n - n0
        if d > 0:
            rows.append((d / steps / 1e6, dn / steps, name))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print("%9s %6s %8s  %s" % ("ms/step", "share", "calls", "kernel"))
    for ms, calls, name in rows[:top]:
        print("%9.3f %5.1f%% %8.1f  %s" % (ms, 100 * ms / total, calls,
                                          short_name(name)))
    print("%9.3f 100.0%% %8.1f  total GPU time per step (%d kernels)" % (
        total, sum(r[1] for r in rows), len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
