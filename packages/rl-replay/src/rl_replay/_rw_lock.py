"""A read-write lock across processes, guarding replay buffers on shared memory."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Iterator

import numpy as np

from rl_arrays import np_mp_array

__all__ = ["RWLock"]


class RWLock:
    """Many readers or one writer, across processes (readers first: a writer waits until
    no reader holds the lock).  Works with children started by fork, forkserver or spawn."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")  # spawn-made locks also pass to fork children
        self._write = ctx.Lock()
        self._count_lock = ctx.Lock()
        self._readers = np_mp_array(1, np.int64)

    @contextlib.contextmanager
    def read_lock(self) -> Iterator[None]:
        with self._count_lock:
            self._readers[0] += 1
            if self._readers[0] == 1:
                self._write.acquire()
        try:
            yield
        finally:
            with self._count_lock:
                self._readers[0] -= 1
                if self._readers[0] == 0:
                    self._write.release()

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        with self._write:
            yield
