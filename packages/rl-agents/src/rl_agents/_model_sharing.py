"""Sharing an agent's model between processes: the lock over the shared model, and the
copies into and out of it that asynchronous mode counts (``BaseAgent``'s parameter sharing;
the package README describes the modes)."""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any

import torch

__all__ = ["PipeLock", "publish", "receive"]


class PipeLock:
    """The lock over an agent's shared model, between processes: its one token is a byte in
    a pipe, which ``acquire`` takes out (waiting in the kernel; a signal interrupts the wait,
    Ctrl-C raises there) and ``release`` puts back. The pipe passes to children as file
    descriptors under every start method: nothing has a name in /dev/shm, so nothing is left
    there however the processes end (a multiprocessing lock under spawn is a named
    semaphore, which a ``kill -9`` of the whole group leaves behind)."""

    def __init__(self) -> None:
        self._reader, self._writer = mp.Pipe(duplex=False)
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        mp.context.assert_spawning(self)  # (as a multiprocessing lock: to children only)
        return {"reader": self._reader, "writer": self._writer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._reader, self._writer = state["reader"], state["writer"]

    def acquire(self) -> None:
        os.read(self._reader.fileno(), 1)

    def release(self) -> None:
        os.write(self._writer.fileno(), b"\1")

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def publish(
    model: torch.nn.Module, shared: torch.nn.Module, send_count: torch.Tensor, lock: PipeLock
) -> None:
    """Under ``lock``: copy ``model``'s parameters into ``shared`` (unless it is ``shared``)
    and count the update in ``send_count``."""
    with lock:
        if model is not shared:
            shared.load_state_dict(model.state_dict())
        send_count.add_(1)


def receive(
    model: torch.nn.Module, shared: torch.nn.Module, send_count: torch.Tensor, lock: PipeLock
) -> int:
    """Under ``lock``: copy ``shared``'s parameters into ``model``; returns the count of
    updates they hold."""
    with lock:
        model.load_state_dict(shared.state_dict())
        return int(send_count)
