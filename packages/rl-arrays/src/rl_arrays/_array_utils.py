"""Leading-dim, index and minibatch helpers that work alike on numpy arrays and torch tensors.

Each function dispatches on its data argument: a torch tensor gets a torch result on the same
device, anything else is treated as a numpy array. torch is only imported once a tensor (or a
torch dtype) has been seen, so a numpy-only install can use every function here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

import numpy as np

from ._collections import tuple_like
from ._counts import as_count
from ._torch import is_tensor, require_torch

if TYPE_CHECKING:
    import torch
    from numpy.typing import ArrayLike, DTypeLike
    from torch.types import Device
    from typing_extensions import TypeIs

# "A numpy array or a torch tensor": as one value (Array), or as the kind of a result that is
# of the same kind as an argument (ArrayT).
Array: TypeAlias = "np.ndarray | torch.Tensor"
ArrayT = TypeVar("ArrayT", np.ndarray, "torch.Tensor")
_SeqT = TypeVar("_SeqT", bound="tuple[Any, ...] | list[Any]")  # of arrays, tensors or None

__all__ = [
    "empty",
    "extract_sequences",
    "from_onehot",
    "infer_leading_dims",
    "iterate_mb_idxs",
    "restore_leading_dims",
    "select_at_indexes",
    "to_onehot",
    "valid_mean",
    "zeros",
]


@overload
def _index_like(idx: ArrayLike, like: torch.Tensor, name: str) -> torch.Tensor: ...
@overload
def _index_like(idx: ArrayLike, like: np.ndarray | None, name: str) -> np.ndarray: ...
def _index_like(idx: ArrayLike, like: Array | None, name: str) -> Array:
    """``idx`` as an integer index of the same kind (and device) as ``like``.

    torch indexes become int64: a uint8 tensor would otherwise index as a boolean mask.
    """
    if is_tensor(like):
        torch = require_torch(name)
        tensor = torch.as_tensor(idx, device=like.device)
        if tensor.numel() == 0:
            return tensor.long()  # an empty list arrives as float32
        if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
            raise TypeError(f"{name} must hold integers, got dtype {tensor.dtype}")
        return tensor.long()
    array = np.asarray(idx)
    if array.size == 0:
        return array.astype(np.intp)  # an empty list arrives as float64
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {array.dtype}")
    return array


def _as_data(x: ArrayT) -> ArrayT:
    return x if is_tensor(x) else np.asarray(x)


def _arange(n: int, like: ArrayT) -> ArrayT:
    if is_tensor(like):
        return require_torch("arange").arange(n, device=like.device)
    return np.arange(n)


def select_at_indexes(indexes: ArrayLike, array: ArrayT) -> ArrayT:
    """Contents of ``array`` at integer ``indexes``, one pick per leading position.

    ``indexes.shape`` must equal the leading dims of ``array``; the next dim is the one selected
    from and any trailing dims are kept, e.g. Q-values [T,B,A] and actions [T,B] give [T,B], and
    distributions [T,B,A,n_atoms] give [T,B,n_atoms]. Negative indexes count from the end.
    """
    array = _as_data(array)
    idx = _index_like(indexes, array, "indexes")
    lead = tuple(idx.shape)
    if len(lead) >= array.ndim or tuple(array.shape[: len(lead)]) != lead:
        raise ValueError(
            f"indexes of shape {lead} must match the leading dims of array of shape "
            f"{tuple(array.shape)} (and leave at least one dim to select from)"
        )
    if is_tensor(array) and array.ndim == len(lead) + 1:  # gather: a third of the time
        n = array.shape[-1]
        idx = require_torch("select_at_indexes").where(idx < 0, idx + n, idx)
        return array.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    # One broadcastable arange per leading dim: no full index grid is materialised.
    index = [
        _arange(n, array).reshape((1,) * i + (n,) + (1,) * (len(lead) - i - 1))
        for i, n in enumerate(lead)
    ]
    index.append(idx)
    return array[tuple(index)]


@overload
def to_onehot(
    indexes: torch.Tensor, dim: int, dtype: torch.dtype | None = None
) -> torch.Tensor: ...
@overload
def to_onehot(indexes: ArrayLike, dim: int, dtype: DTypeLike | None = None) -> np.ndarray: ...
def to_onehot(indexes: ArrayLike, dim: int, dtype: Any = None) -> Array:
    """One-hot encoding of integer ``indexes`` in a new trailing dimension of size ``dim``.

    dtype defaults to float32 (numpy) / torch.float32 (torch). numpy indexes outside [0, dim)
    raise ValueError; torch raises its own error (checking would force a GPU sync).
    """
    dim = as_count("dim", dim, 1)
    if is_tensor(indexes):
        torch = require_torch("to_onehot")
        indexes = _index_like(indexes, indexes, "indexes")
        out = torch.zeros(
            (*indexes.shape, dim),
            dtype=torch.float32 if dtype is None else dtype,
            device=indexes.device,
        )
        return out.scatter_(-1, indexes.unsqueeze(-1), 1)
    indexes = _index_like(indexes, None, "indexes")
    if indexes.size and (indexes.min() < 0 or indexes.max() >= dim):
        raise ValueError(
            f"indexes must lie in [0, {dim}), got values from {indexes.min()} to {indexes.max()}"
        )
    out = np.zeros((*indexes.shape, dim), dtype=np.float32 if dtype is None else dtype)
    np.put_along_axis(out, indexes[..., None], 1, axis=-1)
    return out


@overload
def from_onehot(
    onehot: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None
) -> torch.Tensor: ...
@overload
def from_onehot(
    onehot: np.ndarray, dim: int = -1, dtype: DTypeLike | None = None
) -> np.ndarray: ...
def from_onehot(onehot: Array, dim: int = -1, dtype: Any = None) -> Array:
    """Integer index of the largest entry along ``dim`` (the inverse of :func:`to_onehot`).

    The result is int64 unless ``dtype`` is given.
    """
    if is_tensor(onehot):
        out = onehot.argmax(dim=dim)
        return out if dtype is None else out.to(dtype)
    return (
        np.asarray(onehot).argmax(axis=dim).astype(np.int64 if dtype is None else dtype, copy=False)
    )


def valid_mean(
    x: ArrayT, valid: ArrayLike | None = None, dim: int | tuple[int, ...] | None = None
) -> ArrayT:
    """Mean of ``x`` over the entries where ``valid`` is nonzero, e.g. steps before a reset.

    ``valid`` (bool or 0/1 float) must broadcast to ``x.shape``; it is broadcast before counting,
    so a mask of shape [T,B] on data [T,B,A] counts every A entry. Reduces over ``dim`` (all dims
    when None). Where nothing is valid the result is nan, without a warning.
    """
    x = _as_data(x)
    if is_tensor(x):
        torch = require_torch("valid_mean")
        if valid is None:
            return x.mean() if dim is None else x.mean(dim=dim)
        if is_tensor(valid) and (valid.dtype, valid.shape, valid.device) == (
            x.dtype,
            x.shape,
            x.device,
        ):
            mask = valid  # a float mask of x's shape (what the algorithms pass) is used as it is
        else:
            mask = torch.as_tensor(valid, device=x.device)
            mask = mask.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())
            mask = torch.broadcast_to(mask, x.shape)
        if dim is None:
            return (x * mask).sum() / mask.sum()
        return (x * mask).sum(dim=dim) / mask.sum(dim=dim)
    if valid is None:
        return x.mean(axis=dim)
    np_mask = np.broadcast_to(np.asarray(valid), x.shape)
    np_mask = np_mask.astype(x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * np_mask).sum(axis=dim) / np_mask.sum(axis=dim)


def infer_leading_dims(x: Array, dim: int) -> tuple[int, int, int, tuple[int, ...]]:
    """Find the [], [B] or [T,B] leading dims in front of ``dim`` data dims.

    Call it at the start of a model's ``forward`` and finish with :func:`restore_leading_dims`,
    so one model serves single steps, batches and sequences. Returns ``(lead_dim, T, B, shape)``:
    the number of leading dims (0, 1 or 2), T (1 unless two leading dims), B (1 if none) and the
    data shape after the leading dims.
    """
    dim = as_count("dim", dim)
    shape = tuple(int(s) for s in x.shape)
    lead_dim = len(shape) - dim
    if lead_dim not in (0, 1, 2):
        raise ValueError(
            f"expected {dim}, {dim + 1} or {dim + 2} dims ({dim} data dims after [], [B] or "
            f"[T,B] leading dims), got shape {shape} with {len(shape)} dims"
        )
    T = shape[0] if lead_dim == 2 else 1
    B = shape[lead_dim - 1] if lead_dim > 0 else 1
    return lead_dim, T, B, shape[lead_dim:]


def _restore_one(x: Array | None, lead_dim: int, T: int, B: int) -> Array | None:
    if x is None or lead_dim == 1:
        return x
    shape = tuple(x.shape)
    expected = T * B if lead_dim == 2 else 1
    if not shape or shape[0] != expected:
        raise ValueError(
            f"expected a leading batch dim of {expected} to restore lead_dim={lead_dim} "
            f"(T={T}, B={B}), got shape {shape}"
        )
    if lead_dim == 2:
        return x.reshape((T, B, *shape[1:]))
    return x.reshape(shape[1:])


@overload
def restore_leading_dims(tensors: ArrayT, lead_dim: int, T: int = 1, B: int = 1) -> ArrayT: ...
@overload
def restore_leading_dims(tensors: _SeqT, lead_dim: int, T: int = 1, B: int = 1) -> _SeqT: ...
def restore_leading_dims(tensors: Any, lead_dim: int, T: int = 1, B: int = 1) -> Any:
    """Turn a leading [T*B] batch dim back into [], [B] or [T,B] (see :func:`infer_leading_dims`).

    ``tensors`` is one array/tensor or a tuple/list of them (None entries pass through); the same
    structure comes back, so a model can compute with one batch dim and return what it was given.
    """
    if lead_dim not in (0, 1, 2):
        raise ValueError(f"lead_dim must be 0, 1 or 2, got {lead_dim!r}")
    if isinstance(tensors, list):
        return [_restore_one(t, lead_dim, T, B) for t in tensors]
    if isinstance(tensors, tuple):
        out = [_restore_one(t, lead_dim, T, B) for t in tensors]
        return tuple_like(tensors, out)
    return _restore_one(tensors, lead_dim, T, B)


def iterate_mb_idxs(
    data_length: int,
    minibatch_size: int,
    shuffle: bool = False,
    *,
    drop_last: bool = False,
    rng: np.random.Generator | int | None = None,
) -> Iterator[np.ndarray]:
    """Yield int index arrays that split ``range(data_length)`` into minibatches.

    Every index appears exactly once per pass: the last minibatch is shorter when
    ``minibatch_size`` does not divide ``data_length`` (rlpyt drops it; pass ``drop_last=True``
    for that, e.g. when every minibatch must have the same size). With ``shuffle`` the order is
    a random permutation drawn from ``rng`` (a Generator or seed); when ``rng`` is None numpy's
    global random state is used, so a global ``np.random.seed`` makes it reproducible.
    Arguments are checked when called, not at the first ``next``.
    """
    data_length = as_count("data_length", data_length)
    minibatch_size = as_count("minibatch_size", minibatch_size, 1)
    if not shuffle:
        order = np.arange(data_length)
    elif rng is None:
        order = np.random.permutation(data_length)
    else:
        order = np.random.default_rng(rng).permutation(data_length)
    stop = data_length - data_length % minibatch_size if drop_last else data_length
    return (order[i : i + minibatch_size] for i in range(0, stop, minibatch_size))


def extract_sequences(
    array_or_tensor: ArrayT, T_idx: ArrayLike, B_idx: ArrayLike, T: int
) -> ArrayT:
    """Sequences of length ``T`` from [T_total, B, ...] data, starting at [T_idx[i], B_idx[i]].

    Time wraps around (a circular replay buffer), so a start near the end continues at step 0.
    Returns [T, len(B_idx), ...], a new array/tensor (advanced indexing copies).
    """
    data = _as_data(array_or_tensor)
    if data.ndim < 2:
        raise ValueError(f"expected data with [T,B] leading dims, got shape {tuple(data.shape)}")
    T_total = int(data.shape[0])
    expected = f"an integer in [1, {T_total}] (the time dim)"
    T = as_count("T", T, 1, expected=expected)
    if T_total < T:
        raise ValueError(f"T must be {expected}, got {T!r}")
    t_start = _index_like(T_idx, data, "T_idx")
    b_idx = _index_like(B_idx, data, "B_idx")
    if t_start.ndim != 1 or b_idx.shape != t_start.shape:
        raise ValueError(
            f"T_idx and B_idx must be 1-D of equal length, got shapes {tuple(t_start.shape)} "
            f"and {tuple(b_idx.shape)}"
        )
    t_idx = (t_start.reshape(1, -1) + _arange(T, data).reshape(-1, 1)) % T_total
    return data[t_idx, b_idx.reshape(1, -1)]


def _torch_dtype(dtype: object) -> TypeIs[torch.dtype]:
    torch = sys.modules.get("torch")  # a torch.dtype can only exist once torch is imported
    return torch is not None and isinstance(dtype, torch.dtype)


@overload
def zeros(
    shape: int | Sequence[int], dtype: torch.dtype, *, device: Device = None
) -> torch.Tensor: ...
@overload
def zeros(shape: int | Sequence[int], dtype: DTypeLike, *, device: None = None) -> np.ndarray: ...
def zeros(
    shape: int | Sequence[int], dtype: DTypeLike | torch.dtype, *, device: Device = None
) -> Array:
    """Zeros as a torch tensor when ``dtype`` is a torch.dtype, else as a numpy array.

    Lets buffer code allocate for either side from one example's dtype. ``device`` is for torch
    only.
    """
    if _torch_dtype(dtype):
        return require_torch("zeros").zeros(shape, dtype=dtype, device=device)
    if device is not None:
        raise ValueError(f"device={device!r} needs a torch dtype, got dtype {dtype!r}")
    return np.zeros(shape, dtype=np.dtype(dtype))


@overload
def empty(
    shape: int | Sequence[int], dtype: torch.dtype, *, device: Device = None
) -> torch.Tensor: ...
@overload
def empty(shape: int | Sequence[int], dtype: DTypeLike, *, device: None = None) -> np.ndarray: ...
def empty(
    shape: int | Sequence[int], dtype: DTypeLike | torch.dtype, *, device: Device = None
) -> Array:
    """Uninitialised torch tensor when ``dtype`` is a torch.dtype, else a numpy array.

    For allocations that are filled right away; ``device`` is for torch only.
    """
    if _torch_dtype(dtype):
        return require_torch("empty").empty(shape, dtype=dtype, device=device)
    if device is not None:
        raise ValueError(f"device={device!r} needs a torch dtype, got dtype {dtype!r}")
    return np.empty(shape, dtype=np.dtype(dtype))
