"""Asynchronous runners: sampling and optimization at the same time, in separate processes
(rlpyt's ``AsyncRl``), e.g. the CPUs busy stepping environments while a GPU trains.

The sampler's process writes the two halves of a double buffer in turn; one memory copier
moves each written half into the algorithm's replay buffer, in sampling order; the optimizer
trains in this process from the replay alone and alone logs. The optimizer never trains
beyond the replay ratio, and the sampler waits when it runs ``max_sampler_lead`` iterations
ahead, so the measured ratio holds the setting. A failed child is raised here within a
fraction of a second. The processes talk over pipes and shared memory without a name, so a
``kill -9`` of the whole group leaves nothing in /dev/shm. Processes, synchronization,
pacing, stop signals and resume: the package README, "Asynchronous runners".
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, cast

import numpy as np
import psutil
import torch.multiprocessing  # noqa: F401  (registers the pickling of shared tensors)

from rl_arrays import enter_child, np_mp_array, signals_held_for_children

from ._evaluator import EvalSampler, Evaluator
from ._logger import logger
from ._minibatch_rl import MinibatchRl, mid_batch_reset, set_master_affinity
from ._progress import algo_batch_size
from ._protocols import AsyncAgentProtocol, AsyncAlgoProtocol, AsyncSamplerProtocol, SharedReplay
from ._seed import make_seed, seed_after, set_seed
from ._stop_signals import stop_requested_by_signals
from ._values import positive_int

__all__ = ["AsyncRl", "AsyncRlBase", "AsyncRlEval"]

# Slots of the shared state array: the quit flag, batches copied, the optimizer's throttle
# point, the first sampler iteration (-1 until the main process lets the children begin) and
# whether the run is a new one (not a resume: AsyncRlEval evaluates before its first batch).
_QUIT, _COPIED, _THROTTLE, _START, _NEW_RUN = range(5)
_POLL_S = 0.001  # waiting steps of the optimizer and the sampler
_CHECK_S = 0.1  # how often the main process looks at its children while it waits
_JOIN_S = 15.0  # for children to end by themselves (a parallel sampler joins its workers)
_WATCHDOG_S = 3.0  # a child died and the main process has not noticed: it is stuck


class _Tokens:
    """A semaphore between two processes over a pipe: ``release`` puts a token (a byte) in,
    ``acquire`` takes one out (one process takes, one gives)."""

    def __init__(self, ctx: BaseContext, value: int):
        self._out, self._in = ctx.Pipe(duplex=False)
        for _ in range(value):
            self.release()

    def release(self) -> None:
        os.write(self._in.fileno(), b"\1")

    def acquire(self, ctrl: _Control) -> bool:
        """Wait for a token; False when told to quit first."""
        while not self._out.poll(0.05):
            if ctrl.quit:
                return False
        os.read(self._out.fileno(), 1)
        return True

    def close(self) -> None:
        self._out.close()
        self._in.close()


class _Control:
    """What the processes share (passed to the children at their start): counters on shared
    memory and pipes, nothing with a name in the file system."""

    def __init__(self, ctx: BaseContext):
        self.state = np_mp_array(5, np.float64)
        self.state[_START] = -1
        self.ready = [_Tokens(ctx, 0), _Tokens(ctx, 0)]
        self.copied = [_Tokens(ctx, 1), _Tokens(ctx, 1)]
        # sampler -> main: ("train", itr, traj_infos), ("eval", n_batches, infos, seconds)
        # and ("error", "sampler", traceback, exception); copier -> main: ("error", ...)
        self.from_sampler, self.sampler_end = ctx.Pipe(duplex=False)
        self.from_copier, self.copier_end = ctx.Pipe(duplex=False)

    @property
    def quit(self) -> bool:
        return bool(self.state[_QUIT])

    def close(self) -> None:
        for tokens in self.ready + self.copied:
            tokens.close()
        for end in (self.from_sampler, self.sampler_end, self.from_copier, self.copier_end):
            end.close()


# ------------------------------------------------------------------ the child processes


def _report(end: Connection, name: str, error: BaseException) -> None:
    """Tell the main process how child ``name`` failed: its traceback, and the exception
    itself when it pickles (a sampler's ``WorkerError`` is raised as such there)."""
    trace = traceback.format_exc()
    with contextlib.suppress(OSError):  # (the main process is gone)
        try:
            end.send(("error", name, trace, error))
        except Exception:  # (it does not pickle)
            end.send(("error", name, trace, None))


def _begin(ctrl: _Control) -> int | None:
    """Wait until the main process lets the children begin (after a resume's restore);
    the first sampler iteration, or None when told to quit first."""
    if not _wait_for(ctrl, lambda: ctrl.state[_START] >= 0):
        return None
    return int(ctrl.state[_START])


def _wait_for(ctrl: _Control, ready: Callable[..., bool]) -> bool:
    """Poll until ``ready()``; False when told to quit first."""
    while not ready():
        if ctrl.quit:
            return False
        time.sleep(_POLL_S)
    return True


def run_async_sampler(
    sampler: AsyncSamplerProtocol,
    affinity: Mapping[str, Any],
    ctrl: _Control,
    n_itr: int,
    main_pid: int,
    max_lead: int,
    eval_interval: int | None,
    min_itr_learn: int,
) -> None:
    """The sampler's process: from the first iteration the main process gives (0, or where
    a resumed run stopped) to ``n_itr``, batches into the halves of the double buffer in
    turn, each once the copier has freed it and the sampler is at most ``max_lead``
    iterations ahead of the optimizer; with ``eval_interval`` an evaluation before the first
    batch of a new run (not a resumed one) and after every ``eval_interval`` batches, once
    the optimizer has trained on them. A failure is sent to the main process, which raises
    it."""
    enter_child(main_pid)
    evaluating = cast(EvalSampler, sampler)  # (with eval_interval: checked at construction)
    try:
        sampler.initialize(affinity)
        try:
            start = _begin(ctrl)
            if start is None:
                return
            if eval_interval is not None and ctrl.state[_NEW_RUN]:
                _evaluate(evaluating, ctrl, 0, min_itr_learn)
            for itr in range(start, n_itr):
                if not _wait_for(ctrl, lambda i=itr: i < ctrl.state[_THROTTLE] + max_lead):
                    return
                db_idx = itr % 2
                if not ctrl.copied[db_idx].acquire(ctrl):
                    return
                traj_infos = list(sampler.obtain_samples(itr, db_idx))
                ctrl.sampler_end.send(("train", itr, traj_infos))
                ctrl.ready[db_idx].release()
                if eval_interval is not None and (itr + 1) % eval_interval == 0:
                    if not _wait_for(ctrl, lambda i=itr: ctrl.state[_THROTTLE] >= i + 1):
                        return
                    _evaluate(evaluating, ctrl, itr + 1, min_itr_learn)
        finally:
            sampler.shutdown()
    except Exception as error:
        _report(ctrl.sampler_end, "sampler", error)
        sys.exit(1)  # (the main process raises it: not printed twice)


def _evaluate(sampler: EvalSampler, ctrl: _Control, n_batches: int, min_itr_learn: int) -> None:
    """An evaluation after ``n_batches`` batches (skipped before the learning starts, as
    the ``Evaluator`` does), sent to the main process."""
    itr = max(n_batches - 1, 0)
    infos: list[Any] = []
    start = time.time()
    if not Evaluator.skips(itr, min_itr_learn):
        infos = list(sampler.evaluate_agent(itr))
    ctrl.sampler_end.send(("eval", n_batches, infos, time.time() - start))


def memory_copier(
    sample_buffers: Sequence[Any],
    samples_to_buffer: Callable[[Any], Any],
    replay_buffer: SharedReplay,
    ctrl: _Control,
    n_itr: int,
    main_pid: int,
) -> None:
    """The memory copier's process: each written half of the double buffer, in order, into
    the replay buffer (whose ``append_samples`` holds its write lock), then freed."""
    enter_child(main_pid)
    try:
        import torch

        torch.set_num_threads(1)  # (samples_to_buffer may compute, e.g. input priorities)
        start = _begin(ctrl)
        if start is None:
            return
        for itr in range(start, n_itr):
            db_idx = itr % 2
            if not ctrl.ready[db_idx].acquire(ctrl):
                return
            replay_buffer.append_samples(samples_to_buffer(sample_buffers[db_idx]))
            ctrl.state[_COPIED] = itr + 1
            ctrl.copied[db_idx].release()
    except Exception as error:
        _report(ctrl.copier_end, "memory copier", error)
        sys.exit(1)


class _Children:
    """The sampler's process and the memory copier, as the main process sees them: started
    with the stop signals held, their messages, how one failed, a watchdog, and their end."""

    def __init__(self, ctrl: _Control, processes: list[BaseProcess], start_method: str):
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
            while not stop.wait(_CHECK_S):
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
        ctrl.state[_QUIT] = 1
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


# ------------------------------------------------------------------ the runners


def _split_affinity(affinity: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(sampler's, optimizer's)`` from ``{"sampler": {...}, "optimizer": [{...}]}`` (what
    ``rl_launch.affinity_from_code`` gives with ``async_sample``) or None."""
    if affinity is None:
        return {}, {}
    shape = 'a dict {"sampler": {...}, "optimizer": [{...}]} (rl_launch\'s async affinity) or None'
    if not isinstance(affinity, Mapping) or not set(affinity) <= {"sampler", "optimizer"}:
        raise ValueError(f"affinity must be {shape}, got {affinity!r}")
    sampler = affinity.get("sampler") or {}
    optimizer = affinity.get("optimizer") or [{}]
    if isinstance(optimizer, Mapping):
        optimizer = [optimizer]
    if not isinstance(sampler, Mapping) or not all(isinstance(o, Mapping) for o in optimizer):
        raise ValueError(f"affinity must be {shape}, got {affinity!r}")
    if len(optimizer) != 1:
        raise ValueError(
            f"affinity['optimizer'] lists {len(optimizer)} optimizer processes; the async "
            "runners train in one (no multi-GPU DistributedDataParallel): give one entry"
        )
    return dict(sampler), dict(optimizer[0])


class AsyncRl(MinibatchRl):
    """Runs the sampler and the optimizer asynchronously; the algorithm must keep its replay
    buffer on shared memory (``async_initialize``), the sampler be an asynchronous one.

    Arguments as ``MinibatchRl``'s, ``n_steps`` counting sampler steps. ``affinity``:
    ``{"sampler": {...}, "optimizer": [{...}]}`` (``rl_launch.encode_affinity(
    async_sample=True)``), one optimizer only. ``max_sampler_lead``: how many iterations the
    sampler may run ahead of what the optimizer has trained on (at least 1).
    ``start_method``: "fork", "forkserver" or "spawn" (None: the platform's, but spawn where
    this process runs threads); under spawn or forkserver the sampler and the algorithm must
    pickle. Rows add ``OptThrottle`` (seconds the optimizer waited). SIGTERM or SIGUSR1
    stops the run with a snapshot, as ``MinibatchRl``'s; ``resume`` restarts the
    environments (snapshots keep no sampler state). Details: the package README,
    "Asynchronous runners".
    """

    _protocols = (AsyncAlgoProtocol, AsyncAgentProtocol, AsyncSamplerProtocol)
    # Its parts meet those protocols, not MinibatchRl's: AsyncRl overrides every method of
    # MinibatchRl that calls what only MinibatchRl's declare.
    algo: AsyncAlgoProtocol  # type: ignore[assignment]
    agent: AsyncAgentProtocol  # type: ignore[assignment]
    sampler: AsyncSamplerProtocol  # type: ignore[assignment]

    def __init__(
        self,
        algo: AsyncAlgoProtocol,
        agent: AsyncAgentProtocol,
        sampler: AsyncSamplerProtocol,
        n_steps: int | float,
        seed: int | None = None,
        affinity: Mapping[str, Any] | None = None,
        log_interval_steps: int | float = 1e5,
        checkpoint_replay: bool = False,
        max_sampler_lead: int = 2,
        start_method: str | None = None,
        **kwargs: Any,
    ):
        sampler_affinity, optimizer_affinity = _split_affinity(affinity)
        self.max_sampler_lead = positive_int("max_sampler_lead", max_sampler_lead)
        if start_method is not None and start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"start_method must be None or one of {mp.get_all_start_methods()}, got "
                f"{start_method!r}"
            )
        self.start_method = start_method
        super().__init__(
            algo,  # type: ignore[arg-type]  # (see the class attributes)
            agent,  # type: ignore[arg-type]
            sampler,  # type: ignore[arg-type]
            n_steps,
            seed=seed,
            affinity=optimizer_affinity,
            log_interval_steps=log_interval_steps,
            checkpoint_replay=checkpoint_replay,
            **kwargs,
        )
        ratio = algo.replay_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise ValueError(f"algo.replay_ratio must be a number > 0, got {ratio!r}")
        if self.evaluator is not None and getattr(sampler, "eval_n_envs", 1) == 0:
            raise ValueError(f"{type(self).__name__} evaluates: the sampler needs eval_n_envs > 0")
        self.sampler_affinity = sampler_affinity
        self._children: _Children | None = None

    def get_n_itr(self) -> int:
        logger.log(f"Running {self.n_itr} sampler iterations of asynchronous RL.")
        return self.n_itr

    def start_method_used(self) -> str:
        """The start method the children get (see the class)."""
        if self.start_method is not None:
            return self.start_method
        method = mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]
        if method == "fork" and psutil.Process().num_threads() > 1:
            return "spawn"
        return method

    # ----------------------------------------------------------- startup

    def startup(self) -> int:
        """Seed, ``sampler.async_initialize`` (the agent and the double buffer on shared
        memory), ``algo.async_initialize`` (the replay buffer on shared memory), start the
        memory copier and the sampler's process (they wait for ``_start`` to let them
        begin), then prepare the optimizer here: the agent to its device,
        ``algo.optim_initialize``, the pacing."""
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        resumed_at = self._resuming_at
        double_buffer, examples = self.sampler.async_initialize(
            self.agent,
            bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(),
            # (a resumed run's environments restart: not as the run's first ones did)
            seed=self.seed if resumed_at is None else seed_after(self.seed, 0, resumed_at),
        )
        n_itr = self.get_n_itr()
        replay_buffer = self.algo.async_initialize(
            self.agent,
            sampler_n_itr=n_itr,
            batch_spec=self.sampler.batch_spec,
            mid_batch_reset=mid_batch_reset(self.sampler),
            examples=examples,
            world_size=1,
        )
        self.min_itr_learn = int(getattr(self.algo, "min_itr_learn", 0))
        updates = getattr(self.algo, "updates_per_optimize", 1)
        # Sampler iterations of data each optimize_agent call consumes at the replay ratio.
        self._itrs_per_call = (
            updates
            * algo_batch_size(self.algo, self.itr_batch_size)
            / (self.algo.replay_ratio * self.itr_batch_size)
        )
        self._opt_calls = 0
        self._learn_from: float = self.min_itr_learn + 1  # batches copied before updates
        self._launch(double_buffer, replay_buffer, n_itr)
        # Only now: children inherit the CPU affinity, and CUDA must not precede a fork.
        self._restore_affinity = set_master_affinity(self.affinity)
        self.agent.to_device(self.affinity.get("cuda_idx"))
        self.algo.optim_initialize(rank=0)
        self.modes.switch("train", 0)
        self.initialize_logging()
        return n_itr

    _resuming_at: int | None = None  # (the checkpoint's next_itr, during a resume's startup)

    def _launch(
        self, double_buffer: tuple[Any, Any], replay_buffer: SharedReplay, n_itr: int
    ) -> None:
        method = self.start_method_used()
        logger.log(f"Starting the sampler's process and the memory copier ({method}).")
        ctx = mp.get_context(method)
        ctrl = _Control(ctx)
        ctrl.state[_THROTTLE] = self._throttle_point()
        main_pid = os.getpid()
        # (typeshed types get_context(str) as a BaseContext, without the Process class that
        # the context of each start method has)
        ProcessCls: type[BaseProcess] = ctx.Process  # type: ignore[attr-defined]
        copier = ProcessCls(
            target=memory_copier,
            name="memory copier",
            args=(double_buffer, self.algo.samples_to_buffer, replay_buffer, ctrl, n_itr, main_pid),
            daemon=True,
        )
        sampler = ProcessCls(  # not a daemon: a parallel sampler starts workers
            target=run_async_sampler,
            name="sampler",
            args=(
                self.sampler,
                self.sampler_affinity,
                ctrl,
                n_itr,
                main_pid,
                self.max_sampler_lead,
                self.log_interval_itrs if self.evaluator is not None else None,
                self.min_itr_learn,
            ),
        )
        self._children = _Children(ctrl, [copier, sampler], method)

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._next_row = self.log_interval_itrs  # sampler iterations the next row covers
        self._received = 0  # trajectory-info messages received (one per batch, in order)
        self._pending: list[tuple[int, list[Any]]] = []  # those of batches past the next row
        self._evals: deque[tuple[int, list[Any], float]] = deque()  # evaluations received
        self._throttle_time = 0.0
        self._last_check = 0.0
        self._finished = False

    def _start(self, restore: tuple | None) -> None:
        """Startup, then the checkpoint's states (``restore``: ``Checkpointer.restore``'s
        arguments) and where the run goes on from; then the children begin (with an
        evaluation, on a fresh ``AsyncRlEval`` run, whose row is written here)."""
        self._resuming_at = None if restore is None else int(restore[1]["next_itr"])
        try:
            self.startup()
        finally:
            self._resuming_at = None
        first_itr = 0
        if restore is not None:
            # (its parts meet the Async* protocols, which have all that restore reads)
            self.checkpointer.restore(self, *restore)  # type: ignore[arg-type]
            first_itr = self._go_on_from(restore[1])
            self._finished = first_itr >= self.n_itr  # (a finished run: nothing to do)
        self._control.state[_NEW_RUN] = restore is None
        self._control.state[_START] = first_itr  # the children begin
        if restore is None and self.evaluator is not None:
            with logger.prefix("itr #0 "):
                self.log_diagnostics(0, *self.evaluate_agent(0))

    def _go_on_from(self, checkpoint: Mapping[str, Any]) -> int:
        """After a resume's restore: the pacing and rows go on from the checkpoint's
        iteration, which the sampler starts at (its environments restarted); the restored
        parameters go to the sampler's model. Without a saved replay buffer learning starts
        again once ``min_itr_learn + 1`` new batches are in. Returns that iteration."""
        next_itr = int(checkpoint["next_itr"])
        updates = max(int(getattr(self.algo, "updates_per_optimize", 1)), 1)
        state = checkpoint["runner_state"]
        self._opt_calls = int(state.get("async_opt_calls", checkpoint["cum_updates"] // updates))
        if checkpoint.get("replay_file") is None or not hasattr(self.algo, "load_replay"):
            self._learn_from = (
                next_itr + self.min_itr_learn + 1 - self._opt_calls * self._itrs_per_call
            )
        ctrl = self._control
        ctrl.state[_COPIED] = next_itr
        ctrl.state[_THROTTLE] = self._throttle_point()
        self._received = next_itr
        self._next_row = (next_itr // self.log_interval_itrs + 1) * self.log_interval_itrs
        self.agent.send_shared_memory()
        if not hasattr(self.sampler, "load_state_dict"):  # (else the checkpointer said so)
            logger.log(
                "The environments restart: an asynchronous run's snapshots keep no "
                "environment state (it lives in the sampler's process)."
            )
        return next_itr

    # --------------------------------------------------------- the loop

    def _run(self, restore: tuple | None) -> None:
        """Startup, then optimize and log until the sampler's last row, or until a stop
        signal (SIGTERM, SIGUSR1: a snapshot, then ``stopped_by`` is set); the children
        end however it ends. A child's failure raises: a ``ChildProcessError`` as it is
        (e.g. a sampler's ``WorkerError``), anything else as a RuntimeError with its
        traceback."""
        completed = False
        try:
            with stop_requested_by_signals() as stop:
                self._start(restore)
                while not self._finished:
                    self._step()
                    if stop.signal is not None and not self._finished:
                        self._stop_now(stop.signal)
                        break
            completed = True
        except KeyboardInterrupt:
            children = self._children
            failure = children.failure([]) if children and children.watchdog_fired else None
            if failure is not None:  # (the watchdog's interrupt: the main process was stuck)
                raise failure from None
            logger.log(f"Interrupted after {self._done_itrs()} sampler iterations.")
            raise
        finally:
            self._shutdown(completed)

    def _step(self) -> None:
        """One turn of the main loop: take the children's news, write a row when one is
        due, else one optimize call when the pacing and the rows allow, else wait a little."""
        self._poll()
        if self.evaluator is not None:
            if self._evals:
                n_batches = self._evals[0][0]
                self._write_row(n_batches)
                self._finished = n_batches >= self.n_itr or self.stop_reached
                return
        elif self._row_due():
            self._write_row(self._next_row)
            self._finished = self._done_itrs() >= self.n_itr
            return
        copied = int(self._control.state[_COPIED])
        # The next row's batches trained on: no more updates until that row is written, so
        # that each row counts exactly its own.
        row_pending = self._throttle_point() >= self._next_row
        if copied >= self._throttle_point() and not row_pending:
            self._optimize(copied)
        else:
            time.sleep(_POLL_S)
            self._throttle_time += _POLL_S

    def _throttle_point(self) -> float:
        """Batches copied the next optimize call needs: learning starts once
        ``min_itr_learn + 1`` are in the replay, each call then consumes its share."""
        return self._learn_from + self._opt_calls * self._itrs_per_call

    def _optimize(self, copied: int) -> None:
        opt_info = self.algo.optimize_agent(self._opt_calls, sampler_itr=copied - 1)
        self._opt_calls += 1
        self.agent.send_shared_memory()
        self._control.state[_THROTTLE] = self._throttle_point()
        self.store_diagnostics(max(self._received - 1, 0), [], opt_info)

    def _row_due(self) -> bool:
        """(online rows) The row's batches are copied, trained on and their infos in."""
        b = self._next_row
        return (
            int(self._control.state[_COPIED]) >= b
            and self._throttle_point() >= b
            and self._received >= b
        )

    def _write_row(self, n_batches: int) -> None:
        """The row (and snapshot) after ``n_batches`` sampler iterations."""
        itr = max(n_batches - 1, 0)
        assert self.progress is not None
        self.progress.next_itr = n_batches
        logger.set_iteration(itr)
        with logger.prefix(f"itr #{itr} "):
            self._log_interval(itr)
        self._next_row = n_batches + self.log_interval_itrs
        pending, self._pending = self._pending, []
        for itr_, infos in pending:
            self._store_infos(itr_, infos)

    def _store_infos(self, itr: int, infos: list[Any]) -> None:
        """Trajectory infos go to the row of their batch (those past it wait)."""
        if itr < self._next_row:
            self.store_diagnostics(itr, infos, None)
        else:
            self._pending.append((itr, infos))

    def _stop_now(self, signal_name: str) -> None:
        """After a stop signal: the snapshot of the batches both copied into the replay and
        counted here (short of the next row, whose batches the sampler then samples again
        on resume), with the parameters trained so far; then a line naming it."""
        assert self.progress is not None and self.guard is not None
        copied = int(self._control.state[_COPIED])
        done = max(self.progress.next_itr, min(self._received, copied, self._next_row - 1))
        self.progress.next_itr = done
        self.guard.check()  # (never a snapshot of non-finite parameters)
        self.stopped_by = signal_name
        path = self.checkpointer.save(self, max(done - 1, 0), True)  # type: ignore[arg-type]
        saved = f"its snapshot is {path}; {self._continue_hint}" if path else "no snapshot kept"
        logger.log(f"Stopped by {signal_name} after {done} sampler iterations: {saved}.")

    def evaluate_agent(self, itr: int) -> tuple[list[Any], float]:
        """(``AsyncRlEval``) The sampler's process evaluates; here its result is taken."""
        assert self.progress is not None
        self.progress.pbar.stop()
        while not self._evals:
            self._poll()
            if not self._evals:
                time.sleep(_POLL_S)
        _, infos, seconds = self._evals.popleft()
        return infos, seconds

    def _poll(self) -> None:
        """Take the children's messages (trajectory infos to their rows, evaluations queued
        for theirs) and, every ``_CHECK_S``, raise a child's failure if there is one."""
        news = self._child_processes.messages()
        now = time.monotonic()
        failure = None
        if now - self._last_check >= _CHECK_S:
            self._last_check = now
            failure = self._child_processes.failure(news)
        for message in news:
            if message[0] == "train":
                self._received += 1
                self._store_infos(message[1], message[2])
            else:
                self._evals.append(message[1:])
        if failure is not None:
            raise failure

    @property
    def _child_processes(self) -> _Children:
        """The children (started)."""
        assert self._children is not None
        return self._children

    @property
    def _control(self) -> _Control:
        """What the processes share (the children were started)."""
        return self._child_processes.ctrl

    # ----------------------------------------------------------- shutdown

    def shutdown(self) -> None:
        """Stop the progress bar, end the children (asking first, then killing: they
        ignore SIGTERM), release what they shared."""
        if self.progress is not None:
            self.progress.pbar.stop()
        if self._children is not None:
            self._children.stop()
            self._children = None
        if self._restore_affinity is not None:
            self._restore_affinity()
        done = self._done_itrs() >= self.n_itr or self.stop_reached
        logger.log("Training complete." if done else "Runner stopped.")

    # ------------------------------------------------------ diagnostics

    def log_diagnostics(
        self,
        itr: int,
        traj_infos: Sequence[Any] | None = None,
        eval_time: float = 0.0,
        prefix: str = "",
    ) -> None:
        """``MinibatchRl``'s row, with ``OptThrottle``: the seconds the optimizer waited."""
        assert self.progress is not None
        self.progress.extra["OptThrottle"], self._throttle_time = self._throttle_time, 0.0
        super().log_diagnostics(itr, traj_infos, eval_time, prefix)

    def runner_state(self) -> dict[str, Any]:
        """``MinibatchRl``'s, with the optimizer's calls (its pacing goes on from them)."""
        return {**super().runner_state(), "async_opt_calls": self._opt_calls}

    def get_itr_snapshot(self, itr: int) -> dict[str, Any]:
        """``MinibatchRl``'s, without the sampler's state (in its own process: a resume
        restarts the environments)."""
        snapshot = super().get_itr_snapshot(itr)
        snapshot["sampler_state"] = False
        return snapshot


class AsyncRlEval(AsyncRl):
    """``AsyncRl`` given an ``Evaluator(stop_return)``: evaluations run in the sampler's
    process before training and at each log interval (once the optimizer has trained on the
    interval's samples); their results come back to be logged here."""

    def __init__(self, *args: Any, stop_return: float | None = None, **kwargs: Any):
        super().__init__(*args, evaluator=Evaluator(stop_return), **kwargs)


AsyncRlBase = AsyncRl  # (the name of what AsyncRl and AsyncRlEval shared)
