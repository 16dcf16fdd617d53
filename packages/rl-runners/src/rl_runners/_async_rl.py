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

import multiprocessing as mp
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._async_children import CHECK_S, Children, start_children, start_method_for
from ._async_control import COPIED, NEW_RUN, POLL_S, START, THROTTLE, Control
from ._async_pacing import OptimizerPacing
from ._async_rows import RowBook
from ._evaluator import Evaluator
from ._logger import logger
from ._minibatch_rl import MinibatchRl, mid_batch_reset
from ._process import set_master_affinity
from ._protocols import AsyncAgentProtocol, AsyncAlgoProtocol, AsyncSamplerProtocol, SharedReplay
from ._seed import make_seed, seed_after, set_seed
from ._stop_signals import stop_requested_by_signals
from ._values import positive_int

__all__ = ["AsyncRl", "AsyncRlBase", "AsyncRlEval"]


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
        self._children: Children | None = None

    def get_n_itr(self) -> int:
        logger.log(f"Running {self.n_itr} sampler iterations of asynchronous RL.")
        return self.n_itr

    def start_method_used(self) -> str:
        """The start method the children get (see the class)."""
        return start_method_for(self.start_method)

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
        self._pacing = OptimizerPacing(self.algo, self.itr_batch_size, self.min_itr_learn)
        self._launch(double_buffer, replay_buffer, n_itr)
        # Only now: children inherit the CPU affinity, and CUDA must not precede a fork.
        self._restore_affinity = set_master_affinity(self.affinity)
        self.agent.to_device(self.affinity.get("cuda_idx"))
        self.algo.optim_initialize(rank=0)
        self.modes.switch("train", 0)
        self.initialize_logging()
        return n_itr

    _resuming_at: int | None = None  # (the checkpoint's next_itr, during a resume's startup)
    _pacing: OptimizerPacing  # (made at startup)
    _rows: RowBook  # (made at startup)

    def _launch(
        self, double_buffer: tuple[Any, Any], replay_buffer: SharedReplay, n_itr: int
    ) -> None:
        method = self.start_method_used()
        logger.log(f"Starting the sampler's process and the memory copier ({method}).")
        self._children = start_children(
            method,
            n_itr,
            self._pacing.throttle_point(),
            double_buffer=double_buffer,
            samples_to_buffer=self.algo.samples_to_buffer,
            replay_buffer=replay_buffer,
            sampler=self.sampler,
            sampler_affinity=self.sampler_affinity,
            max_lead=self.max_sampler_lead,
            eval_interval=self.log_interval_itrs if self.evaluator is not None else None,
            min_itr_learn=self.min_itr_learn,
        )

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._rows = RowBook(self.log_interval_itrs)
        self._pacing.waited = 0.0
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
        self._control.state[NEW_RUN] = restore is None
        self._control.state[START] = first_itr  # the children begin
        if restore is None and self.evaluator is not None:
            with logger.prefix("itr #0 "):
                self.log_diagnostics(0, *self.evaluate_agent(0))

    def _go_on_from(self, checkpoint: Mapping[str, Any]) -> int:
        """After a resume's restore: the pacing and rows go on from the checkpoint's
        iteration, which the sampler starts at (its environments restarted); the restored
        parameters go to the sampler's model. Without a saved replay buffer learning starts
        again once ``min_itr_learn + 1`` new batches are in. Returns that iteration."""
        next_itr = int(checkpoint["next_itr"])
        replay_kept = checkpoint.get("replay_file") is not None and hasattr(
            self.algo, "load_replay"
        )
        self._pacing.go_on_from(checkpoint, replay_kept)
        ctrl = self._control
        ctrl.state[COPIED] = next_itr
        ctrl.state[THROTTLE] = self._pacing.throttle_point()
        self._rows.go_on_from(next_itr)
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
            if self._rows.evals:
                n_batches = self._rows.evals[0][0]
                self._write_row(n_batches)
                self._finished = n_batches >= self.n_itr or self.stop_reached
                return
        elif self._rows.due(int(self._control.state[COPIED]), self._pacing.throttle_point()):
            self._write_row(self._rows.next_row)
            self._finished = self._done_itrs() >= self.n_itr
            return
        copied = int(self._control.state[COPIED])
        # The next row's batches trained on: no more updates until that row is written, so
        # that each row counts exactly its own.
        row_pending = self._pacing.throttle_point() >= self._rows.next_row
        if copied >= self._pacing.throttle_point() and not row_pending:
            self._optimize(copied)
        else:
            self._pacing.wait()

    def _optimize(self, copied: int) -> None:
        opt_info = self.algo.optimize_agent(self._pacing.calls, sampler_itr=copied - 1)
        self._pacing.calls += 1
        self.agent.send_shared_memory()
        self._control.state[THROTTLE] = self._pacing.throttle_point()
        self.store_diagnostics(max(self._rows.received - 1, 0), [], opt_info)

    def _write_row(self, n_batches: int) -> None:
        """The row (and snapshot) after ``n_batches`` sampler iterations."""
        itr = max(n_batches - 1, 0)
        assert self.progress is not None
        self.progress.next_itr = n_batches
        logger.set_iteration(itr)
        with logger.prefix(f"itr #{itr} "):
            self._log_interval(itr)
        for itr_, infos in self._rows.written(n_batches):
            self.store_diagnostics(itr_, infos, None)

    def _stop_now(self, signal_name: str) -> None:
        """After a stop signal: the snapshot of the batches both copied into the replay and
        counted here (short of the next row, whose batches the sampler then samples again
        on resume), with the parameters trained so far; then a line naming it."""
        assert self.progress is not None and self.guard is not None
        copied = int(self._control.state[COPIED])
        rows = self._rows
        done = max(self.progress.next_itr, min(rows.received, copied, rows.next_row - 1))
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
        while not self._rows.evals:
            self._poll()
            if not self._rows.evals:
                time.sleep(POLL_S)
        _, infos, seconds = self._rows.evals.popleft()
        return infos, seconds

    def _poll(self) -> None:
        """Take the children's messages (trajectory infos to their rows, evaluations queued
        for theirs) and, every ``CHECK_S``, raise a child's failure if there is one."""
        news = self._child_processes.messages()
        now = time.monotonic()
        failure = None
        if now - self._last_check >= CHECK_S:
            self._last_check = now
            failure = self._child_processes.failure(news)
        for itr, infos in self._rows.take(news):
            self.store_diagnostics(itr, infos, None)
        if failure is not None:
            raise failure

    @property
    def _child_processes(self) -> Children:
        """The children (started)."""
        assert self._children is not None
        return self._children

    @property
    def _control(self) -> Control:
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
        self.progress.extra["OptThrottle"] = self._pacing.take_waited()
        super().log_diagnostics(itr, traj_infos, eval_time, prefix)

    def runner_state(self) -> dict[str, Any]:
        """``MinibatchRl``'s, with the optimizer's calls (its pacing goes on from them)."""
        return {**super().runner_state(), "async_opt_calls": self._pacing.calls}

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
