"""shardkit.Loader: libshardkit's streaming loader as a Python iterable."""

import numbers
import os
import time
import warnings
import weakref

from . import _shardkit as _c

__all__ = ["Loader", "Batch", "IMAGENET_MEAN", "IMAGENET_STD"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# The names shardload takes, in the order of libshardkit's enums.
_CROPS = ("random-resized", "center", "none")
_DTYPES = {"uint8": 0, "u8": 0, "float32": 1, "f32": 1, "bfloat16": 2,
           "bf16": 2, "float16": 3, "f16": 3, "half": 3, "float": 1}
_LAYOUTS = {"nhwc": 0, "nchw": 1}
_FORMS = ("auto", "shards", "files")

class Batch(tuple):
    """One batch, a tuple (images, labels, keys): images and labels are
    shardkit.Array objects that torch.from_dlpack and numpy.from_dlpack
    take without a copy (images is None with decode=False), keys the
    samples' keys. batch.epoch and batch.index say where it sits."""

    def __new__(cls, images, labels, keys, epoch=0, index=0):
        b = super().__new__(cls, (images, labels, keys))
        b.epoch = epoch
        b.index = index
        return b

    images = property(lambda self: self[0], doc="the images (Array)")
    labels = property(lambda self: self[1], doc="the labels (Array, int32)")
    keys = property(lambda self: self[2], doc="the samples' keys (list)")

    def __repr__(self):
        return "shardkit.Batch(epoch=%d, index=%d, n=%d)" % (
            self.epoch, self.index, len(self[2]))

# Every open loader, so that the interpreter's exit stops their threads.
_live = weakref.WeakSet()


def _close_all():
    for lo in list(_live):
        try:
            lo.close()
        except Exception:
            pass


import atexit  # noqa: E402

atexit.register(_close_all)


def _one_of(names):
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


def _whole(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s=%r: not a whole number from %d to %d"
                        % (name, v, lo, hi))
    if not lo <= v <= hi:
        raise ValueError("%s=%r: not a whole number from %d to %d"
                         % (name, v, lo, hi))
    return int(v)


def _real(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError("%s=%r: not a number from %g to %g"
                        % (name, v, lo, hi))
    if not lo <= v <= hi:
        raise ValueError("%s=%r: not a number from %g to %g"
                         % (name, v, lo, hi))
    return float(v)


def _reals(name, v, n):
    try:
        t = tuple(float(x) for x in v)
    except TypeError:
        raise TypeError("%s=%r: need %d numbers" % (name, v, n)) from None
    if len(t) != n:
        raise ValueError("%s=%r: need %d numbers" % (name, v, n))
    return t


def _env_int(name, lo, hi):
    s = os.environ.get(name)
    if s is None or s == "":
        return None
    try:
        v = int(s)
    except ValueError:
        v = None
    if v is None or not lo <= v <= hi:
        raise ValueError("%s=%r in the environment: not a whole number "
                         "from %d to %d" % (name, s, lo, hi))
    return v


def _cpus_per_rank():
    """The CPUs this process may use, shared among this node's ranks
    (torchrun's LOCAL_WORLD_SIZE), as shardload counts them."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    local = _env_int("LOCAL_WORLD_SIZE", 1, _c.MAX_RANKS) or 1
    return max(1, min(_c.MAX_WORKERS, n // local))


def _is_manifest(source):
    """NAME.json, before any query of an http(s) URL (a signed URL)."""
    s = source
    if s.startswith(("http://", "https://")):
        s = s.split("?", 1)[0]
    return s.endswith(".json")


def _dtype_code(dtype):
    if dtype is None:
        raise TypeError("dtype=None: not one of float32, bfloat16, "
                        "float16 or uint8")
    name = str(dtype)
    if name.startswith("torch."):   # torch.float32 and the like
        name = name[6:]
    code = _DTYPES.get(name.lower())
    if code is None:
        raise ValueError("dtype=%r: not one of float32, bfloat16, float16 "
                         "or uint8" % (dtype,))
    return code


def _device_index(device):
    if device is None:
        return -1
    s = str(device)
    if s == "cpu":
        return -1
    if s == "cuda":     # this rank's GPU under torchrun
        return _env_int("LOCAL_RANK", 0, 1024) or 0
    if s.startswith("cuda:"):
        try:
            return _whole("device", int(s[5:]), 0, 1024)
        except ValueError:
            pass
    elif isinstance(device, numbers.Integral) and not isinstance(device,
                                                                 bool):
        return _whole("device", device, 0, 1024)
    raise ValueError("device=%r: not 'cpu', 'cuda' or 'cuda:N'" % (device,))


class Loader:
    """Stream batches from WebDataset tar shards, or a folder of class
    folders of images, into a PyTorch (or NumPy) loop.

    ``Loader(source, *, batch_size, ...)`` takes what ``shardload`` takes,
    under Python names, with shardload's limits and messages:

    source
        A manifest (NAME.json, as ``shardtool pack`` writes it: sample
        counts come from it), a shard pattern (``data-{000000..000146}.tar``,
        ``::`` joins patterns), a folder of .tar files, or a
        class-per-folder tree of images (``form="files"``); on local
        disk, ``http(s)://``, ``gs://`` or ``s3://``. A list of URLs is
        joined with ``::``.
    batch_size
        Samples per batch on this rank (1 to MAX_BATCH).
    image_size, crop, scale, ratio, resize, flip
        The augmentation: crop is "random-resized" (torchvision's
        RandomResizedCrop with scale and ratio), "center" (resize the short
        side to resize, default image_size * 8 / 7, then crop) or "none".
    dtype, layout, mean, std
        The pixels: "float32" (default), "bfloat16", "float16" (all
        normalized, (v / 255 - mean) / std) or "uint8"; "NCHW" (default)
        or "NHWC". shardload's own defaults are uint8 NHWC; a PyTorch model
        takes float NCHW.
    shuffle
        A shuffle buffer of this many samples (0: the seeded shard order
        only, shardload's default).
    seed, epochs, epoch
        Fix, with the ranks and the options, every key and pixel of every
        batch, whatever the thread counts.
    rank, world
        This rank and the ranks in all: by default torch.distributed's
        RANK and WORLD_SIZE when set, else 0 and 1. Every rank yields the
        same number of batches.
    workers, io_streams, prefetch, ring
        Decode threads (this rank's share of the CPUs), shards read at
        once (2), bytes read ahead, batch slots.
    ahead, max_inflight
        Remote shards each I/O stream opens ahead of the one it reads, 0
        to 16: 0 finds the number during the run while the streams wait
        on the network, within ``max_inflight`` bytes of parts in flight
        (256 MiB); see shardload(1), --ahead. The default is 0, or 1 when
        ``io_streams``, ``parts`` or ``part_size`` is given, as shardload
        does.
    device
        "cuda:N" (or "cuda": torchrun's LOCAL_RANK, else 0): batches are
        copied to that GPU and converted there; the
        images Array lives on the GPU, and ``torch.from_dlpack`` makes the
        current stream wait for the copy. Its device memory goes back to
        the loader when the last tensor made from it is freed: work still
        queued on another stream that reads it must be done by then (as
        after ``loss.item()``).
    drop_last
        Leave out (True, default) or keep in short last batches the
        samples that do not fill a batch on every rank.
    strict
        A bad sample or damaged shard raises (``shardkit.FormatError``)
        instead of being skipped and counted.
    form, max_pixels, max_sample_size, decode
        What source holds ("auto", "shards", "files"), the decompression
        bomb limit, the largest sample read, and whether to decode at all.
    connections, parts, part_size, connect_timeout, stall_timeout,
    retry_time, attempts, ca_file, no_sign_request, allow_cross_origin
        The fetch engine's options for remote sources. There is one engine
        per process: they apply to every loader in it. A manifest from the
        network may name only shards on its own origin (scheme, host and
        port, or its bucket) unless ``allow_cross_origin`` is true.

    Iterating gives one epoch of ``Batch(images, labels, keys)``; the next
    ``for`` loop the next epoch, until ``epochs`` are done. ``len(loader)``
    is the batches per epoch. A batch's memory is a slot of the loader's
    ring, handed over without a copy; it goes back when the last Array and
    tensor made from it are gone. Holding more batches than the ring has
    slots is allowed: the oldest held batch then leaves the ring with its
    memory (``stats()["kept"]`` counts them).

    ``note`` is the line the tools print about a source the user may not
    expect, or None: a folder of .tar files that also holds a manifest is
    read as its .tar files, and the note names the manifest. It is also
    given once as a ``UserWarning`` when the loader opens.
    """

    def __init__(self, source, *, batch_size, image_size=224,
                 crop="random-resized", scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), resize=None, flip=True,
                 mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype="float32",
                 layout="NCHW", shuffle=0, seed=0, epochs=1, epoch=0,
                 rank=None, world=None, workers=None, io_streams=None,
                 prefetch=64 << 20, ring=None, device=None, drop_last=True,
                 strict=False, form="auto", max_pixels=None,
                 max_sample_size=None, decode=True, connections=None,
                 parts=None, part_size=None, connect_timeout=None,
                 stall_timeout=None, retry_time=None, attempts=None,
                 ca_file=None, no_sign_request=None,
                 allow_cross_origin=None, ahead=None, max_inflight=None):
        if isinstance(source, (list, tuple)):
            if not source:
                raise ValueError("source: an empty list")
            source = "::".join(os.fspath(s) for s in source)
        elif isinstance(source, os.PathLike):
            source = os.fspath(source)
        if not isinstance(source, str) or source == "":
            raise TypeError("source=%r: need a path, URL, pattern or "
                            "manifest" % (source,))
        cfg = {}
        cfg["manifest" if _is_manifest(source) else "urls"] = source
        if form not in _FORMS:
            raise ValueError("form=%r: not one of %s" % (form,
                                                        _one_of(_FORMS)))
        cfg["form"] = _FORMS.index(form)
        cfg["batch"] = _whole("batch_size", batch_size, 1, _c.MAX_BATCH)
        cfg["epochs"] = _whole("epochs", epochs, 1, _c.MAX_EPOCHS)
        cfg["epoch"] = _whole("epoch", epoch, 0, _c.MAX_EPOCH)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) \
                or not 0 <= seed < 1 << 64:
            raise ValueError("seed=%r: not a whole number from 0 to %d"
                             % (seed, (1 << 64) - 1))
        cfg["seed"] = int(seed)
        cfg["shuffle"] = _whole("shuffle", shuffle, 0, _c.MAX_SHUFFLE)
        cfg["strict"] = int(bool(strict))
        if max_pixels is not None:
            cfg["max_pixels"] = _whole("max_pixels", max_pixels, 1,
                                       10 ** 15)
        if max_sample_size is not None:
            cfg["max_sample_bytes"] = _whole("max_sample_size",
                                             max_sample_size, 1, 1 << 40)
        cfg["workers"] = (_cpus_per_rank() if workers is None else
                          _whole("workers", workers, 1, _c.MAX_WORKERS))
        cfg["io_streams"] = (2 if io_streams is None else
                             _whole("io_streams", io_streams, 1,
                                    _c.MAX_IO_STREAMS))
        if ahead is None:
            fixed = (io_streams, parts, part_size)
            ahead = 0 if all(v is None for v in fixed) else 1
        cfg["ahead"] = _whole("ahead", ahead, 0, _c.MAX_AHEAD)
        if max_inflight is not None:
            cfg["max_inflight"] = _whole("max_inflight", max_inflight,
                                         1 << 20, 1 << 40)
        cfg["prefetch_bytes"] = _whole("prefetch", prefetch, 1, 1 << 40)
        if ring is not None:
            cfg["ring"] = _whole("ring", ring, _c.MIN_RING, _c.MAX_RING)
        cfg["image_size"] = _whole("image_size", image_size, 1,
                                   _c.MAX_IMAGE_SIZE)
        if crop not in _CROPS:
            raise ValueError("crop=%r: not one of %s" % (crop,
                                                        _one_of(_CROPS)))
        cfg["crop"] = _CROPS.index(crop)
        sc = _reals("scale", scale, 2)
        if not (0 < sc[0] <= sc[1] <= 1):
            raise ValueError("scale=%g,%g: need 0 < A <= B <= 1" % sc)
        ra = _reals("ratio", ratio, 2)
        if not (0 < ra[0] <= ra[1]):
            raise ValueError("ratio=%g,%g: need 0 < A <= B" % ra)
        cfg["scale"], cfg["ratio"] = sc, ra
        if resize is not None:
            cfg["resize"] = _whole("resize", resize, 1, _c.MAX_RESIZE)
            if crop == "center" and resize < image_size:
                raise ValueError("resize=%d is smaller than image_size=%d"
                                 % (resize, image_size))
        cfg["flip"] = int(bool(flip))
        cfg["dtype"] = _dtype_code(dtype)
        lay = str(layout).lower()
        if lay not in _LAYOUTS:
            raise ValueError("layout=%r: not one of NCHW or NHWC"
                             % (layout,))
        cfg["layout"] = _LAYOUTS[lay]
        cfg["mean"] = _reals("mean", mean, 3)
        cfg["std"] = _reals("std", std, 3)
        if 0 in cfg["std"]:
            raise ValueError("std: a component is 0")
        cfg["decode"] = int(bool(decode))
        cfg["device"] = _device_index(device)
        cfg["remainder"] = 0 if drop_last else 1
        env_rank = _env_int("RANK", 0, _c.MAX_RANKS - 1)
        env_world = _env_int("WORLD_SIZE", 1, _c.MAX_RANKS)
        cfg["rank"] = (_whole("rank", rank, 0, _c.MAX_RANKS - 1)
                       if rank is not None else env_rank or 0)
        cfg["world"] = (_whole("world", world, 1, _c.MAX_RANKS)
                        if world is not None else env_world or 1)
        if cfg["rank"] >= cfg["world"]:
            raise ValueError("rank=%d is not below world=%d"
                             % (cfg["rank"], cfg["world"]))
        fetch = {}
        if connections is not None:
            fetch["connections"] = _whole("connections", connections, 1,
                                          _c.MAX_CONNECTIONS)
        if parts is not None:
            fetch["parts"] = _whole("parts", parts, 1, _c.MAX_PARTS)
        if part_size is not None:
            fetch["part_size"] = _whole("part_size", part_size,
                                        _c.MIN_PART_SIZE, _c.MAX_PART_SIZE)
        if connect_timeout is not None:
            fetch["connect_timeout"] = _real(
                "connect_timeout", connect_timeout,
                _c.MIN_CONNECT_TIMEOUT, _c.MAX_TIMEOUT)
        if stall_timeout is not None:
            fetch["stall_timeout"] = _real("stall_timeout", stall_timeout,
                                           _c.MIN_STALL_TIMEOUT,
                                           _c.MAX_TIMEOUT)
        if retry_time is not None:
            fetch["retry_time"] = _real("retry_time", retry_time, 0,
                                        _c.MAX_RETRY_TIME)
        if attempts is not None:
            fetch["attempts"] = _whole("attempts", attempts, 1,
                                       _c.MAX_ATTEMPTS)
        if ca_file is not None:
            fetch["ca_file"] = os.fspath(ca_file)
        if no_sign_request is not None:
            fetch["no_sign"] = int(bool(no_sign_request))
        if allow_cross_origin is not None:
            fetch["allow_cross_origin"] = int(bool(allow_cross_origin))
        if fetch:
            _c.fetch_configure(fetch)

        self._cfg = cfg
        self._source = source
        self._end_epoch = cfg["epoch"] + cfg["epochs"]
        self._c = None
        self._open(cfg["epoch"], 0)
        # What the tools print after opening, said once, as a warning:
        # a folder read as its .tar files that also holds a manifest.
        self.note = self._c.note
        if self.note is not None:
            warnings.warn(self.note, UserWarning, stacklevel=2)

    # -- the C loader -----------------------------------------------------

    def _open(self, epoch, batch):
        cfg = dict(self._cfg)
        cfg["epoch"] = epoch
        cfg["epochs"] = self._end_epoch - epoch
        cfg["resume_batch"] = batch
        t0 = time.monotonic()
        fetch0 = _c.fetch_stats()
        c = _c._Loader(cfg)
        if self._c is not None:
            self._c.close()
        self._c = c
        self._t0 = t0
        self._fetch0 = fetch0
        self._t_first = None
        self._first_n = 0
        st = c.stats()
        self._bpe = st["batches_per_epoch"]
        self._pending = None
        self._cur_epoch = None      # the epoch an iterator is in
        self._epoch_done = True
        self._next = (epoch, batch)  # what the next batch will be
        self._done = epoch >= self._end_epoch
        _live.add(self)

    def _take(self):
        """The next (images, labels, keys, epoch, index), or None."""
        if self._pending is not None:
            b, self._pending = self._pending, None
            return b
        if self._done:
            return None
        if self._c is None:
            raise ValueError("the loader is closed")
        b = self._c.next()
        if b is None:
            self._done = True
            return None
        if self._t_first is None:
            self._t_first = time.monotonic()
            self._first_n = len(b[2])
        return b

    def _advance(self, epoch, index):
        if self._bpe > 0 and index + 1 >= self._bpe:
            self._next = (epoch + 1, 0)
        else:
            self._next = (epoch, index + 1)

    def __iter__(self):
        # what an earlier iterator left of its epoch is skipped
        while not self._epoch_done:
            b = self._take()
            if b is None:
                break
            if b[3] != self._cur_epoch:
                self._pending = b
                break
            self._advance(b[3], b[4])
            if self._bpe > 0 and b[4] + 1 >= self._bpe:
                break
        b = None
        self._epoch_done = True
        return self._epoch()

    def _epoch(self):
        b = self._take()
        if b is None:
            return
        epoch = self._cur_epoch = b[3]
        self._epoch_done = False
        while True:
            images, labels, keys, e, index = b
            b = None
            self._advance(e, index)
            last = self._bpe > 0 and index + 1 >= self._bpe
            if last:
                self._epoch_done = True
            yield Batch(images, labels, keys, e, index)
            del images, labels, keys
            if last:
                return
            b = self._take()
            if b is None or b[3] != epoch:
                self._pending = b
                self._epoch_done = True
                return

    def __len__(self):
        if self._bpe < 0:
            raise TypeError("len(): the source has no sample counts (a "
                            "pattern without a manifest)")
        return self._bpe

    # -- state ------------------------------------------------------------

    def state_dict(self):
        """Where the next batch comes from: {"epoch", "batch"} and what
        must match to resume there (seed, world, rank, batch_size,
        source)."""
        return {"epoch": self._next[0], "batch": self._next[1],
                "seed": self._cfg["seed"], "world": self._cfg["world"],
                "rank": self._cfg["rank"], "batch_size": self._cfg["batch"],
                "source": self._source}

    def load_state_dict(self, state):
        """Go on from state_dict()'s point: the batches from there on are
        exactly those an uninterrupted run would have given. Batches held
        now stay valid."""
        try:
            epoch, batch = int(state["epoch"]), int(state["batch"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("state: need the 'epoch' and 'batch' of "
                             "Loader.state_dict()") from None
        for k, mine in (("seed", self._cfg["seed"]),
                        ("world", self._cfg["world"]),
                        ("rank", self._cfg["rank"]),
                        ("batch_size", self._cfg["batch"])):
            if k in state and state[k] != mine:
                raise ValueError("state: %s %r, but this loader has %r: "
                                 "the batches would differ"
                                 % (k, state[k], mine))
        if batch < 0 or epoch < self._cfg["epoch"] or \
                (self._bpe > 0 and batch > self._bpe) or \
                epoch > self._end_epoch:
            raise ValueError("state: epoch %d batch %d is outside this "
                             "loader's epochs %d..%d"
                             % (epoch, batch, self._cfg["epoch"],
                                self._end_epoch - 1))
        if self._bpe > 0 and batch == self._bpe:
            epoch, batch = epoch + 1, 0
        self._open(epoch, batch)

    # -- measures ---------------------------------------------------------

    def stats(self):
        """The numbers ``shardload bench --json`` reports as "result",
        under its key names, for this loader since it opened (or since
        load_state_dict), and "kept": batches held past the ring."""
        if self._c is None:
            raise ValueError("the loader is closed")
        s = self._c.stats()
        now = time.monotonic()
        wall = now - self._t0
        steady = now - self._t_first if self._t_first is not None else 0
        f1 = _c.fetch_stats()
        f0 = self._fetch0
        remote = {k: s[k] for k in ("ahead", "ahead_peak", "ahead_cap")}
        remote.update({k: f1[k] - f0[k] for k in
                       ("bytes", "requests", "retries")})
        remote["retries_by_cause"] = {
            k: f1["retries_by_cause"][k] - f0["retries_by_cause"][k]
            for k in _c.RETRY_CAUSES}
        for k in ("resumes", "refetched_bytes", "failures"):
            remote[k] = f1[k] - f0[k]
        n = f1["ttfb_count"] - f0["ttfb_count"]
        remote["mean_ttfb_seconds"] = (
            (f1["ttfb_seconds"] - f0["ttfb_seconds"]) / n if n else None)
        remote["network_wait_seconds"] = f1["wait_seconds"] - \
            f0["wait_seconds"]
        return {
            "samples": s["samples"],
            "batches": s["batches"],
            "bytes": s["bytes"],
            "sample_bytes": s["sample_bytes"],
            "skipped": s["skipped"],
            "skipped_by_reason": s["skipped_by_reason"],
            "dropped": s["dropped"],
            "unplanned": s["unplanned"],
            "mismatched_shards": s["mismatched_shards"],
            "batches_per_epoch": s["batches_per_epoch"],
            "wall_seconds": wall,
            "images_per_second": s["samples"] / wall if wall > 0 else 0.0,
            "steady_images_per_second":
                (s["samples"] - self._first_n) / steady if steady > 0
                else 0.0,
            "bytes_per_second": s["bytes"] / wall if wall > 0 else 0.0,
            "bound": s["bound"],
            "bound_share": s["bound_share"],
            "stage_seconds": {k: s[k] for k in (
                "io_busy", "io_blocked", "input_wait", "decode_busy",
                "decode_idle", "ring_wait", "consumer_wait")},
            "memory_bound_bytes": s["memory_bound"],
            "peak_rss_bytes": _peak_rss(),
            "remote": remote,
            "kept": s["kept"],
        }

    @property
    def workers(self):
        """Decode threads."""
        return self._cfg["workers"]

    @property
    def ring(self):
        """Batch slots."""
        return self._c.stats()["ring"] if self._c is not None else None

    @property
    def epoch(self):
        """The epoch the next batch belongs to."""
        return self._next[0]

    # -- closing ----------------------------------------------------------

    def close(self):
        """Stop the loader's threads and free its ring. Batches still held
        keep their memory until they are gone. Closing twice is fine."""
        if self._c is not None:
            # refused while another thread waits in next(): still open
            self._c.close()
        self._c = None
        self._pending = None
        self._done = True
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        c = getattr(self, "_c", None)
        if c is not None:
            c.close()

    def __repr__(self):
        if not hasattr(self, "_next"):
            return "shardkit.Loader(not opened)"
        return ("shardkit.Loader(%r, batch_size=%d, epoch %d of %d..%d%s)"
                % (self._source, self._cfg["batch"], self._next[0],
                   self._cfg["epoch"], self._end_epoch - 1,
                   ", closed" if self._c is None else ""))


def _peak_rss():
    """The process's peak resident set (VmHWM), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
