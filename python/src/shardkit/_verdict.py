"""Input-bound or compute-bound: shardtrain's verdict for a PyTorch loop.

The rule and its thresholds are libshardkit's (sk_verdict_decide), the
ones shardtrain applies; this module only gathers the loop's timings.
"""

import dataclasses
import time

from . import _shardkit as _c

__all__ = ["Meter", "Verdict", "verdict", "measure_loader",
           "measure_compute"]


def _ips(v):
    if v is None or v < 0:
        return "n/a"
    return "%.0f" % v if v >= 100 else "%.1f" % v


@dataclasses.dataclass
class Verdict:
    """What a training loop was bound by, and why.

    verdict: "input-bound", "compute-bound" or "balanced".
    wait_share: the share of step time spent waiting for data.
    images_per_second: what the loop reached.
    loader_ips, compute_ips: the loader alone and the compute alone, in
    images/s (None: not measured).
    reason, hint: the evidence and what to change, as shardtrain words
    them.
    """
    verdict: str
    wait_share: float
    images_per_second: float
    loader_ips: object
    compute_ips: object
    reason: str
    hint: str
    steps: int = 0
    wait_seconds: float = 0.0
    step_seconds: float = 0.0

    def __str__(self):
        return ("%s\n  %s\n  %s images/s over %d steps\n  hint: %s"
                % (self.verdict.upper(), self.reason,
                   _ips(self.images_per_second), self.steps, self.hint))


def verdict(wait_seconds, step_seconds, images, *, loader_ips=None,
            compute_ips=None, bound_stage=None, steps=0):
    """The verdict from a loop's timings.

    wait_seconds: time spent waiting for batches; step_seconds: the
    loop's whole time (waits included); images: images trained on.
    loader_ips: images/s the loader reaches alone (measure_loader);
    compute_ips: images/s the step reaches on a batch already in memory
    (measure_compute); bound_stage: the loader's slowest stage
    (Loader.stats()["bound"]) for the hint.
    """
    if step_seconds <= 0:
        raise ValueError("step_seconds=%r: need a positive time"
                         % (step_seconds,))
    if wait_seconds < 0 or wait_seconds > step_seconds * 1.000001:
        raise ValueError("wait_seconds=%r: need 0 <= wait <= step "
                         "seconds (%r)" % (wait_seconds, step_seconds))
    share = wait_seconds / step_seconds
    lips = -1.0 if loader_ips is None else float(loader_ips)
    cips = -1.0 if compute_ips is None else float(compute_ips)
    v = _c.verdict_decide(share, lips, cips, False)
    if lips >= 0 and cips > 0:
        ratio = lips / cips
        cmp = "loader alone %s img/s %s compute alone %s img/s" % (
            _ips(lips), "<" if ratio < _c.VERDICT_RATIO_INPUT else
            ">" if ratio >= _c.VERDICT_RATIO_COMPUTE else "~", _ips(cips))
    elif cips > 0:
        cmp = "compute alone %s img/s; loader ceiling unknown" % _ips(cips)
    elif lips >= 0:
        cmp = "loader alone %s img/s; compute ceiling unknown" % _ips(lips)
    else:
        cmp = "ceilings not measured"
    reason = "data wait %.1f%% of step time; %s" % (share * 100, cmp)
    if v == "input-bound":
        if bound_stage == "io":
            hint = ("more io_streams, a bigger prefetch (or more parts "
                    "and connections for a remote source), or the shards "
                    "closer (local disk)")
        elif bound_stage == "decode":
            hint = ("more loader workers, or pre-resized shards "
                    "(shardtool pack --resize-short N)")
        else:
            hint = ("more loader workers or io_streams; "
                    "Loader.stats()['bound'] names the slow stage")
    elif v == "compute-bound":
        hint = ("the input has headroom: a bigger batch, more ranks, or "
                "a faster step (bf16, torch.compile, a GPU)")
    else:
        hint = ("input and compute are close: raise the input first "
                "(workers, io_streams), or a faster step will only wait "
                "on it")
    return Verdict(v, share, images / step_seconds if step_seconds else 0,
                   None if lips < 0 else lips, None if cips < 0 else cips,
                   reason, hint, steps, wait_seconds, step_seconds)


class Meter:
    """Time a training loop's data wait and steps.

        meter = shardkit.Meter()
        for images, labels, keys in meter.iterate(loader):
            ...one training step...
        print(meter.verdict(loader_ips=..., compute_ips=...))

    A step runs from the end of one batch's wait to the end of the next's;
    the first ``warmup`` steps (the pipeline filling, the first CUDA
    calls) are left out. For a GPU step, synchronize (e.g. ``loss.item()``)
    inside the step, or the wait will absorb the step's time.
    """

    def __init__(self, warmup=2):
        self.warmup = warmup
        self.reset()

    def reset(self):
        self.steps = 0
        self.images = 0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self._seen = 0
        self._bound = None

    def iterate(self, loader):
        """Yield loader's batches, timing the waits for them."""
        it = iter(loader)
        t_prev = None
        while True:
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                if t_prev is not None and self._seen > self.warmup:
                    # the step of the last batch ended when the
                    # iterator was asked for more
                    self.step_seconds += t0 - t_prev
                    self.steps += 1
                    self.images += self._last_n
                return
            t1 = time.perf_counter()
            if t_prev is not None and self._seen > self.warmup:
                self.step_seconds += t1 - t_prev
                self.wait_seconds += t1 - t0
                self.steps += 1
                self.images += self._last_n
            self._seen += 1
            self._last_n = len(b[2])
            t_prev = t1
            if hasattr(loader, "stats"):
                self._loader = loader
            yield b

    def verdict(self, *, loader_ips=None, compute_ips=None):
        """The verdict over the steps timed so far."""
        if self.steps == 0:
            raise ValueError("Meter.verdict(): no step was timed (the "
                             "first %d are warm-up)" % self.warmup)
        bound = None
        lo = getattr(self, "_loader", None)
        if lo is not None:
            try:
                bound = lo.stats()["bound"]
            except ValueError:
                pass
        return verdict(self.wait_seconds, self.step_seconds, self.images,
                       loader_ips=loader_ips, compute_ips=compute_ips,
                       bound_stage=bound, steps=self.steps)


def measure_loader(source, *, batches=20, **options):
    """Images/s the loader reaches alone (nothing but the loader running):
    the input's ceiling, as shardtrain measures it before training. Give
    the options the training loader has."""
    from ._loader import Loader
    options.setdefault("epochs", 1)
    with Loader(source, **options) as lo:
        n = 0
        t0 = None
        got = 0
        for images, labels, keys in lo:
            if t0 is None:
                t0 = time.perf_counter()   # the pipeline is warm now
            else:
                n += len(keys)
            got += 1
            if got > batches:
                break
        t = time.perf_counter() - t0 if t0 is not None else 0
    if n == 0 or t <= 0:
        raise ValueError("measure_loader: the source gave fewer than two "
                         "batches")
    return n / t


def measure_compute(step, batch, *, steps=10, warmup=2):
    """Images/s of step(batch) on one batch already in memory, called
    steps times after warmup calls: the compute's ceiling. step must
    finish its work before it returns (synchronize a GPU)."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError("measure_compute: batch must be (images, labels, "
                         "keys) or (images, labels)")
    size = len(batch[-1])
    for _ in range(warmup):
        step(batch)
    t0 = time.perf_counter()
    for _ in range(steps):
        step(batch)
    return size * steps / (time.perf_counter() - t0)
