"""Compact storage of normalised images: float pixels in [0, 1] as one byte each.

A float32 image takes four times the memory of its uint8 form; in a samples or replay buffer
of image observations that is most of the memory. ``compress_normalized_image`` maps
``[0, 1]`` onto the 256 levels ``k / 255`` (rounding to the nearest, so a round trip through
``decompress_image`` is off by at most ``1 / 510``), and ``decompress_image`` maps them back.
The uint8 form is what image models that scale frames by ``1 / 255`` inside (rl-agents'
Atari models) read directly.

Both work on numpy arrays and torch tensors of any shape (``[T, B, C, H, W]`` included) and
keep the shape (and a tensor's device); torch is needed only for tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ._torch import is_tensor, require_torch

if TYPE_CHECKING:
    import torch
    from numpy.typing import ArrayLike, DTypeLike

__all__ = ["compress_normalized_image", "decompress_image"]

_LEVELS = 255


@overload
def compress_normalized_image(x: torch.Tensor) -> torch.Tensor: ...
@overload
def compress_normalized_image(x: ArrayLike) -> np.ndarray: ...
def compress_normalized_image(x: ArrayLike) -> np.ndarray | torch.Tensor:
    """Float pixels in [0, 1] as uint8: ``round(255 * x)``, ties to even.

    Values outside [0, 1] are clipped: below 0 (and -inf) become 0, above 1 (and +inf)
    255; NaN becomes 0. ``x`` is a floating-point numpy array or torch tensor (any shape);
    the result is a new uint8 array or tensor of the same shape (and device). The scaling
    runs in float32 (float64 for float64 input), so float16 input rounds as exactly as
    float32.
    """
    if is_tensor(x):
        torch = require_torch("compress_normalized_image")
        if not x.is_floating_point():
            raise TypeError(
                f"compress_normalized_image needs a floating-point tensor (pixels in [0, 1]), "
                f"got dtype {x.dtype}"
            )
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        with torch.no_grad():
            scaled_t = x.to(work) * _LEVELS  # a new tensor: x is kept
            scaled_t.nan_to_num_(nan=0.0).clamp_(0, _LEVELS).round_()
            return scaled_t.to(torch.uint8)
    array = np.asarray(x)
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(
            "compress_normalized_image needs a floating-point array (pixels in [0, 1]), got "
            f"dtype {array.dtype}"
        )
    work = np.float64 if array.dtype == np.float64 else np.float32
    scaled = np.empty(array.shape, dtype=work)  # an array even for 0-d input
    np.multiply(array, _LEVELS, out=scaled)
    np.nan_to_num(scaled, copy=False, nan=0.0)
    np.clip(scaled, 0, _LEVELS, out=scaled)
    np.rint(scaled, out=scaled)
    return scaled.astype(np.uint8)


@overload
def decompress_image(
    u8: torch.Tensor, dtype: torch.dtype | DTypeLike | None = None
) -> torch.Tensor: ...
@overload
def decompress_image(u8: ArrayLike, dtype: DTypeLike | None = None) -> np.ndarray: ...
def decompress_image(u8: ArrayLike, dtype: Any = None) -> np.ndarray | torch.Tensor:
    """uint8 pixels back to floats in [0, 1]: ``u8 / 255``, of ``dtype`` (default float32;
    a numpy dtype for arrays, a torch dtype, or the name of one, for tensors). Shape (and a
    tensor's device) kept; always a new array or tensor."""
    if is_tensor(u8):
        torch = require_torch("decompress_image")
        if u8.dtype != torch.uint8:
            raise TypeError(f"decompress_image needs a uint8 tensor, got dtype {u8.dtype}")
        if dtype is None:
            dtype = torch.float32
        elif not isinstance(dtype, torch.dtype):
            name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
            dtype = getattr(torch, name, None)
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"decompress_image: {name!r} names no torch dtype")
        if not dtype.is_floating_point:
            raise TypeError(f"decompress_image returns floats, got dtype={dtype}")
        return u8.to(dtype).div_(_LEVELS)
    array = np.asarray(u8)
    if array.dtype != np.uint8:
        raise TypeError(f"decompress_image needs a uint8 array, got dtype {array.dtype}")
    dtype = np.dtype(np.float32 if dtype is None else dtype)
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"decompress_image returns floats, got dtype={dtype}")
    out = array.astype(dtype)
    out /= _LEVELS
    return out
