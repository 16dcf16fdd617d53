"""Child processes (sampler workers, an asynchronous runner's sampler and copier) that leave
Ctrl-C and the stop signals to the main process, and never outlive it.

A terminal's Ctrl-C, a scheduler's SIGTERM and SLURM's SIGUSR1 reach the whole process group;
the main process handles them (it finishes its iteration, checkpoints) and ends its children
itself, so the children ignore them. They are held back while a child starts, so that none
ends it before it has set itself to ignore them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator

__all__ = ["CHILD_IGNORED_SIGNALS", "enter_child", "signals_held_for_children"]

CHILD_IGNORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name)
)


@contextlib.contextmanager
def signals_held_for_children(start_method: str | None = None) -> Iterator[None]:
    """Hold back ``CHILD_IGNORED_SIGNALS`` in this thread while it starts processes with
    ``start_method``: a child inherits the mask (under fork, spawn, and the fork server
    started meanwhile) and keeps them held until ``enter_child``. Those that came meanwhile
    reach this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # (no signal masks: Windows)
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, CHILD_IGNORED_SIGNALS)
    try:
        if start_method in ("spawn", "forkserver"):
            # multiprocessing starts its resource tracker (for those two) with SIGINT and
            # SIGTERM held, then unblocks them, whatever the mask was: start it first, and
            # hold them again.
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, CHILD_IGNORED_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def enter_child(main_pid: int) -> None:
    """In a child, first thing: ignore ``CHILD_IGNORED_SIGNALS`` (the main process ends the
    children itself, SIGKILL for a busy one) and die with the main process (on Linux the
    kernel kills this process when its parent dies: the main process, or a fork server that
    dies with it)."""
    for signum in CHILD_IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # (held back while this process started)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD_IGNORED_SIGNALS)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    try:
        os.kill(main_pid, 0)
    except ProcessLookupError:  # it died before we could ask to follow it
        os._exit(1)
