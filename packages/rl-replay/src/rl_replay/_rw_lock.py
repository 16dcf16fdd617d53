"""A read-write lock across processes, guarding replay buffers on shared memory.

Its two semaphores and the count of readers live in anonymous shared memory
(``rl_arrays.np_mp_array``), the semaphores made by ``sem_init`` for sharing between
processes: nothing has a name in /dev/shm, so nothing is left there however the processes
end (a ``kill -9`` of the whole group included). Each process waits on them through
multiprocessing's own semaphore type (``_multiprocessing.SemLock``, handed their address),
so acquiring costs what a ``multiprocessing.Lock`` costs and a signal interrupts a wait
(Ctrl-C raises there). Where this cannot be done (a C library other than glibc, whose
``sem_close`` of such a semaphore is not harmless; macOS, which has no process-shared
``sem_init``), multiprocessing's named locks serve instead.
"""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing as mp
import os
from typing import Any

import numpy as np

from rl_arrays import np_mp_array

__all__ = ["RWLock"]

_SLOT = 64  # bytes per semaphore (a sem_t takes 32 on 64-bit glibc, 16 on 32-bit)
_WRITE, _COUNT, _READERS = 0, _SLOT, 2 * _SLOT  # offsets in the shared memory
_SEMAPHORE = 1  # _multiprocessing.SemLock's kind for a semaphore (0: a recursive mutex)


def _native() -> tuple[Any, Any]:
    """glibc's ``sem_init`` and multiprocessing's semaphore type (Nones on other C libraries:
    see the module)."""
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return None, None
        semlock = importlib.import_module("_multiprocessing").SemLock
        sem_init = ctypes.CDLL(None, use_errno=True).sem_init
        sem_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint]
        trial = np.zeros(_SLOT, np.uint8)  # (CPython's private _rebuild may change: try it)
        if sem_init(ctypes.c_void_p(trial.ctypes.data), 1, 1) != 0:
            return None, None
        lock = semlock._rebuild(trial.ctypes.data, _SEMAPHORE, 1, None)
        if not (lock.acquire(False) and not lock.acquire(False)):
            return None, None
        lock.release()
        del lock
    except (AttributeError, ImportError, OSError, TypeError, ValueError):
        return None, None
    return sem_init, semlock


_SEM_INIT, _SEMLOCK = _native()


def _semaphore(address: int) -> Any:
    """A lock (a semaphore of at most 1) on the process-shared semaphore at ``address``."""
    return _SEMLOCK._rebuild(address, _SEMAPHORE, 1, None)


class _Reading:
    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock):
        self._lock = lock

    def __enter__(self) -> None:
        lock = self._lock
        with lock._count:
            lock._readers[0] += 1
            if lock._readers[0] == 1:
                try:
                    lock._write.acquire()
                except BaseException:  # (interrupted while waiting for the writer)
                    lock._readers[0] -= 1
                    raise

    def __exit__(self, *exc: object) -> None:
        lock = self._lock
        with lock._count:
            lock._readers[0] -= 1
            if lock._readers[0] == 0:
                lock._write.release()


class _Writing:
    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock):
        self._lock = lock

    def __enter__(self) -> None:
        self._lock._write.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock._write.release()


class RWLock:
    """Many readers or one writer, across processes (readers first: a writer waits until
    no reader holds the lock); readers may nest. Works between threads, and with children
    started by fork, forkserver or spawn (it pickles as the same lock).

    ``with lock.read_lock(): ...`` and ``with lock.write_lock(): ...``."""

    def __init__(self) -> None:
        self._memory = np_mp_array(_READERS + 8, np.uint8)  # the semaphores, the count
        self._named: tuple[Any, Any] | None = None
        base = self._memory.ctypes.data
        if _SEM_INIT is None or any(
            _SEM_INIT(ctypes.c_void_p(base + offset), 1, 1) != 0 for offset in (_WRITE, _COUNT)
        ):
            ctx = mp.get_context("spawn")  # spawn-made locks also pass to fork children
            self._named = (ctx.Lock(), ctx.Lock())
        self._attach()

    def _attach(self) -> None:
        """This process's handles on the shared state."""
        memory = self._memory
        self._readers = memoryview(memory[_READERS:]).cast("q")  # type: ignore[arg-type]
        if self._named is not None:
            self._write, self._count = self._named
        else:
            base = memory.ctypes.data
            self._write, self._count = _semaphore(base + _WRITE), _semaphore(base + _COUNT)
        self._reading, self._writing = _Reading(self), _Writing(self)

    def __getstate__(self) -> dict[str, Any]:
        return {"memory": self._memory, "named": self._named}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._memory, self._named = state["memory"], state["named"]
        self._attach()

    def read_lock(self) -> _Reading:
        """A context manager: held by readers together."""
        return self._reading

    def write_lock(self) -> _Writing:
        """A context manager: held by one writer alone."""
        return self._writing
