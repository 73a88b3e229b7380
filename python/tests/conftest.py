"""What the shardkit package's tests share.

tests/cli/python.sh sets the scene and runs pytest: SK_DATA (a folder with
the shards in.json, in-000000.tar ...), SHARDLOAD (the C tool the batches
are checked against), and for the remote cases SK_HTTP_URL and
SK_HTTPS_URL (nginx serving SK_DATA's parent; SK_CA_FILE trusts the https
one) and SK_GS_MANIFEST with STORAGE_EMULATOR_HOST (the same shards in
gcp-storage-emulator).
"""

import os
import subprocess

import numpy as np
import pytest

import shardkit


def env(name):
    v = os.environ.get(name)
    if not v:
        pytest.skip("%s is not set (tests/cli/python.sh sets it)" % name)
    return v


@pytest.fixture
def data():
    return env("SK_DATA")


@pytest.fixture
def manifest(data):
    return os.path.join(data, "in.json")


@pytest.fixture
def pattern(data):
    return os.path.join(data, "in-{000000..000004}.tar")


# FNV-1a over each image's bytes, as "shardload keys --checksum" prints it,
# for all the images of a batch at once.
_FNV_PRIME = np.uint64(0x100000001b3)


def fnv1a_rows(rows):
    h = np.full(rows.shape[0], 0xcbf29ce484222325, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(rows.shape[1]):
            h ^= rows[:, j].astype(np.uint64)
            h *= _FNV_PRIME
    return h


def batch_lines(images, labels, keys, epoch, index):
    """The lines shardload keys --checksum prints for one batch."""
    a = np.from_dlpack(images)
    n = a.shape[0]
    rows = np.ascontiguousarray(a).view(np.uint8).reshape(n, -1)
    hashes = fnv1a_rows(rows)
    lab = np.from_dlpack(labels)
    return ["%d\t%d\t%d\t%s\t%d\t%016x" % (epoch, index, i, keys[i],
                                            int(lab[i]), int(hashes[i]))
            for i in range(n)]


SL_OPTS = {
    "batch_size": "--batch", "image_size": "--image-size",
    "shuffle": "--shuffle", "seed": "--seed", "epochs": "--epochs",
    "epoch": "--epoch", "rank": "--rank", "world": "--world",
    "workers": "--workers", "io_streams": "--io-streams",
    "crop": "--crop", "ring": "--ring",
}


def shardload_keys(source, extra=(), **opts):
    """shardload keys --checksum with the Loader's options."""
    args = [env("SHARDLOAD"), "keys", source, "--checksum"]
    dtype = opts.pop("dtype", "uint8")
    layout = opts.pop("layout", "NHWC")
    args += ["--dtype", {"uint8": "u8", "float32": "f32",
                         "bfloat16": "bf16", "float16": "f16"}[dtype],
             "--layout", layout.lower()]
    if not opts.pop("flip", True):
        args.append("--no-flip")
    for k, v in opts.items():
        args += [SL_OPTS[k], str(v)]
    args += list(extra)
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def loader_lines(source, **opts):
    """Every batch of every epoch of a Loader, as keys --checksum lines."""
    opts.setdefault("dtype", "uint8")
    opts.setdefault("layout", "NHWC")
    lines = []
    with shardkit.Loader(source, **opts) as lo:
        for _ in range(opts.get("epochs", 1)):
            for b in lo:
                lines += batch_lines(*b, b.epoch, b.index)
    return lines
