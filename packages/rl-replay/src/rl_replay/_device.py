"""Replay storage as torch tensors on a device (the buffers' ``device`` option).

Only what differs from numpy storage is here: allocating, writing new steps (one copy to the
device), the storage rows of drawn indices (moved in one transfer when drawn on the host),
zeroing by a mask without reading it on the host, and the host form of the state. torch is imported inside the functions: rl-replay needs it
only for this option (``pip install rl-replay[torch]``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from rl_arrays import buffer_from_example, buffer_func, normalize_device

if TYPE_CHECKING:
    import torch

__all__ = [
    "allocate",
    "as_device",
    "as_tensor",
    "free_bytes",
    "gather",
    "host_array",
    "is_tensor",
    "load_into",
    "numpy_dtype",
    "storage_rows",
    "torch_module",
    "write",
    "zero_where",
]


def torch_module() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            "a replay buffer on a device (device=...) needs PyTorch: pip install rl-replay[torch]"
        ) from e
    return torch


def is_tensor(x: object) -> bool:
    """True for a torch.Tensor; never imports torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def as_device(device: Any) -> torch.device:
    """``device`` as tensors on it report it (``"cuda"`` is ``cuda:<current>``); a
    ValueError naming ``device`` when torch cannot use it."""
    torch_module()
    try:
        return normalize_device(device)
    except (RuntimeError, AssertionError, TypeError) as e:
        raise ValueError(f"device={device!r} cannot hold tensors here: {e}") from None


def free_bytes(device: torch.device) -> int | None:
    """Free memory on an accelerator (None where unknown: the CPU's is the host's)."""
    if device.type == "cuda":
        return int(torch_module().cuda.mem_get_info(device)[0])
    return None


def allocate(example: Any, T: int, B: int, device: torch.device) -> Any:
    """Zeroed ``[T, B]`` tensors shaped and typed like ``example``'s arrays, on ``device``."""
    torch_ = torch_module()

    def zeros(empty: np.ndarray) -> torch.Tensor:
        dtype = torch_.from_numpy(empty).dtype
        return torch_.zeros((T, B, *empty.shape[1:]), dtype=dtype, device=device)

    return buffer_func(buffer_from_example(example, 0), zeros)


def write(dest: dict[str, Any], idxs: np.ndarray | slice, src: dict[str, Any]) -> None:
    """``dest[key][idxs] = src[key]`` for every stored array: numpy arrays or tensors from
    anywhere, copied to the storage's device and dtype once."""
    torch = torch_module()
    index: Any = idxs
    for key, leaf in dest.items():
        if isinstance(index, np.ndarray):  # (wrapping writes: moved once, not per array)
            index = torch.from_numpy(index).to(leaf.device)
        value = src[key]
        if isinstance(value, np.ndarray) and (
            not value.flags.writeable or min(value.strides, default=0) < 0
        ):
            value = np.array(value)  # (torch views neither read-only nor reversed arrays)
        leaf[index] = torch.as_tensor(value, dtype=leaf.dtype, device=leaf.device)


def as_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A numpy array as a tensor on ``device`` (one copy)."""
    return torch_module().from_numpy(array).to(device)


def storage_rows(
    T_idxs: Any, B_idxs: Any, offsets: list[int], T: int, B: int, device: torch.device
) -> torch.Tensor:
    """Flat storage rows ``((T_idxs + k) % T) * B + B_idxs`` for each ``k`` of ``offsets``
    (the leading dim), on ``device``: computed there from indices drawn there (tensors), or
    on the host from indices drawn there (arrays) and moved in one copy."""
    if is_tensor(T_idxs):
        times = torch_module().stack([T_idxs + k for k in offsets])
        return times % T * B + B_idxs
    times = np.asarray(T_idxs) + np.array(offsets)[:, None]
    return as_tensor(times % T * B + np.asarray(B_idxs), device)


def gather(array: Any, rows: torch.Tensor) -> Any:
    """``array`` (``[T, B, ...]`` tensors, or a namedarraytuple of them) at the flat storage
    rows ``t * B + b`` of ``rows`` (any shape, which leads the result's): one index_select."""

    def take(leaf: torch.Tensor) -> torch.Tensor:
        taken = leaf.flatten(0, 1).index_select(0, rows.reshape(-1))
        return taken.view(*rows.shape, *leaf.shape[2:])

    return buffer_func(array, take)


def zero_where(x: Any, mask: torch.Tensor) -> Any:
    """``x`` (tensors, or a namedarraytuple of them) with the rows where ``mask`` is true
    zeroed, without reading the mask on the host."""

    def zeroed(leaf: torch.Tensor) -> torch.Tensor:
        return leaf.masked_fill(mask.reshape(*mask.shape, *(1,) * (leaf.dim() - mask.dim())), 0)

    return buffer_func(x, zeroed)


def numpy_dtype(array: Any) -> np.dtype:
    """The numpy dtype of an array or of a tensor (whose data is not read)."""
    if is_tensor(array):
        return torch_module().empty(0, dtype=array.dtype).numpy().dtype
    return np.asarray(array).dtype


def host_array(array: Any) -> np.ndarray:
    """A numpy copy of an array or a tensor (from any device)."""
    if not is_tensor(array):
        return np.array(array)
    if array.device.type == "cpu":
        return array.detach().numpy().copy()
    return array.detach().cpu().numpy()  # (a copy already)


def load_into(array: Any, value: np.ndarray) -> None:
    """Overwrite ``array`` (numpy, or a tensor on any device) with ``value``."""
    if is_tensor(array):
        array.copy_(torch_module().from_numpy(np.array(value)))
    else:
        array[...] = value
