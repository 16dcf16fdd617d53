"""The training loop: sample a batch, optimize on it, a row and snapshot every log interval.

Evaluation (``Evaluator``), checkpoints (``Checkpointer``) and the processes it runs in
(``SingleProcess`` / ``ProcessGroup``) are parts it is given.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import torch

from ._arguments import check_affinity, check_parts, check_seed, run_length, sampler_batch_size
from ._checkpointer import CHECKPOINT_FORMAT, Checkpointer
from ._evaluator import EvalSampler, Evaluator
from ._group import Group, SingleProcess
from ._guard import FiniteGuard
from ._logger import logger
from ._modes import AgentModes
from ._process import default_torch_threads, set_master_affinity
from ._progress import Progress, TrajStats, TrajWindow
from ._protocols import AgentProtocol, AlgoProtocol, SamplerProtocol
from ._seed import make_seed, seed_after, set_seed
from ._stop_signals import StopRequest, stop_requested_by_signals
from ._values import positive_int, traj_record

__all__ = [
    "CHECKPOINT_FORMAT",
    "MinibatchRl",
    "MinibatchRlBase",
    "MinibatchRlEval",
    "mid_batch_reset",
]


def mid_batch_reset(sampler: object) -> bool:
    """The sampler's ``mid_batch_reset``, else its collector class's, else True."""
    value = getattr(sampler, "mid_batch_reset", None)
    if value is None:
        value = getattr(getattr(sampler, "CollectorCls", None), "mid_batch_reset", True)
    return bool(value)


class MinibatchRl:
    """Runs RL on minibatches: ``n_steps`` environment steps in iterations of one sampler
    batch, rounded up to whole log intervals of ``log_interval_steps``; ``seed=None`` draws
    one; ``affinity`` may hold ``master_cpus``, ``master_torch_threads``, ``cuda_idx``.

    Parts: ``evaluator`` (None: rows summarize the last ``log_traj_window`` trajectories
    completed while training; an ``Evaluator``: its offline evaluations), ``checkpointer``
    (default ``Checkpointer(replay=checkpoint_replay)``), ``group`` (``SingleProcess()``).
    ``train()`` runs from scratch, ``resume(path)`` continues a run from a checkpoint.
    """

    # The protocols the algorithm, the agent and the sampler must meet (AsyncRl: the Async* ones).
    _protocols: tuple[type, type, type] = (AlgoProtocol, AgentProtocol, SamplerProtocol)
    _n_steps_optional = False  # (OnPolicyRunner: the length may be planned at startup)
    _continue_hint = "resume() continues from the last snapshot"

    def __init__(
        self,
        algo: AlgoProtocol,
        agent: AgentProtocol,
        sampler: SamplerProtocol,
        n_steps: int | float | None,
        seed: int | None = None,
        affinity: Mapping[str, Any] | None = None,
        log_interval_steps: int | float = 1e5,
        checkpoint_replay: bool = False,
        log_traj_window: int = 100,
        *,
        evaluator: Evaluator | None = None,
        checkpointer: Checkpointer | None = None,
        group: Group | None = None,
    ):
        if checkpointer is not None and checkpoint_replay:
            raise ValueError("give checkpoint_replay or a checkpointer, not both")
        self.checkpointer = checkpointer or Checkpointer(replay=checkpoint_replay)
        self.checkpointer.check_algo(algo)
        self.checkpoint_replay = self.checkpointer.replay
        self.evaluator = evaluator
        check_parts(self._protocols, algo, agent, sampler, evaluating=evaluator is not None)
        if n_steps is None and self._n_steps_optional:
            self.n_steps: int | None = None
        else:
            self.n_steps = positive_int("n_steps", n_steps)
        self.log_interval_steps = positive_int("log_interval_steps", log_interval_steps)
        self.log_traj_window = positive_int("log_traj_window", log_traj_window)
        check_seed(seed)
        check_affinity(affinity)
        batch_size = sampler_batch_size(sampler)
        self.algo, self.agent, self.sampler = algo, agent, sampler
        self.modes = AgentModes(agent)  # (the runner's one owner of the agent's mode)
        self.seed = seed
        self.affinity = dict(affinity or {})
        self.group = group or SingleProcess()
        self.itr_batch_size = batch_size * self.world_size
        lengths = run_length(self.n_steps, self.itr_batch_size, self.log_interval_steps)
        self.log_interval_itrs: int = lengths[0]  # (each its own statement: a public attribute)
        self.n_itr: int = lengths[1]
        self.progress: Progress | None = None  # (made at startup)
        self._restore_affinity: Callable[[], None] | None = None  # (set at startup)
        self.stop_reached = False  # an evaluation reached the evaluator's stop_return
        self.stopped_by: str | None = None  # the signal that stopped the run early
        self.guard: FiniteGuard | None = None  # (made at startup)
        self.min_itr_learn = 0

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def world_size(self) -> int:
        return self.group.world_size

    # ----------------------------------------------------------- startup
    def get_n_itr(self) -> int:
        """Iterations to run (see the class)."""
        logger.log(f"Running {self.n_itr} iterations of minibatch RL.")
        return self.n_itr

    def get_traj_info_kwargs(self) -> dict[str, Any]:
        """What the trajectory infos need from elsewhere: the algorithm's discount."""
        return {"discount": self.algo.discount} if hasattr(self.algo, "discount") else {}

    def startup(self) -> int:
        """Seed everything, initialize the sampler (which initializes the agent), move the
        agent to its device, initialize the algorithm and the logging; returns ``n_itr``."""
        self._restore_affinity = set_master_affinity(self.affinity)
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed + self.rank)  # (ranks of a multi-process run explore differently)
        examples = self.sampler.initialize(
            self.agent,
            affinity=self.affinity,
            seed=self.seed,
            bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(),
            rank=self.rank,
            world_size=self.world_size,
        )
        n_itr = self.get_n_itr()
        self.agent.to_device(self.affinity.get("cuda_idx"))
        if self.affinity.get("master_torch_threads") is None:
            threads = default_torch_threads(self.agent, self.sampler)
            torch.set_num_threads(threads)
            logger.debug(f"Torch threads: {threads} (affinity master_torch_threads chooses).")
        self.algo.initialize(
            self.agent,
            n_itr=n_itr,
            batch_spec=self.sampler.batch_spec,
            mid_batch_reset=mid_batch_reset(self.sampler),
            examples=examples,
            world_size=self.world_size,
            rank=self.rank,
        )
        self.group.startup(self.agent)
        # (a replay algorithm knows it only now, from the sampler's batch size)
        self.min_itr_learn = int(getattr(self.algo, "min_itr_learn", 0))
        self.initialize_logging()
        return n_itr

    def initialize_logging(self) -> None:
        env = getattr(self.sampler, "env_kwargs", {}).get("id")
        self.guard = FiniteGuard(self.algo.opt_info_fields, env)
        trajs: TrajStats = self.evaluator or TrajWindow(self.log_traj_window)
        self.progress = Progress(self.algo, self.itr_batch_size, self.log_interval_itrs, trajs)
        self.progress.stop_itr = self.n_itr

    # --------------------------------------------------------- the loop
    def train(self) -> None:
        """Run ``n_itr`` iterations from scratch."""
        self._run(None)

    def resume(self, path: str | os.PathLike) -> None:
        """Continue the run whose checkpoint is ``path`` (a file, or a run directory: its
        ``params.pt``, else its latest ``itr_<n>.pt``) up to this runner's ``n_steps``,
        inside a ``logger_context`` on the same run directory (see the README)."""
        restore = self.checkpointer.for_resume(self, path)
        if self.seed is None:
            self.seed = restore[1]["runner_state"]["seed"]
        self._run(restore)

    def _run(self, restore: tuple | None) -> None:
        """Startup, then the iterations.  The sampler is shut down however it ends; an
        exception (Ctrl-C included) propagates after that, every row and the last snapshot
        in place."""
        with self._shutdown_guard():
            self._start(restore)
            self._iterate(self.n_itr)

    def _start(self, restore: tuple | None) -> None:
        """Startup, then the checkpoint's states (``restore``: ``Checkpointer.restore``'s
        arguments) or, on a fresh run, the evaluation before training."""
        self.startup()
        if restore is not None:
            self.checkpointer.restore(self, *restore)
            checkpoint = restore[1]
            if checkpoint.get("replay_file") is None and hasattr(self.algo, "replay_started_empty"):
                self.algo.replay_started_empty(checkpoint["next_itr"])  # learning waits again
            if self.rank > 0:  # (the snapshot holds rank 0's generators: not this rank's)
                set_seed(seed_after(self.seed or 0, self.rank, checkpoint["next_itr"]))
        elif self.rank == 0 and self.evaluator is not None:
            with logger.prefix("itr #0 "):
                self.log_diagnostics(0, *self.evaluate_agent(0))
        elif self.rank == 0:
            logger.debug(f"Optimizing over {self.log_interval_itrs} iterations.")

    def _iterate(self, stop_itr: int) -> None:
        """The iterations up to ``stop_itr`` (exclusive): act and step in the sampler, update,
        then at each log interval evaluate, log and save. A stop signal (SIGTERM, SIGUSR1)
        ends the loop after the iteration under way, with a snapshot."""
        progress = self.progress
        assert progress is not None
        progress.stop_itr = stop_itr
        with stop_requested_by_signals() as stop:
            for itr in range(progress.next_itr, stop_itr):
                logger.set_iteration(itr)
                with logger.prefix(f"itr #{itr} "):
                    self._one_iteration(itr)
                    if (itr + 1) % self.log_interval_itrs == 0:
                        self._log_interval(itr)
                        if self.stop_reached:
                            break
                    if self._stop_asked(stop):
                        self._stop_early(itr, stop.signal)
                        break

    def _one_iteration(self, itr: int) -> None:
        assert self.progress is not None and self.guard is not None
        try:
            self.modes.switch("sample", itr)
            samples, traj_infos = self.sampler.obtain_samples(itr)
            self.modes.switch("train", itr)
            opt_info = self.algo.optimize_agent(itr, samples)
        except Exception:
            self.guard.check()  # a non-finite number met earlier is the likely cause: named
            raise
        agent: Any = self.agent
        parameters = agent.parameters() if hasattr(agent, "parameters") else []
        self.guard.observe(itr, samples, opt_info, parameters)
        self.progress.next_itr = itr + 1
        self.store_diagnostics(itr, traj_infos, opt_info)

    def _stop_asked(self, stop: StopRequest) -> bool:
        """Whether a stop signal came (to rank 0, in a group: every rank stops with it)."""
        asked = stop.signal is not None
        return self.group.agree(asked) if self.world_size > 1 else asked

    def _stop_early(self, itr: int, signal: str | None) -> None:
        """After a stop signal: the snapshot after ``itr`` (unless the log interval just
        wrote it), then a line naming it."""
        assert self.guard is not None
        self.guard.check()  # (never a snapshot of non-finite parameters)
        self.stopped_by = signal or "a stop signal"
        if self.rank != 0:
            return
        logged = (itr + 1) % self.log_interval_itrs == 0 and logger.snapshot_path(itr) is not None
        path = logger.snapshot_path(itr) if logged else self.checkpointer.save(self, itr, True)
        saved = f"its snapshot is {path}; {self._continue_hint}" if path else "no snapshot kept"
        logger.log(f"Stopped by {self.stopped_by} after {itr + 1} iterations: {saved}.")

    def _log_interval(self, itr: int) -> None:
        """Rank 0 evaluates (with an evaluator), writes the row and the snapshot; every rank
        learns whether training ends here. A non-finite number since the last interval stops
        the run first."""
        assert self.guard is not None
        self.guard.check()
        if self.rank == 0 and self.evaluator is None:
            self.log_diagnostics(itr)
        elif self.rank == 0 and self.evaluator is not None:
            traj_infos, eval_time = self.evaluate_agent(itr)
            self.log_diagnostics(itr, traj_infos, eval_time)
            self.stop_reached = self.stop_reached or self.evaluator.reached(traj_infos)
        self.stop_reached = self.group.agree(self.stop_reached)

    def evaluate_agent(self, itr: int) -> tuple[list[Any], float]:
        """The evaluator's evaluation after ``itr``: ``(trajectory infos, seconds)``."""
        assert self.evaluator is not None and self.progress is not None
        self.progress.pbar.stop()
        sampler = cast(EvalSampler, self.sampler)  # (checked at construction, with the evaluator)
        return self.evaluator.evaluate(sampler, self.modes, itr, self.min_itr_learn)

    # ------------------------------------------------------ diagnostics
    def store_diagnostics(
        self, itr: int, traj_infos: Sequence[Any], opt_info: Any, completed: int | None = None
    ) -> None:
        """Keep this iteration's OptInfo and trajectories for the next row (rank 0 gets every
        rank's).  ``completed``: how many completed when ``traj_infos`` holds only the last."""
        assert self.progress is not None
        count = len(traj_infos) if completed is None else completed
        # Only a window's worth is read: a sampler may hand over a sequence that builds its
        # infos when indexed (BatchedSampler: thousands of episodes per batch).
        window = self.log_traj_window if self.evaluator is None else 0
        records = [traj_record(info) for info in traj_infos[-window:]] if window else []
        gathered = self.group.gather(count, records)
        if gathered is not None:
            self.progress.store(itr, gathered[1], gathered[0], opt_info)

    def log_diagnostics(
        self,
        itr: int,
        traj_infos: Sequence[Any] | None = None,
        eval_time: float = 0.0,
        prefix: str = "",
    ) -> None:
        """Write one row (``prefix`` before the runner's own column names; rlpyt used
        ``"Diagnostics/"``), then the snapshot."""
        assert self.progress is not None
        if self.evaluator is not None:
            traj_infos = self.evaluator.account(traj_infos, eval_time)
        self.progress.write_row(itr, traj_infos, eval_time, prefix)
        self.save_itr_snapshot(itr)
        self.progress.next_interval()

    # ------------------------------------------------------- checkpoints
    def runner_state(self) -> dict[str, Any]:
        """The runner's own bookkeeping, as plain values (a checkpoint's ``runner_state``)."""
        assert self.progress is not None
        return {
            "seed": self.seed,
            "n_itr": self.n_itr,
            "log_interval_itrs": self.log_interval_itrs,
            "itr_batch_size": self.itr_batch_size,
            **self.progress.state(),
        }

    def get_itr_snapshot(self, itr: int) -> dict[str, Any]:
        """Everything needed to continue the run after iteration ``itr``."""
        return self.checkpointer.snapshot(self, itr)

    def save_itr_snapshot(self, itr: int) -> None:
        """The snapshot, if the logger's snapshot mode keeps it (sampler state beside it)."""
        self.checkpointer.save(self, itr)

    # ---------------------------------------------------------- shutdown
    def _done_itrs(self) -> int:
        return 0 if self.progress is None else self.progress.next_itr

    @contextlib.contextmanager
    def _shutdown_guard(self, always: bool = True) -> Iterator[None]:
        """Shut down when the block raises (a KeyboardInterrupt is logged first) and, with
        ``always``, when it ends normally too; the exception propagates."""
        completed = False
        try:
            yield
            completed = True
        except KeyboardInterrupt:
            logger.log(
                f"Interrupted after {self._done_itrs()} iterations; the rows logged so far "
                f"are in progress.csv, and {self._continue_hint}."
            )
            raise
        finally:
            if always or not completed:
                self._shutdown(completed)

    def _shutdown(self, completed: bool) -> None:
        self._failed = not completed
        if completed:
            self.shutdown()
            return
        try:  # an error is on its way out: do not let a failing shutdown hide it
            self.shutdown()
        except Exception as e:
            logger.log(f"sampler.shutdown() failed as well: {e!r}")

    def shutdown(self) -> None:
        """Stop the progress bar and shut the sampler down."""
        if self.progress is not None:
            self.progress.pbar.stop()
        self.sampler.shutdown()
        if self._restore_affinity is not None:
            self._restore_affinity()
        if self.rank == 0:
            done = self._done_itrs() >= self.n_itr or self.stop_reached
            done = done and not getattr(self, "_failed", False)
            logger.log("Training complete." if done else "Runner stopped.")


class MinibatchRlEval(MinibatchRl):
    """``MinibatchRl`` given an ``Evaluator(stop_return)``: rows of offline evaluations
    before training and at each log interval."""

    def __init__(
        self,
        algo: AlgoProtocol,
        agent: AgentProtocol,
        sampler: SamplerProtocol,
        n_steps: int | float | None,
        seed: int | None = None,
        affinity: Mapping[str, Any] | None = None,
        log_interval_steps: int | float = 1e5,
        checkpoint_replay: bool = False,
        *,
        stop_return: float | None = None,
        checkpointer: Checkpointer | None = None,
    ):
        super().__init__(
            algo,
            agent,
            sampler,
            n_steps,
            seed,
            affinity,
            log_interval_steps,
            checkpoint_replay,
            evaluator=Evaluator(stop_return),
            checkpointer=checkpointer,
        )


MinibatchRlBase = MinibatchRl  # (rlpyt's name for what both share: now the one loop)
