"""numpy arrays on OS shared memory that stay shared when sent to another process.

Each array lives in an anonymous memory file (``memfd_create``; elsewhere a temporary
file unlinked at once), so no named segment exists that could leak: the memory is
released by the kernel when the last process holding a mapping or descriptor lets go.
Pickling sends a duplicate of the file descriptor, never the data, so a child started
with ``spawn`` or ``forkserver`` (as an argument or through a queue) maps the same
memory; under ``fork`` the mapping is simply inherited.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Callable
from multiprocessing.reduction import DupFd
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ._counts import as_count

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["np_mp_array"]


class _Segment:
    """One shared memory file and its mapping in this process."""

    def __init__(self, nbytes: int, fd: int | None = None):
        self.nbytes = nbytes
        if fd is None:
            fd = _anonymous_file()
            os.ftruncate(fd, max(nbytes, 1))
        self.fd = fd
        self.mmap = mmap.mmap(fd, max(nbytes, 1))
        self.address = np.frombuffer(self.mmap, np.uint8).ctypes.data

    def __reduce__(self) -> tuple[Callable[[int, _DupFd], _Segment], tuple[int, _DupFd]]:
        return _attach_segment, (self.nbytes, DupFd(self.fd))

    def __del__(self) -> None:
        # The mapping closes itself once no array uses it; the descriptor is ours to close.
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)


def _anonymous_file() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("rl-arrays", os.MFD_CLOEXEC)
    fd, path = tempfile.mkstemp(prefix="rl-arrays-")
    os.unlink(path)
    return fd


class _DupFd(Protocol):
    """What ``DupFd`` gives: a descriptor that reappears in the process that unpickles it."""

    def detach(self) -> int: ...


def _attach_segment(nbytes: int, dup_fd: _DupFd) -> _Segment:
    return _Segment(nbytes, dup_fd.detach())


class SharedArray(np.ndarray):
    """An ndarray on a shared segment; slices and views of it pickle as shared too."""

    _segment: _Segment | None

    def __array_finalize__(self, obj: object) -> None:
        self._segment = getattr(obj, "_segment", None)

    def __reduce__(self) -> str | tuple[Any, ...]:
        segment = self._segment
        start = self.__array_interface__["data"][0]
        if segment is None or not (segment.address <= start < segment.address + segment.nbytes):
            # Not (or no longer) backed by shared memory, e.g. the result of arithmetic.
            return np.asarray(self).copy().__reduce__()
        return _rebuild_array, (
            segment,
            start - segment.address,
            self.shape,
            self.strides,
            self.dtype,
        )


def _rebuild_array(
    segment: _Segment,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...] | None,
    dtype: np.dtype[Any],
) -> SharedArray:
    array = np.ndarray(shape, dtype, buffer=segment.mmap, offset=offset, strides=strides)
    shared = array.view(SharedArray)
    shared._segment = segment
    return shared


def np_mp_array(shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """A zero-filled numpy array on OS shared memory, visible to child processes.

    The array (and any slice of it) can be passed to a child process under ``fork``,
    ``forkserver`` or ``spawn``, as an argument or through a multiprocessing queue;
    writes on either side are seen by the other.  Memory is freed when the last
    process drops its last reference.
    """
    dims = (shape,) if isinstance(shape, (int, float, np.integer, np.floating)) else tuple(shape)
    dtype = np.dtype(dtype)
    try:
        shape = tuple(as_count("shape", n) for n in dims)  # 1e3 too, as in rlpyt
    except ValueError:
        msg = f"np_mp_array: shape must be non-negative integers, got {dims}"
        raise ValueError(msg) from None
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return _rebuild_array(_Segment(nbytes), 0, shape, None, dtype)
