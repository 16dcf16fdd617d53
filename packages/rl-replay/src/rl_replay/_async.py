"""Replay buffers shared between processes, for the asynchronous runner.

All storage (samples, returns, frames, the priority tree) and the cursor live on OS shared
memory, guarded by a read-write lock: one writer (appending samples or updating
priorities) or many readers (sampling batches) at a time.  Send a buffer to another process
as a ``Process`` argument (any start method); both sides then see the same data.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from rl_arrays import np_mp_array

from ._non_sequence import (
    PrioritizedReplayBuffer,
    PrioritizedReplayFrameBuffer,
    TlPrioritizedReplayBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
)
from ._sequence import (
    PrioritizedSequenceReplayBuffer,
    PrioritizedSequenceReplayFrameBuffer,
    UniformSequenceReplayBuffer,
    UniformSequenceReplayFrameBuffer,
)

__all__ = [
    "AsyncPrioritizedReplayBuffer",
    "AsyncPrioritizedReplayFrameBuffer",
    "AsyncPrioritizedSequenceReplayBuffer",
    "AsyncPrioritizedSequenceReplayFrameBuffer",
    "AsyncReplayBufferMixin",
    "AsyncTlPrioritizedReplayBuffer",
    "AsyncTlUniformReplayBuffer",
    "AsyncUniformReplayBuffer",
    "AsyncUniformReplayFrameBuffer",
    "AsyncUniformSequenceReplayBuffer",
    "AsyncUniformSequenceReplayFrameBuffer",
    "RWLock",
]


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


class AsyncReplayBufferMixin:
    """Puts a buffer on shared memory and guards it with a ``RWLock``."""

    shared_memory: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any):
        self.rw_lock = RWLock()
        super().__init__(*args, **kwargs)

    def _writing(self) -> contextlib.AbstractContextManager[Any]:
        return self.rw_lock.write_lock()

    def _reading(self) -> contextlib.AbstractContextManager[Any]:
        return self.rw_lock.read_lock()


class AsyncUniformReplayBuffer(AsyncReplayBufferMixin, UniformReplayBuffer):
    """``UniformReplayBuffer`` on shared memory."""


class AsyncPrioritizedReplayBuffer(AsyncReplayBufferMixin, PrioritizedReplayBuffer):
    """``PrioritizedReplayBuffer`` on shared memory."""


class AsyncUniformReplayFrameBuffer(AsyncReplayBufferMixin, UniformReplayFrameBuffer):
    """``UniformReplayFrameBuffer`` on shared memory."""


class AsyncPrioritizedReplayFrameBuffer(AsyncReplayBufferMixin, PrioritizedReplayFrameBuffer):
    """``PrioritizedReplayFrameBuffer`` on shared memory."""


class AsyncTlUniformReplayBuffer(AsyncReplayBufferMixin, TlUniformReplayBuffer):
    """``TlUniformReplayBuffer`` on shared memory."""


class AsyncTlPrioritizedReplayBuffer(AsyncReplayBufferMixin, TlPrioritizedReplayBuffer):
    """``TlPrioritizedReplayBuffer`` on shared memory."""


class AsyncUniformSequenceReplayBuffer(AsyncReplayBufferMixin, UniformSequenceReplayBuffer):
    """``UniformSequenceReplayBuffer`` on shared memory."""


class AsyncPrioritizedSequenceReplayBuffer(AsyncReplayBufferMixin, PrioritizedSequenceReplayBuffer):
    """``PrioritizedSequenceReplayBuffer`` on shared memory."""


class AsyncUniformSequenceReplayFrameBuffer(
    AsyncReplayBufferMixin, UniformSequenceReplayFrameBuffer
):
    """``UniformSequenceReplayFrameBuffer`` on shared memory."""


class AsyncPrioritizedSequenceReplayFrameBuffer(
    AsyncReplayBufferMixin, PrioritizedSequenceReplayFrameBuffer
):
    """``PrioritizedSequenceReplayFrameBuffer`` on shared memory."""
