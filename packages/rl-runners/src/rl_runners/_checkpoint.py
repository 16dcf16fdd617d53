"""Checkpoint files: atomic writes, where a checkpoint's companions lie, finding and loading."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "atomic_write",
    "companion_path",
    "find_checkpoint",
    "load_checkpoint",
    "save_pickle",
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
    """Write ``path`` through ``write(file)`` into a temporary file beside it, then rename it
    over ``path``: readers see the old file or the complete new one, never a part. A Ctrl-C
    during the write takes effect once the file is in place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with ctrl_c_deferred():
        _write_and_rename(tmp, path, write)
    return path


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


def save_torch(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic."""
    return atomic_write(path, lambda f: torch.save(obj, f))


def save_pickle(obj: Any, path: str | os.PathLike) -> Path:
    """``pickle.dump`` made atomic."""
    return atomic_write(path, lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))


def companion_path(checkpoint: str | os.PathLike, name: str) -> Path:
    """Where the pickle ``name`` saved with ``checkpoint`` lies: ``<name>.pkl`` beside
    ``params.pt``, ``itr_<n>_<name>.pkl`` beside ``itr_<n>.pt``."""
    checkpoint = Path(checkpoint)
    if checkpoint.name == "params.pt":
        return checkpoint.with_name(f"{name}.pkl")
    return checkpoint.with_name(f"{checkpoint.stem}_{name}.pkl")


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
