"""Checkpoint files: atomic writes, data files that load without running code, where a
checkpoint's companions lie, finding and loading."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

__all__ = [
    "atomic_write",
    "companion_path",
    "find_checkpoint",
    "load_checkpoint",
    "load_data",
    "remove_partial_writes",
    "save_data",
    "save_torch",
]

_ITR_FILE = re.compile(r"itr_(\d+)\.pt")


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block ends. A
    KeyboardInterrupt raised inside ``torch.save``'s writer, which calls back into Python from
    C++, can abort the process or be lost; after the write it is an ordinary interrupt. Blocks
    nest: an inner one hands what it held to the outer one."""
    if threading.current_thread() is not threading.main_thread():
        yield  # (only the main thread receives signals)
        return
    received: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(signal.SIGINT, received[0])  # Python's handler: raises KeyboardInterrupt
        elif received and previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> Path:
    """Write ``path`` through ``write(file)`` into a temporary file beside it, flushed to
    disk, then rename it over ``path`` and flush the directory: readers see the old file or
    the complete new one, never a part, even after a crash. A Ctrl-C during the write takes
    effect once the file is in place. A full disk is an OSError that names ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with ctrl_c_deferred(), naming_the_file(path, "; the file it replaces is kept"):
        _write_and_rename(tmp, path, write)
    return path


@contextlib.contextmanager
def naming_the_file(path: str | os.PathLike, note: str = "") -> Iterator[None]:
    """An OSError without a file name (a full disk's, from a write) names ``path``."""
    try:
        yield
    except OSError as e:
        if e.errno is None or e.filename is not None or str(path) in str(e):
            raise
        raise OSError(e.errno, f"{e.strerror} while writing {path}{note}") from e


def _write_and_rename(tmp: Path, path: Path, write: Callable[[IO[bytes]], object]) -> None:
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_directory(path)


def sync_directory(renamed: Path) -> None:
    """Flush the directory of the file ``renamed`` into it to disk, where the system allows."""
    try:
        fd = os.open(renamed.parent, os.O_RDONLY)
    except OSError:  # (not every system opens directories)
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):  # (not supported)
            raise OSError(
                e.errno, f"{e.strerror} while flushing the renaming of {renamed} to disk"
            ) from e
    finally:
        os.close(fd)


def remove_partial_writes(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary files (``.<name>.tmp``) a killed writer left in ``directory``;
    returns them. Only for a directory no other process writes (a run directory, locked)."""
    removed = []
    for tmp in Path(directory).glob(".*.tmp"):
        if tmp.is_file():
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def save_torch(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic (serialized in memory first: a full disk is then a plain
    OSError from the write, not an error inside torch's zip writer)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write(path, lambda f: f.write(buffer.getbuffer()))


# Data files: a tree of dicts (string keys), lists, None, bools, numbers, strings and numpy
# arrays, kept as JSON with each array in an .npz beside it; read back with
# allow_pickle=False, so nothing in them can run code.
_TREE, _ARRAY = "__tree__", "__array__"


def save_data(tree: Any, path: str | os.PathLike) -> Path:
    """Write ``tree`` (see above) to the .npz file ``path``, atomically."""
    arrays: dict[str, np.ndarray] = {}

    def encode(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"an array of Python objects cannot be saved as data: {value!r}")
            arrays[f"a{len(arrays)}"] = value
            return {_ARRAY: f"a{len(arrays) - 1}"}
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise TypeError(f"a dict saved as data needs string keys, got {list(value)}")
            return {k: encode(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [encode(v) for v in value]
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, np.generic):  # (read back as a Python number)
            return value.item()
        raise TypeError(f"a {type(value).__name__} cannot be saved as data: {value!r}")

    text = json.dumps(encode(tree))
    arrays[_TREE] = np.frombuffer(text.encode("utf-8"), np.uint8)
    return atomic_write(path, lambda f: np.savez(f, allow_pickle=False, **arrays))


def load_data(path: str | os.PathLike) -> Any:
    """The tree ``save_data`` wrote to ``path``; a file that is not one is a ValueError."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        tree = json.loads(arrays.pop(_TREE).tobytes().decode("utf-8"))
    except Exception as e:  # (zip, refused pickle, JSON and EOF errors alike)
        raise ValueError(f"{str(path)!r} is not a data file of save_data: {e}") from e

    def decode(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {_ARRAY}:
                return arrays[value[_ARRAY]]
            return {k: decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    return decode(tree)


def companion_path(checkpoint: str | os.PathLike, name: str, suffix: str = ".npz") -> Path:
    """Where the file ``name`` saved with ``checkpoint`` lies: ``<name><suffix>`` beside
    ``params.pt``, ``<stem>_<name><suffix>`` beside any other ``<stem>.pt``."""
    checkpoint = Path(checkpoint)
    if checkpoint.name == "params.pt":
        return checkpoint.with_name(f"{name}{suffix}")
    return checkpoint.with_name(f"{checkpoint.stem}_{name}{suffix}")


def find_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint file ``path`` names: the file itself, or in a run directory
    ``params.pt`` if there is one, else the ``itr_<n>.pt`` with the largest ``n``."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint file or run directory at {str(path)!r}")
    if (path / "params.pt").is_file():
        return path / "params.pt"
    numbered = [(int(m.group(1)), p) for p in path.iterdir() if (m := _ITR_FILE.fullmatch(p.name))]
    if not numbered:
        raise FileNotFoundError(
            f"run directory {str(path)!r} holds no checkpoint (params.pt or itr_<n>.pt); was it "
            "run with snapshot_mode='none'?"
        )
    return max(numbered)[1]


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint (file or run directory, see ``find_checkpoint``) onto the CPU with
    ``torch.load(weights_only=True)``."""
    return torch.load(find_checkpoint(path), map_location="cpu", weights_only=True)
