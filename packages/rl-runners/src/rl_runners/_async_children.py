"""The asynchronous runner's children as its main process sees them: the memory copier and the
sampler's process, started with the stop signals held; their messages, how one failed, a
watchdog for a main thread stuck on what a dead child held, and their end."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

import psutil
import torch.multiprocessing  # noqa: F401  (registers the pickling of shared tensors)

from rl_arrays import signals_held_for_children

from ._async_control import QUIT, THROTTLE, Control
from ._async_copier import memory_copier
from ._async_sampler import run_async_sampler
from ._protocols import AsyncSamplerProtocol, SharedReplay

__all__ = ["CHECK_S", "Children", "start_children", "start_method_for"]

CHECK_S = 0.1  # how often the main process looks at its children while it waits
_JOIN_S = 15.0  # for children to end by themselves (a parallel sampler joins its workers)
_WATCHDOG_S = 3.0  # a child died and the main process has not noticed: it is stuck


def start_method_for(start_method: str | None) -> str:
    """``start_method``, else the platform's, but spawn where this process runs threads."""
    if start_method is not None:
        return start_method
    method = mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]
    if method == "fork" and psutil.Process().num_threads() > 1:
        return "spawn"
    return method


def start_children(
    method: str,
    n_itr: int,
    throttle: float,
    *,
    double_buffer: tuple[Any, Any],
    samples_to_buffer: Callable[[Any], Any],
    replay_buffer: SharedReplay,
    sampler: AsyncSamplerProtocol,
    sampler_affinity: Mapping[str, Any],
    max_lead: int,
    eval_interval: int | None,
    min_itr_learn: int,
) -> Children:
    """The memory copier and the sampler's process, started with ``method``; they wait for
    the main process to set the control block's first iteration (``START``)."""
    ctx = mp.get_context(method)
    ctrl = Control(ctx)
    ctrl.state[THROTTLE] = throttle
    main_pid = os.getpid()
    # (typeshed types get_context(str) as a BaseContext, without the Process class that
    # the context of each start method has)
    ProcessCls: type[BaseProcess] = ctx.Process  # type: ignore[attr-defined]
    copier = ProcessCls(
        target=memory_copier,
        name="memory copier",
        args=(double_buffer, samples_to_buffer, replay_buffer, ctrl, n_itr, main_pid),
        daemon=True,
    )
    sampler_process = ProcessCls(  # not a daemon: a parallel sampler starts workers
        target=run_async_sampler,
        name="sampler",
        args=(
            sampler,
            sampler_affinity,
            ctrl,
            n_itr,
            main_pid,
            max_lead,
            eval_interval,
            min_itr_learn,
        ),
    )
    return Children(ctrl, [copier, sampler_process], method)


class Children:
    """The sampler's process and the memory copier, as the main process sees them: started
    with the stop signals held, their messages, how one failed, a watchdog, and their end."""

    def __init__(self, ctrl: Control, processes: list[BaseProcess], start_method: str):
        self.ctrl, self.processes = ctrl, processes
        self.error: tuple[str, str, BaseException | None] | None = None  # (name, trace, exc)
        self.watchdog_fired = False
        self._ignored_sigint = False
        for process in processes:
            with signals_held_for_children(start_method):
                process.start()
        self._watchdog_stop = threading.Event()
        self._watchdog = self._start_watchdog()

    def messages(self) -> list[tuple[Any, ...]]:
        """What the children have sent since: ``("train", itr, traj_infos)`` and ``("eval",
        n_batches, infos, seconds)``, in order; a failure is kept in ``error``."""
        news = []
        for end in (self.ctrl.from_sampler, self.ctrl.from_copier):
            while end.poll():
                message = end.recv()
                if message[0] != "error":
                    news.append(message)
                elif self.error is None:
                    self.error = message[1:]
        return news

    def failure(self, news: list[tuple[Any, ...]]) -> BaseException | None:
        """What went wrong in a child, if anything, as the exception to raise: a
        ``ChildProcessError`` it raised (a sampler's ``WorkerError``: one line), else a
        RuntimeError with its traceback, or saying how it died. Messages read meanwhile go
        into ``news``."""
        dead = [p for p in self.processes if p.exitcode not in (None, 0)]
        deadline = time.monotonic() + 1.0
        while self.error is None and dead and time.monotonic() < deadline:
            # (a dying child's traceback may still be on its way)
            wait([self.ctrl.from_sampler, self.ctrl.from_copier], deadline - time.monotonic())
            news += self.messages()
        if self.error is not None:
            self._watchdog_stop.set()
            name, trace, error = self.error
            if isinstance(error, ChildProcessError):
                return error
            return RuntimeError(f"the {name} process failed:\n{trace}")
        if not dead:
            return None
        self._watchdog_stop.set()
        code = dead[0].exitcode
        assert code is not None  # (it has exited)
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return RuntimeError(f"the {dead[0].name} process died ({how}), leaving no traceback")

    def _start_watchdog(self) -> threading.Thread | None:
        """A thread that interrupts the main thread (SIGINT) when a child has died and the
        main thread has not noticed within ``_WATCHDOG_S``: it is then blocked, e.g. on a
        lock the dead child held. Where Ctrl-C is ignored, a handler is put in place for the
        run that raises on the watchdog's interrupt only; where another handler is set, there
        is no watchdog."""
        if threading.current_thread() is not threading.main_thread():
            return None
        handler = signal.getsignal(signal.SIGINT)
        if handler is signal.SIG_IGN:  # (e.g. a background job) Ctrl-C stays ignored, but
            # the watchdog's interrupt needs a handler to reach a thread blocked on a lock
            self._ignored_sigint = True
            signal.signal(signal.SIGINT, self._watchdog_interrupt)
        elif handler is not signal.default_int_handler:
            return None
        main_ident = threading.main_thread().ident
        assert main_ident is not None  # (a running thread has one)
        stop, processes = self._watchdog_stop, list(self.processes)

        def watch() -> None:
            while not stop.wait(CHECK_S):
                if any(p.exitcode not in (None, 0) for p in processes):
                    if not stop.wait(_WATCHDOG_S):
                        self.watchdog_fired = True
                        signal.pthread_kill(main_ident, signal.SIGINT)
                    return

        watchdog = threading.Thread(target=watch, name="AsyncRl watchdog", daemon=True)
        watchdog.start()
        return watchdog

    def _watchdog_interrupt(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT while Ctrl-C is ignored: only the watchdog's interrupt raises."""
        if self.watchdog_fired:
            raise KeyboardInterrupt

    def stop(self) -> None:
        """End the children: tell them to quit, wait for them a while (reading what they
        send meanwhile), kill those still running (they ignore SIGTERM), close the pipes."""
        ctrl, processes = self.ctrl, self.processes
        self._watchdog_stop.set()
        if self._watchdog is not None:
            self._watchdog.join()  # (before the processes close; it wakes at once)
            self._watchdog = None
        if self._ignored_sigint:  # (this runs in the main thread, as the start did)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self._ignored_sigint = False
        ctrl.state[QUIT] = 1
        ends = {"sampler": ctrl.from_sampler, "memory copier": ctrl.from_copier}
        try:
            deadline = time.monotonic() + _JOIN_S
            for process in processes:
                while process.is_alive() and time.monotonic() < deadline:
                    # A child blocked sending (a full pipe) exits once its message is read:
                    # read them. (Only from a live child: a dead one may have left half a
                    # message.)
                    for child in processes:
                        if child.is_alive() and child.name in ends:
                            _drain(ends[child.name])
                    process.join(0.05)
        finally:
            for process in processes:
                if process.is_alive():
                    process.kill()
            for process in processes:
                process.join(5)
                process.close()
            ctrl.close()


def _drain(end: Connection) -> None:
    with contextlib.suppress(OSError, EOFError):
        while end.poll():
            end.recv()
