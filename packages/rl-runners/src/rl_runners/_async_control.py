"""What the asynchronous runner's processes share: a control block on shared memory without a
name (so a ``kill -9`` of the group leaves nothing in /dev/shm), token pipes for the halves of
the double buffer, and the pipes the children report on."""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

import numpy as np

from rl_arrays import np_mp_array

__all__ = [
    "COPIED",
    "NEW_RUN",
    "POLL_S",
    "QUIT",
    "START",
    "THROTTLE",
    "Control",
    "Tokens",
    "begin",
    "report",
    "wait_for",
]

# Slots of the shared state array: the quit flag, batches copied, the optimizer's throttle
# point, the first sampler iteration (-1 until the main process lets the children begin) and
# whether the run is a new one (not a resume: AsyncRlEval evaluates before its first batch).
QUIT, COPIED, THROTTLE, START, NEW_RUN = range(5)
POLL_S = 0.001  # waiting steps of the optimizer and the sampler


class Tokens:
    """A semaphore between two processes over a pipe: ``release`` puts a token (a byte) in,
    ``acquire`` takes one out (one process takes, one gives)."""

    def __init__(self, ctx: BaseContext, value: int):
        self._out, self._in = ctx.Pipe(duplex=False)
        for _ in range(value):
            self.release()

    def release(self) -> None:
        os.write(self._in.fileno(), b"\1")

    def acquire(self, ctrl: Control) -> bool:
        """Wait for a token; False when told to quit first."""
        while not self._out.poll(0.05):
            if ctrl.quit:
                return False
        os.read(self._out.fileno(), 1)
        return True

    def close(self) -> None:
        self._out.close()
        self._in.close()


class Control:
    """What the processes share (passed to the children at their start): counters on shared
    memory and pipes, nothing with a name in the file system."""

    def __init__(self, ctx: BaseContext):
        self.state = np_mp_array(5, np.float64)
        self.state[START] = -1
        self.ready = [Tokens(ctx, 0), Tokens(ctx, 0)]
        self.copied = [Tokens(ctx, 1), Tokens(ctx, 1)]
        # sampler -> main: ("train", itr, traj_infos), ("eval", n_batches, infos, seconds)
        # and ("error", "sampler", traceback, exception); copier -> main: ("error", ...)
        self.from_sampler, self.sampler_end = ctx.Pipe(duplex=False)
        self.from_copier, self.copier_end = ctx.Pipe(duplex=False)

    @property
    def quit(self) -> bool:
        return bool(self.state[QUIT])

    def close(self) -> None:
        for tokens in self.ready + self.copied:
            tokens.close()
        for end in (self.from_sampler, self.sampler_end, self.from_copier, self.copier_end):
            end.close()


def report(end: Connection, name: str, error: BaseException) -> None:
    """Tell the main process how child ``name`` failed: its traceback, and the exception
    itself when it pickles (a sampler's ``WorkerError`` is raised as such there)."""
    trace = traceback.format_exc()
    with contextlib.suppress(OSError):  # (the main process is gone)
        try:
            end.send(("error", name, trace, error))
        except Exception:  # (it does not pickle)
            end.send(("error", name, trace, None))


def begin(ctrl: Control) -> int | None:
    """Wait until the main process lets the children begin (after a resume's restore);
    the first sampler iteration, or None when told to quit first."""
    if not wait_for(ctrl, lambda: ctrl.state[START] >= 0):
        return None
    return int(ctrl.state[START])


def wait_for(ctrl: Control, ready: Callable[..., bool]) -> bool:
    """Poll until ``ready()``; False when told to quit first."""
    while not ready():
        if ctrl.quit:
            return False
        time.sleep(POLL_S)
    return True
