"""One writer per run directory: an OS lock (``flock``) on ``<run_dir>/.lock``, released by the
system when its process ends however it ends, so a crash never leaves a stale lock."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RunDirInUse", "run_dir_lock"]

LOCK_FILE = ".lock"


class RunDirInUse(OSError):
    """Another process writes this run directory."""


@contextlib.contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock inside the block; ``RunDirInUse``, naming the process
    that holds it, if another one does. (No lock where the system has no ``flock``.)"""
    try:
        import fcntl
    except ImportError:  # (Windows)
        yield
        return
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 1000, 0).decode("utf-8", "replace").strip() or "another process"
            raise RunDirInUse(
                f"{run_dir} is in use by {holder}: one process writes a run directory at a "
                "time (wait for it to end, or stop it first)"
            ) from None
        command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv))
        holder = f"process {os.getpid()} on {socket.gethostname()} ({command})"
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode("utf-8"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
