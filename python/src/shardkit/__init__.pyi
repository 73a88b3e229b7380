# Type hints for the shardkit package.
import os
from typing import (Any, Dict, Iterator, List, Optional, Sequence, Tuple,
                    Union)

__version__: str
LIBRARY_VERSION: str
IMAGENET_MEAN: Tuple[float, float, float]
IMAGENET_STD: Tuple[float, float, float]

class Error(RuntimeError): ...
class FormatError(Error): ...

class Array:
    """One tensor of a batch in the loader's memory (DLPack)."""
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def kept(self) -> bool: ...
    def __dlpack__(self, *, stream: Optional[int] = ...,
                   max_version: Optional[Tuple[int, int]] = ...,
                   dl_device: Optional[Tuple[int, int]] = ...,
                   copy: Optional[bool] = ...) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class Batch(Tuple[Optional[Array], Array, List[str]]):
    epoch: int
    index: int
    @property
    def images(self) -> Optional[Array]: ...
    @property
    def labels(self) -> Array: ...
    @property
    def keys(self) -> List[str]: ...

Source = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

class Loader:
    note: Optional[str]
    def __init__(self, source: Source, *, batch_size: int,
                 image_size: int = ..., crop: str = ...,
                 scale: Tuple[float, float] = ...,
                 ratio: Tuple[float, float] = ...,
                 resize: Optional[int] = ..., flip: bool = ...,
                 mean: Sequence[float] = ..., std: Sequence[float] = ...,
                 dtype: Any = ..., layout: str = ..., shuffle: int = ...,
                 seed: int = ..., epochs: int = ..., epoch: int = ...,
                 rank: Optional[int] = ..., world: Optional[int] = ...,
                 workers: Optional[int] = ..., io_streams: int = ...,
                 prefetch: int = ..., ring: Optional[int] = ...,
                 device: Union[None, str, int] = ..., drop_last: bool = ...,
                 strict: bool = ..., form: str = ...,
                 max_pixels: Optional[int] = ...,
                 max_sample_size: Optional[int] = ..., decode: bool = ...,
                 connections: Optional[int] = ..., parts: Optional[int] = ...,
                 part_size: Optional[int] = ...,
                 connect_timeout: Optional[float] = ...,
                 stall_timeout: Optional[float] = ...,
                 retry_time: Optional[float] = ...,
                 attempts: Optional[int] = ...,
                 ca_file: Union[None, str, os.PathLike] = ...,
                 no_sign_request: Optional[bool] = ...,
                 allow_cross_origin: Optional[bool] = ...) -> None: ...
    def __iter__(self) -> Iterator[Batch]: ...
    def __len__(self) -> int: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Dict[str, Any]) -> None: ...
    def stats(self) -> Dict[str, Any]: ...
    @property
    def workers(self) -> int: ...
    @property
    def ring(self) -> Optional[int]: ...
    @property
    def epoch(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Loader": ...
    def __exit__(self, *exc: Any) -> None: ...

class Verdict:
    verdict: str
    wait_share: float
    images_per_second: float
    loader_ips: Optional[float]
    compute_ips: Optional[float]
    reason: str
    hint: str
    steps: int
    wait_seconds: float
    step_seconds: float

def verdict(wait_seconds: float, step_seconds: float, images: int, *,
            loader_ips: Optional[float] = ...,
            compute_ips: Optional[float] = ...,
            bound_stage: Optional[str] = ..., steps: int = ...) -> Verdict: ...

class Meter:
    steps: int
    images: int
    wait_seconds: float
    step_seconds: float
    def __init__(self, warmup: int = ...) -> None: ...
    def reset(self) -> None: ...
    def iterate(self, loader: Any) -> Iterator[Batch]: ...
    def verdict(self, *, loader_ips: Optional[float] = ...,
                compute_ips: Optional[float] = ...) -> Verdict: ...

def measure_loader(source: Source, *, batches: int = ...,
                   **options: Any) -> float: ...
def measure_compute(step: Any, batch: Any, *, steps: int = ...,
                    warmup: int = ...) -> float: ...
