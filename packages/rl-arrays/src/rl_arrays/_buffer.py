"""Buffers: (named) tuples of arrays or tensors, allocated and converted as one structure.

A buffer is ``None``, an array/tensor leaf, or a tuple (plain, namedtuple, namedarraytuple,
or their schema forms) of buffers.  Every function here returns a matching structure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._collections import (
    NamedArrayTupleSchema_like,
    is_schema_form,
    namedarraytuple,
    namedarraytuple_like,
    tuple_like,
)
from ._counts import as_count
from ._shared_memory import np_mp_array
from ._torch import is_tensor, require_torch

if TYPE_CHECKING:
    import torch
    from numpy.typing import ArrayLike
    from torch.types import Device

__all__ = [
    "buffer_from_example",
    "buffer_func",
    "buffer_method",
    "buffer_to",
    "build_array",
    "get_leading_dims",
    "numpify_buffer",
    "torchify_buffer",
]


def _map(func: Callable[[Any], Any], buffer_: Any) -> Any:
    """Apply ``func`` to every leaf, keeping the structure and its ``None`` fields."""
    if buffer_ is None:
        return None
    if isinstance(buffer_, tuple):
        contents = [_map(func, item) for item in buffer_]
        return tuple_like(buffer_, contents)
    return func(buffer_)


def _leaves(buffer_: Any, path: str = "buffer") -> list[tuple[str, Any]]:
    """Every non-None leaf with a readable path, for error messages."""
    if buffer_ is None:
        return []
    if isinstance(buffer_, tuple):
        names = getattr(buffer_, "_fields", None) or [f"[{i}]" for i in range(len(buffer_))]
        return [
            leaf
            for name, item in zip(names, buffer_, strict=True)
            for leaf in _leaves(item, f"{path}{'' if name.startswith('[') else '.'}{name}")
        ]
    return [(path, buffer_)]


def _as_leading_dims(leading_dims: int | Iterable[int]) -> tuple[int, ...]:
    scalar = isinstance(leading_dims, (int, float, np.integer, np.floating))
    dims = (leading_dims,) if scalar else tuple(leading_dims)  # type: ignore[arg-type]
    try:
        return tuple(as_count("leading_dims", d) for d in dims)  # 1e3 too, as in rlpyt
    except ValueError:
        msg = f"leading_dims must be non-negative integers, got {leading_dims!r}"
        raise ValueError(msg) from None


def build_array(
    example: ArrayLike, leading_dims: int | Iterable[int], share_memory: bool = False
) -> np.ndarray:
    """A zeroed numpy array shaped ``leading_dims + example.shape`` with example's dtype.

    With ``share_memory`` it lives on OS shared memory (see ``np_mp_array``).
    """
    example = np.asarray(example)
    if example.dtype == object:
        raise TypeError(f"build_array: cannot allocate for a non-numeric example {example!r}")
    shape = _as_leading_dims(leading_dims) + example.shape
    if share_memory:
        return np_mp_array(shape, example.dtype)
    return np.zeros(shape, example.dtype)


def buffer_from_example(
    example: Any,
    leading_dims: int | Iterable[int],
    share_memory: bool = False,
    use_NatSchema: bool | None = None,
) -> Any:
    """Allocate a buffer shaped like ``example`` (which has no leading dims) plus ``leading_dims``.

    namedtuple-like nodes become namedarraytuples with the same names and fields; ``None``
    stays ``None``; leaves become zeroed arrays of the example's shape and dtype.
    ``use_NatSchema`` picks the schema form (True) or the class form (False); by default
    the example's own form is kept.
    """
    if example is None:
        return None
    if isinstance(example, tuple) and hasattr(example, "_fields"):
        schema = is_schema_form(example) if use_NatSchema is None else use_NatSchema
        if schema:
            buffer_type = NamedArrayTupleSchema_like(example)
        elif is_schema_form(example):
            buffer_type = namedarraytuple(example._typename, example._fields)
        else:
            buffer_type = namedarraytuple_like(example)
        return buffer_type._make(
            buffer_from_example(item, leading_dims, share_memory, use_NatSchema) for item in example
        )
    return build_array(example, leading_dims, share_memory)


def torchify_buffer(buffer_: Any) -> Any:
    """numpy leaves become torch tensors sharing their memory (copied only when torch
    cannot view them, e.g. negative strides); tensors and other leaves are left alone."""
    torch = require_torch("torchify_buffer")

    def torchify(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            try:
                return torch.from_numpy(x)
            except ValueError:  # negative strides: torch needs a copy
                return torch.from_numpy(np.ascontiguousarray(x))
        if isinstance(x, np.generic):
            return torch.as_tensor(x)
        return x

    return _map(torchify, buffer_)


def numpify_buffer(buffer_: Any) -> Any:
    """torch leaves become numpy arrays, sharing memory for CPU tensors; other leaves stay."""

    def numpify(x: Any) -> Any:
        if is_tensor(x):
            return x.detach().cpu().numpy()
        return x

    return _map(numpify, buffer_)


def normalize_device(device: torch.device | str | int) -> torch.device:
    """``torch.device(device)`` with the index an accelerator's tensors report: ``"cuda"``
    becomes ``cuda:<current device>``, so devices compare equal to ``tensor.device``."""
    torch = require_torch("normalize_device")
    normal = torch.device(device)
    if normal.type in ("cpu", "meta") or normal.index is not None:
        return normal
    return torch.empty(0, device=normal).device


def buffer_to(buffer_: Any, device: Device = None) -> Any:
    """Send every tensor leaf to ``device``."""
    torch = require_torch("buffer_to")

    def to(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"buffer_to: leaves must be torch tensors, got {type(x).__name__}")
        return x.to(device)

    return _map(to, buffer_)


def buffer_method(buffer_: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``leaf.method_name(*args, **kwargs)`` on every leaf, e.g. ``"reshape"``."""
    return _map(lambda x: getattr(x, method_name)(*args, **kwargs), buffer_)


def buffer_func(buffer_: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``func(leaf, *args, **kwargs)`` on every leaf."""
    return _map(lambda x: func(x, *args, **kwargs), buffer_)


def get_leading_dims(buffer_: Any, n_dim: int = 1) -> tuple[int, ...]:
    """The first ``n_dim`` dims, which every leaf must share (``None`` fields ignored)."""
    leaves = _leaves(buffer_)
    if not leaves:
        raise ValueError("get_leading_dims: the buffer holds no arrays")
    shapes = {path: tuple(getattr(x, "shape", ()))[:n_dim] for path, x in leaves}
    for path, shape in shapes.items():
        if len(shape) < n_dim:
            raise ValueError(f"get_leading_dims: {path} has fewer than {n_dim} dims")
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"{path}: {shape}" for path, shape in shapes.items())
        raise ValueError(f"get_leading_dims: leading dims differ between leaves ({listing})")
    return next(iter(shapes.values()))
