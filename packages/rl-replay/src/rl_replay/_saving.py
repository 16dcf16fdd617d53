"""A replay buffer's state restored from arrays, and written to an .npz file atomically."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import numpy as np

from . import _device

__all__ = ["load_arrays", "save_npz"]


def load_arrays(arrays: dict[str, Any], state: dict[str, np.ndarray]) -> None:
    """Overwrite each of ``arrays`` (numpy, or tensors on any device) with ``state``'s array
    of its key, after checking that every one is there with the same shape and dtype."""
    missing = set(arrays) - set(state)
    if missing:
        raise ValueError(f"the saved state lacks {sorted(missing)}")
    for key, array in arrays.items():
        value = np.asarray(state[key])
        shape, dtype = tuple(array.shape), _device.numpy_dtype(array)
        if value.shape != shape or value.dtype != dtype:
            raise ValueError(
                f"saved {key} is {value.dtype}{value.shape}, this buffer holds "
                f"{dtype}{shape}: was it made with the same arguments?"
            )
        _device.load_into(array, value)


def save_npz(path: str | os.PathLike[str], state: dict[str, np.ndarray]) -> None:
    """Write ``state`` to ``path`` (an .npz file) atomically: a crash mid-write leaves any
    previous file intact; an OSError (a full disk) names ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".replay-", suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, allow_pickle=False, **state)  # as load reads it
            f.flush()
            os.fsync(f.fileno())  # (on disk before it is renamed into place)
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.filename is None:  # (a full disk, say)
            raise OSError(error.errno, f"{error.strerror} while writing {path}") from error
        raise
