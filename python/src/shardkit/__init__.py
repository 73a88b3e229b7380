"""shardkit: WebDataset tar shards streamed into PyTorch by libshardkit.

    import torch, shardkit

    loader = shardkit.Loader("imagenet.json", batch_size=256, shuffle=8192)
    for images, labels, keys in loader:          # one epoch
        x = torch.from_dlpack(images)             # no copy
        y = torch.from_dlpack(labels).long()
        ...

The loader (reading shards from disk, http(s), gs:// or s3://, decoding,
augmenting, batching) runs in libshardkit's threads with the GIL
released; batches come out of its ring of slots without a copy, through
DLPack. Meter and verdict() say whether the loop is input-bound or
compute-bound, by shardtrain's rule.
"""

from ._shardkit import Array, Error, FormatError, LIBRARY_VERSION
from ._loader import IMAGENET_MEAN, IMAGENET_STD, Batch, Loader
from ._verdict import Meter, Verdict, measure_compute, measure_loader, \
    verdict

try:
    from importlib.metadata import version as _version
    __version__ = _version("shardkit")
except Exception:       # not installed (a build tree on PYTHONPATH)
    __version__ = LIBRARY_VERSION

__all__ = ["Loader", "Batch", "Array", "Error", "FormatError", "Meter",
           "Verdict", "verdict", "measure_loader", "measure_compute",
           "IMAGENET_MEAN", "IMAGENET_STD", "LIBRARY_VERSION"]
