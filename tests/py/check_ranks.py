"""check_ranks.py - hold "shardload keys" output of every rank of several
world sizes to the dealing and remainder rules of shardload(1).

  check_ranks.py MANIFEST BATCH DIR WORLD...

For each world size W and rank R, DIR holds three "keys" outputs of epoch
0, all with the same seed:
  DIR/keep.W.R   --remainder keep --shuffle 0
  DIR/drop.W.R   --remainder drop --shuffle 0 (the default remainder)
  DIR/shuf.W.R   --remainder drop --shuffle 16
The data set's keys and labels are read independently, with tarfile, from
the manifest's shards. N samples, batch B:
  keep: every key once over the ranks, each with its .cls label; the ranks
        concatenated in rank order are the shards, each whole and in its
        own order, in one permuted order, the same for every W; rank R
        holds floor(N(R+1)/W) - floor(NR/W) of them; every rank has
        ceil(ceil(N/W)/B) batches, full but the last.
  drop: rank R delivers the first floor(floor(N/W)/B) * B keys of its keep
        run, in full batches, as many on every rank; so the keys left out
        are exactly the tails, N - W * floor(floor(N/W)/B) * B of them.
  shuf: as many batches and keys as drop, no key twice, each rank's keys a
        subset of its keep run, in another order than drop for some rank.
"""

import os
import sys

from sktest import check, fail, load_manifest, manifest_shards, say, tar_samples


def read_keys(path):
    """[(batch, index, key, label)] of a keys file; epoch must be 0."""
    check(os.path.exists(path), "%s: missing" % path)
    rows = []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            check(len(p) == 5, "%s: %r does not have 5 fields" % (path, line))
            check(p[0] == "0", "%s: epoch %s, want 0" % (path, p[0]))
            rows.append((int(p[1]), int(p[2]), p[3], int(p[4])))
    return rows


def batches(path, rows):
    """The batch sizes, checking batch and index numbering."""
    sizes = []
    for b, i, _, _ in rows:
        if i == 0:
            check(b == len(sizes), "%s: batch %d follows batch %d" % (path, b, len(sizes) - 1))
            sizes.append(0)
        check(sizes and b == len(sizes) - 1 and i == sizes[-1],
              "%s: batch %d index %d out of order" % (path, b, i))
        sizes[-1] += 1
    return sizes


def main():
    if len(sys.argv) < 5:
        fail("usage: check_ranks.py MANIFEST BATCH DIR WORLD...")
    man_path, B, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    worlds = [int(w) for w in sys.argv[4:]]
    man = load_manifest(man_path)
    shard_keys = []            # per shard, its keys in order
    label = {}
    for s in manifest_shards(man_path, man):
        ks = []
        for key, members in tar_samples(s):
            ks.append(key)
            label[key] = int(members["cls"].decode().strip())
        shard_keys.append(ks)
    N = sum(len(k) for k in shard_keys)
    check(N == len(label), "the shards hold a key twice")
    check(N == sum(e["nsamples"] for e in man["shardlist"]), "the manifest's counts are not the shards'")
    first_of = {ks[0]: i for i, ks in enumerate(shard_keys)}
    order0 = None
    for W in worlds:
        # keep: the whole data set, dealt in contiguous runs.
        runs = []
        nb_keep = -(-(-(-N // W)) // B)
        for R in range(W):
            path = os.path.join(d, "keep.%d.%d" % (W, R))
            rows = read_keys(path)
            sizes = batches(path, rows)
            want = N * (R + 1) // W - N * R // W
            check(len(rows) == want, "%s: %d samples, want floor(N(R+1)/W) - floor(NR/W) = %d"
                  % (path, len(rows), want))
            # A rank's last batch may be empty; keys prints nothing for it.
            check(len(sizes) in (nb_keep, nb_keep - 1) and all(s == B for s in sizes[:-1]),
                  "%s: batch sizes %s, want %d batches of %d but the last" % (path, sizes, nb_keep, B))
            check(-(-want // B) == len(sizes), "%s: %d batches for %d samples" % (path, len(sizes), want))
            for _, _, k, lab in rows:
                check(k in label, "%s: key %s is in no shard" % (path, k))
                check(lab == label[k], "%s: %s has label %d, its .cls says %d" % (path, k, lab, label[k]))
            runs.append([r[2] for r in rows])
        seq = [k for run in runs for k in run]
        check(len(seq) == N and len(set(seq)) == N,
              "keep, world %d: %d keys, %d distinct, want all %d once" % (W, len(seq), len(set(seq)), N))
        # The concatenation is whole shards, each in its own order.
        at, order = 0, []
        while at < N:
            check(seq[at] in first_of, "keep, world %d: position %d (%s) does not start a shard"
                  % (W, at, seq[at]))
            s = first_of[seq[at]]
            ks = shard_keys[s]
            check(seq[at:at + len(ks)] == ks, "keep, world %d: shard %d is not whole and in order at %d"
                  % (W, s, at))
            order.append(s)
            at += len(ks)
        check(sorted(order) == list(range(len(shard_keys))), "keep, world %d: shard order %s" % (W, order))
        if order0 is None:
            order0 = order
            check(len(order) < 3 or order != sorted(order),
                  "the shard order %s is not permuted" % order)
        check(order == order0, "keep, world %d: shard order %s, world %d had %s"
              % (W, order, worlds[0], order0))

        # drop: the first full batches of each run.
        nb = (N // W) // B
        union = []
        for R in range(W):
            path = os.path.join(d, "drop.%d.%d" % (W, R))
            rows = read_keys(path)
            sizes = batches(path, rows)
            check(sizes == [B] * nb, "%s: batch sizes %s, want %d full batches of %d (floor(floor(N/W)/B))"
                  % (path, sizes, nb, B))
            got = [r[2] for r in rows]
            check(got == runs[R][:nb * B], "%s: not the first %d keys of the rank's run" % (path, nb * B))
            union += got
        check(len(set(union)) == len(union), "drop, world %d: a key is delivered twice" % W)
        dropped = set(label) - set(union)
        want_dropped = set(k for run in runs for k in run[nb * B:])
        check(dropped == want_dropped, "drop, world %d: left out %s, want the runs' tails %s"
              % (W, sorted(dropped), sorted(want_dropped)))
        check(len(dropped) == N - W * nb * B, "drop, world %d: %d left out, want N - W*nb*B = %d"
              % (W, len(dropped), N - W * nb * B))

        # drop with a shuffle buffer: same counts, within the run, reordered.
        union, moved = [], False
        for R in range(W):
            path = os.path.join(d, "shuf.%d.%d" % (W, R))
            rows = read_keys(path)
            sizes = batches(path, rows)
            check(sizes == [B] * nb, "%s: batch sizes %s, want %d full batches of %d" % (path, sizes, nb, B))
            got = [r[2] for r in rows]
            check(set(got) <= set(runs[R]), "%s: keys from outside the rank's run: %s"
                  % (path, sorted(set(got) - set(runs[R]))[:5]))
            moved = moved or got != runs[R][:nb * B]
            union += got
        check(len(set(union)) == len(union), "shuffled drop, world %d: a key is delivered twice" % W)
        check(moved, "shuffled drop, world %d: --shuffle 16 changed no rank's order" % W)
        say("world %d: N=%d, B=%d: keep %s samples per rank, every key once; drop %d batches per rank, "
            "%d left out (the runs' tails)" % (W, N, B, [len(r) for r in runs], nb, len(dropped)))
    say("shard order %s, the same for every world size" % order0)


main()
