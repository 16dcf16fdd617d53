"""Preemption: SIGTERM (a scheduler's stop, a cgroup's kill warning) and SIGUSR1 (SLURM's early
warning with ``--signal``) ask a run to stop after its current iteration, with a checkpoint; a
second such signal stops it at once."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

__all__ = ["STOP_SIGNALS", "StopRequest", "stop_requested_by_signals"]

STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name)
)


class StopRequest:
    """``signal``: the name of the signal that asked the run to stop (None: not asked)."""

    def __init__(self) -> None:
        self.signal: str | None = None


@contextlib.contextmanager
def stop_requested_by_signals() -> Iterator[StopRequest]:
    """Inside the block, a first stop signal sets the request (the loop finishes its
    iteration, checkpoints and returns); a second raises SystemExit(128 + signal) at once.
    Outside the main thread (no signals there) the request is never set."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if request.signal is not None:
            raise SystemExit(128 + signum)
        request.signal = name
        os.write(
            2,
            f"\n{name}: stopping after this iteration, with a checkpoint ({name} "
            "again to stop at once)\n".encode(),
        )

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield request
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
