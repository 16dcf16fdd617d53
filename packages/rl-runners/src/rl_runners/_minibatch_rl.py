"""Single-process runners: sample a batch, optimize on it, log every few iterations.

``MinibatchRl`` logs the trajectories completed during training (online), ``MinibatchRlEval``
evaluates the agent with ``sampler.evaluate_agent`` at each log interval (offline).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import torch

from ._checkpoint import companion_path, find_checkpoint
from ._logger import _plain, logger
from ._prog_bar import ProgBarCounter
from ._protocols import missing_methods
from ._seed import get_rng_state, make_seed, set_rng_state, set_seed

__all__ = ["CHECKPOINT_FORMAT", "MinibatchRl", "MinibatchRlBase", "MinibatchRlEval"]

CHECKPOINT_FORMAT = 1
SAMPLER_STATE = "sampler_state"


def _count(name: str, value: Any) -> int:
    """A positive int from an int or an integral float such as ``1e5``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _traj_record(info: Any) -> dict[str, bool | int | float]:
    """The public numeric fields of a trajectory info as python numbers (what is logged, and
    what a checkpoint keeps of the trajectory window)."""
    if isinstance(info, Mapping):
        items = info.items()
    elif hasattr(info, "_asdict"):
        items = info._asdict().items()
    else:
        items = vars(info).items()
    record = {}
    for key, value in items:
        value = _plain(value)
        if not str(key).startswith("_") and isinstance(value, (bool, int, float)):
            record[str(key)] = value
    return record


class MinibatchRlBase:
    """Startup, logging and checkpoints shared by the minibatch runners.

    ``n_steps`` environment steps are run in iterations of one sampler batch, rounded up to
    whole log intervals of ``log_interval_steps`` (at least one iteration).  ``seed=None``
    draws one (``make_seed``).  ``affinity`` may hold ``master_cpus``, ``master_torch_threads``
    and ``cuda_idx`` (the agent's GPU).  ``checkpoint_replay``: each snapshot also keeps the
    algorithm's replay buffer (its ``save_replay(path)`` / ``load_replay(path)``), in an
    ``.npz`` file beside it, so a resumed run learns from the same data.

    ``train()`` runs from scratch; ``resume(path)`` continues a run from a checkpoint.  Rows
    go to the active ``logger_context`` (``progress.csv``), one per log interval, followed by
    a snapshot (see ``get_itr_snapshot``) that the snapshot mode may keep.
    """

    _eval = False
    _protocols = ""  # which protocols the components must meet ("async": the Async* ones)
    # Whether n_steps may be None: the run's length is then planned at startup (n_itr 0 till
    # then; OnPolicyRunner, whose learn() says how long).
    _n_steps_optional = False
    _continue_hint = "resume() continues from the last snapshot"

    def __init__(
        self,
        algo: Any,
        agent: Any,
        sampler: Any,
        n_steps: int | float | None,
        seed: int | None = None,
        affinity: Mapping[str, Any] | None = None,
        log_interval_steps: int | float = 1e5,
        checkpoint_replay: bool = False,
    ):
        if checkpoint_replay and not (
            hasattr(algo, "save_replay") and hasattr(algo, "load_replay")
        ):
            raise TypeError(
                f"checkpoint_replay needs an algorithm with save_replay and load_replay; "
                f"{type(algo).__name__} has no replay buffer to keep"
            )
        self.checkpoint_replay = bool(checkpoint_replay)
        extra = ("evaluate_agent",) if self._eval else ()
        for role, obj, more in (
            ("algo", algo, ()),
            ("agent", agent, ("eval_mode",) if self._eval else ()),
            ("sampler", sampler, extra),
        ):
            missing = missing_methods(f"{self._protocols} {role}".strip(), obj, more)
            if missing:
                protocol = f"{self._protocols.capitalize()}{role.capitalize()}Protocol"
                raise TypeError(
                    f"{role} ({type(obj).__name__}) lacks {', '.join(missing)}; see "
                    f"rl_runners.{protocol}"
                )
        if n_steps is None and self._n_steps_optional:
            self.n_steps: int | None = None
        else:
            self.n_steps = _count("n_steps", n_steps)
        self.log_interval_steps = _count("log_interval_steps", log_interval_steps)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be None or a non-negative int, got {seed!r}")
        if affinity is not None and not isinstance(affinity, Mapping):
            raise TypeError(f"affinity must be a dict or None, got {type(affinity).__name__}")
        batch_size = getattr(sampler.batch_spec, "size", None)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"sampler.batch_spec.size must be a positive int (batch_T * batch_B), "
                f"got {batch_size!r}"
            )
        self.algo, self.agent, self.sampler = algo, agent, sampler
        self.seed = seed
        self.affinity = dict(affinity or {})
        self.rank, self.world_size = self._rank_world_size()
        self.itr_batch_size = batch_size * self.world_size
        if self.n_steps is not None and self.n_steps < self.itr_batch_size:
            raise ValueError(
                f"n_steps={self.n_steps} is less than one sampler batch "
                f"(batch_T * batch_B = {self.itr_batch_size}): not one iteration would run"
            )
        self.log_interval_itrs = max(self.log_interval_steps // self.itr_batch_size, 1)
        self.n_itr = 0 if self.n_steps is None else self._rounded_n_itr()

    def _rank_world_size(self) -> tuple[int, int]:
        """This process's rank and the number of processes training together."""
        return 0, 1

    def _rounded_n_itr(self) -> int:
        assert self.n_steps is not None
        n_itr = self.n_steps // self.itr_batch_size
        if n_itr % self.log_interval_itrs:  # run on to the next log iteration
            n_itr += self.log_interval_itrs - n_itr % self.log_interval_itrs
        return n_itr

    # ----------------------------------------------------------- startup
    def get_n_itr(self) -> int:
        """Iterations to run: ``n_steps`` in sampler batches, rounded up to whole log
        intervals of ``log_interval_itrs`` iterations."""
        logger.log(f"Running {self.n_itr} iterations of minibatch RL.")
        return self.n_itr

    def get_traj_info_kwargs(self) -> dict[str, Any]:
        """What the trajectory infos need from elsewhere: the algorithm's discount."""
        return {"discount": self.algo.discount} if hasattr(self.algo, "discount") else {}

    def _set_affinity(self) -> None:
        process = psutil.Process()
        cpus = self.affinity.get("master_cpus")
        try:
            if cpus is not None and self.affinity.get("set_affinity", True):
                process.cpu_affinity(list(cpus))
            cpu_affinity: Any = process.cpu_affinity()
        except AttributeError:  # macOS has no CPU affinity
            cpu_affinity = "unavailable"
        logger.log(f"Runner master CPU affinity: {cpu_affinity}.")
        threads = self.affinity.get("master_torch_threads")
        if threads is not None:
            torch.set_num_threads(int(threads))
        logger.log(f"Runner master Torch threads: {torch.get_num_threads()}.")

    def _mid_batch_reset(self) -> bool:
        """The sampler's ``mid_batch_reset``, else its collector class's, else True."""
        value = getattr(self.sampler, "mid_batch_reset", None)
        if value is None:
            value = getattr(getattr(self.sampler, "CollectorCls", None), "mid_batch_reset", True)
        return bool(value)

    def startup(self) -> int:
        """Seed everything, initialize the sampler (which initializes the agent), move the
        agent to its device, initialize the algorithm and the logging; returns ``n_itr``."""
        self._set_affinity()
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
        self.algo.initialize(
            self.agent,
            n_itr=n_itr,
            batch_spec=self.sampler.batch_spec,
            mid_batch_reset=self._mid_batch_reset(),
            examples=examples,
            world_size=self.world_size,
            rank=self.rank,
        )
        # (a replay algorithm knows it only now, from the sampler's batch size)
        self.min_itr_learn = int(getattr(self.algo, "min_itr_learn", 0))
        self.initialize_logging()
        return n_itr

    def initialize_logging(self) -> None:
        self._opt_infos: dict[str, list[Any]] = {k: [] for k in self.algo.opt_info_fields}
        self._traj_keys: list[str] = []
        self._start_time = self._last_time = time.time()
        self._cum_time_before = 0.0  # of the run before a resume
        self._cum_time = 0.0
        self._cum_completed_trajs = 0
        self._cum_updates = 0  # counted from the OptInfo when the algo has no update_counter
        self._last_update_counter = 0
        self._next_itr = 0  # iterations done
        self._last_log_next_itr = 0
        self._stop_itr = self.n_itr  # where the current run of iterations ends
        self.pbar = ProgBarCounter(self.log_interval_itrs)

    # --------------------------------------------------------- the loop
    def train(self) -> None:
        """Run ``n_itr`` iterations from scratch (see the class)."""
        self._run(None)

    def resume(self, path: str | os.PathLike) -> None:
        """Continue the run whose checkpoint is ``path`` (a checkpoint file, or a run
        directory: its ``params.pt``, else its latest ``itr_<n>.pt``) up to this runner's
        ``n_steps``.

        After the usual startup, restores the agent, the optimizer state, the counters, the
        trajectory window, the random generators and (when saved) the sampler's state, then
        drops the rows of the active ``progress.csv`` written after the checkpoint and goes
        on appending to it.  Run it inside a ``logger_context`` on the same run directory
        (``override_prefix=True``) to continue the same files.  Continuing is exact when the
        sampler, agent and algorithm are built as before and their states cover everything
        random; the checkpoint must come from a runner with the same batch size and log
        interval.
        """
        checkpoint_path, checkpoint = _read_checkpoint(path)
        sampler_state = self._check_checkpoint(checkpoint, checkpoint_path)
        if self.seed is None:
            self.seed = checkpoint["runner_state"]["seed"]
        self._run((checkpoint_path, checkpoint, sampler_state))

    def _run(self, resume: tuple[Path, dict[str, Any], Any] | None) -> None:
        """The training loop.  The sampler is shut down however it ends; an exception
        (KeyboardInterrupt included) propagates after that, leaving progress.csv with every
        row logged so far and the last snapshot in place."""
        with self._shutdown_guard():
            n_itr = self._start(resume)
            self._iterate(n_itr)

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

    def _start(self, resume: tuple[Any, ...] | None) -> int:
        """Startup, then the checkpoint's states (``resume``: the arguments of
        ``_restore``) or what comes before a fresh run's first iteration; returns ``n_itr``."""
        n_itr = self.startup()
        if resume is not None:
            self._restore(*resume)
        else:
            self._before_training()
        return n_itr

    def _iterate(self, stop_itr: int) -> None:
        """Run the iterations from ``_next_itr`` up to ``stop_itr`` (exclusive), a row (and
        snapshot) after each one that ends a log interval; stops early once an evaluation
        reached ``stop_return``."""
        self._stop_itr = stop_itr
        for itr in range(self._next_itr, stop_itr):
            logger.set_iteration(itr)
            with logger.prefix(f"itr #{itr} "):
                self.agent.sample_mode(itr)
                samples, traj_infos = self.sampler.obtain_samples(itr)
                self.agent.train_mode(itr)
                opt_info = self.algo.optimize_agent(itr, samples)
                self._next_itr = itr + 1
                self.store_diagnostics(itr, traj_infos, opt_info)
                if (itr + 1) % self.log_interval_itrs == 0:
                    self._log_interval(itr)
                    if self._reached_stop_return:
                        break

    _reached_stop_return = False  # (MinibatchRlEval: an evaluation reached stop_return)

    def _done_itrs(self) -> int:
        return getattr(self, "_next_itr", 0)

    def _before_training(self) -> None:
        """What happens before the first iteration of a fresh run."""
        logger.log(f"Optimizing over {self.log_interval_itrs} iterations.")

    def _log_interval(self, itr: int) -> None:
        """What happens at the end of each log interval."""
        self.log_diagnostics(itr)

    def _shutdown(self, completed: bool) -> None:
        if completed:
            self.shutdown()
            return
        try:  # an error is on its way out: do not let a failing shutdown hide it
            self.shutdown()
        except Exception as e:
            logger.log(f"sampler.shutdown() failed as well: {e!r}")

    def shutdown(self) -> None:
        """Stop the progress bar and shut the sampler down."""
        pbar = getattr(self, "pbar", None)
        if pbar is not None:
            pbar.stop()
        self.sampler.shutdown()
        done = self._done_itrs() >= self.n_itr or self._reached_stop_return
        logger.log("Training complete." if done else "Runner stopped.")

    # ------------------------------------------------------ diagnostics
    def _updates(self) -> int:
        counter = getattr(self.algo, "update_counter", None)
        return self._cum_updates if counter is None else int(counter)

    def _algo_batch_size(self) -> int:
        """Samples per update, for the replay ratio: the algorithm's ``batch_size``, else the
        sampler batch split into the algorithm's ``minibatches`` (1 when it has none)."""
        size = getattr(self.algo, "batch_size", None)
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
        minibatches = getattr(self.algo, "minibatches", 1)
        return self.itr_batch_size // max(int(minibatches), 1)

    def store_diagnostics(
        self, itr: int, traj_infos: Sequence[Any], opt_info: Any, completed: int | None = None
    ) -> None:
        """Keep this iteration's trajectory count and OptInfo values for the next row.
        ``completed``: the trajectories completed, when ``traj_infos`` holds only the last
        of them (None: all)."""
        self._cum_completed_trajs += len(traj_infos) if completed is None else completed
        for key, values in self._opt_infos.items():
            new = getattr(opt_info, key, [])
            values.extend(new if isinstance(new, (list, tuple)) else [new])
        if self._opt_infos and getattr(self.algo, "update_counter", None) is None:
            first = getattr(opt_info, next(iter(self._opt_infos)), [])
            self._cum_updates += len(first) if isinstance(first, (list, tuple)) else 1
        self.pbar.update(itr + 1 - self._last_log_next_itr)

    def _diagnostics(self, itr: int, traj_infos: Sequence[Any] | None, eval_time: float) -> dict:
        """The runner's own columns of a row."""
        now = time.time()
        self._cum_time = self._cum_time_before + now - self._start_time
        train_time = now - self._last_time - eval_time
        updates = self._updates()
        new_updates = updates - self._last_update_counter
        new_steps = (self._next_itr - self._last_log_next_itr) * self.itr_batch_size
        cum_steps = self._next_itr * self.itr_batch_size
        nan = math.nan
        self._last_time = now
        return {
            "Iteration": itr,
            "CumTime (s)": self._cum_time,
            "CumSteps": cum_steps,
            "CumCompletedTrajs": self._cum_completed_trajs,
            "CumUpdates": updates,
            "StepsPerSecond": new_steps / train_time if new_steps and train_time > 0 else nan,
            "UpdatesPerSecond": new_updates / train_time if new_steps and train_time > 0 else nan,
            "ReplayRatio": new_updates * self._algo_batch_size() / new_steps if new_steps else nan,
            "CumReplayRatio": self._algo_batch_size() * updates / cum_steps if cum_steps else nan,
        }

    def log_diagnostics(
        self,
        itr: int,
        traj_infos: Sequence[Any] | None = None,
        eval_time: float = 0.0,
        prefix: str = "",
    ) -> None:
        """Write one row: the runner's columns (``prefix`` before their names; rlpyt used
        ``"Diagnostics/"``), the trajectory and OptInfo statistics; then the snapshot."""
        self.pbar.stop()
        row = self._diagnostics(itr, traj_infos, eval_time)
        with logger.tabular_prefix(prefix):
            for key, value in row.items():
                logger.record_tabular(key, value)
        self._log_infos(traj_infos)
        logger.dump_tabular()
        self._end_interval()
        self.save_itr_snapshot(itr)
        if self._next_itr < self._stop_itr:
            logger.log(f"Optimizing over {self.log_interval_itrs} iterations.")
            self.pbar = ProgBarCounter(self.log_interval_itrs)

    def _end_interval(self) -> None:
        """Reset the per-interval bookkeeping after a row is written."""
        self._last_update_counter = self._updates()
        self._last_log_next_itr = self._next_itr

    def _log_infos(self, traj_infos: Sequence[Any] | None = None) -> None:
        """``<Name>Average/Std/Median/Min/Max`` of each trajectory field and OptInfo field;
        trajectory fields seen before get NaN statistics when no trajectory completed, so
        their columns stay.  Resets the stored OptInfo values."""
        records = [_traj_record(i) for i in (self._window() if traj_infos is None else traj_infos)]
        for key in records[0] if records else ():
            if key not in self._traj_keys:
                self._traj_keys.append(key)
        for key in self._traj_keys:
            logger.record_tabular_misc_stat(key, [r[key] for r in records if key in r])
        for key, values in self._opt_infos.items():
            logger.record_tabular_misc_stat(key, values)
        self._opt_infos = {k: [] for k in self._opt_infos}

    def _window(self) -> Sequence[Any]:
        return []

    # ------------------------------------------------------- checkpoints
    def _runner_state(self) -> dict[str, Any]:
        """The runner's own bookkeeping, as plain values."""
        return {
            "seed": self.seed,
            "n_itr": self.n_itr,
            "log_interval_itrs": self.log_interval_itrs,
            "itr_batch_size": self.itr_batch_size,
            "cum_time": self._cum_time,
            "cum_updates_counted": self._cum_updates,
            "last_update_counter": self._last_update_counter,
            "traj_keys": list(self._traj_keys),
            "progress_rows": logger.tabular_row_count,
        }

    def _load_runner_state(self, state: Mapping[str, Any]) -> None:
        self._cum_time_before = self._cum_time = state["cum_time"]
        self._cum_updates = state["cum_updates_counted"]
        self._last_update_counter = state["last_update_counter"]
        self._traj_keys = list(state["traj_keys"])

    def get_itr_snapshot(self, itr: int) -> dict[str, Any]:
        """Everything needed to continue the run after iteration ``itr`` (tensors, lists and
        numbers only: it loads with ``torch.load(weights_only=True)``)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "runner": type(self).__name__,
            "itr": itr,
            "next_itr": self._next_itr,
            "cum_steps": self._next_itr * self.itr_batch_size,
            "cum_updates": self._updates(),
            "cum_completed_trajs": self._cum_completed_trajs,
            "agent_state_dict": self.agent.state_dict(),
            "optimizer_state_dict": self.algo.optim_state_dict(),
            "rng_state": get_rng_state(),
            "runner_state": self._runner_state(),
            "sampler_state": hasattr(self.sampler, "state_dict"),
        }

    def save_itr_snapshot(self, itr: int) -> None:
        """Hand the snapshot to the logger, which writes it if its snapshot mode says so;
        the sampler's state, when it has ``state_dict()``, is pickled beside it."""
        path = logger.snapshot_path(itr)
        if path is None:
            return
        self._write_snapshot(
            path, itr, lambda params, pickles: logger.save_itr_params(itr, params, pickles)
        )
        logger.log(f"Saved snapshot {path.name}.")

    def _write_snapshot(
        self,
        path: Path,
        itr: int,
        write: Callable[[dict[str, Any], dict[str, Callable[[], Any]] | None], Any],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """The snapshot of ``itr`` (with ``extra`` keys) for the checkpoint file ``path``,
        handed to ``write(params, pickles)``; the replay buffer, with ``checkpoint_replay``,
        is saved beside ``path`` first and the one of the previous snapshot there removed."""
        params = self.get_itr_snapshot(itr)
        params.update(extra or {})
        params["snapshot_id"] = snapshot_id = uuid.uuid4().hex
        pickles = None
        if params["sampler_state"]:
            next_itr = self._next_itr

            def sampler_state() -> dict[str, Any]:
                state = self.sampler.state_dict()
                return {"snapshot_id": snapshot_id, "next_itr": next_itr, "state": state}

            pickles = {SAMPLER_STATE: sampler_state}
        replay_file = None
        if self.checkpoint_replay:  # named after the snapshot: never paired with another one
            replay_file = _replay_path(path, snapshot_id)
            self.algo.save_replay(replay_file)
            params["replay_file"] = replay_file.name
        write(params, pickles)
        if replay_file is not None:  # the older snapshot's replay, now unused
            for old in path.parent.glob(_replay_path(path, "*").name):
                if old != replay_file:
                    old.unlink(missing_ok=True)

    def _check_checkpoint(self, checkpoint: Any, path: Path) -> Any:
        """Refuse a checkpoint this runner cannot continue, before any work; return the
        sampler's saved state (None when there is none to load)."""
        self._check_compatible(checkpoint, path)
        state = checkpoint["runner_state"]
        if self.seed is not None and self.seed != state["seed"]:
            raise ValueError(
                f"cannot resume from {str(path)!r} with seed={self.seed}: the run used "
                f"seed={state['seed']} (pass seed=None or the same seed)"
            )
        if checkpoint["next_itr"] > self.n_itr:
            raise ValueError(
                f"cannot resume from {str(path)!r}: it is after iteration "
                f"{checkpoint['next_itr']}, beyond this runner's n_itr={self.n_itr} "
                f"(n_steps={self.n_steps})"
            )
        return self._saved_sampler_state(checkpoint, path)

    def _check_compatible(self, checkpoint: Any, path: Path, action: str = "resume from") -> None:
        """An rl_runners checkpoint of the same batch size and log interval, whose replay
        buffer (if it has one) is in place (``action``: what the errors say was refused)."""
        if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{str(path)!r} is not an rl_runners checkpoint (format 1)")
        state = checkpoint["runner_state"]
        for key in ("itr_batch_size", "log_interval_itrs"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"cannot {action} {str(path)!r}: it was saved with {key}={state[key]}, "
                    f"this runner has {getattr(self, key)}"
                )
        replay_name = checkpoint.get("replay_file")
        if replay_name is not None and not (path.parent / replay_name).is_file():
            raise FileNotFoundError(
                f"cannot {action} {str(path)!r}: its replay buffer {replay_name!r} is missing"
            )

    def _saved_sampler_state(
        self, checkpoint: dict[str, Any], path: Path, required: bool = True
    ) -> Any:
        """The sampler's state pickled beside ``path`` (None when there is none to load).
        A missing or mismatched file is an error when ``required``, else a warning."""
        if not hasattr(self.sampler, "load_state_dict"):
            if checkpoint["sampler_state"]:
                logger.log(
                    "WARNING: the sampler has no load_state_dict(); its saved state "
                    "is not restored, so the environments start afresh."
                )
            return None
        if not checkpoint["sampler_state"]:
            logger.log("WARNING: the checkpoint holds no sampler state; environments start afresh.")
            return None
        sampler_file = companion_path(path, SAMPLER_STATE)
        problem = None
        if not sampler_file.is_file():
            problem = f"its sampler state {str(sampler_file)!r} is missing"
            if required:
                raise FileNotFoundError(f"cannot resume from {str(path)!r}: {problem}")
        else:
            with open(sampler_file, "rb") as f:
                saved = pickle.load(f)
            if saved.get("snapshot_id") != checkpoint["snapshot_id"]:
                problem = f"{str(sampler_file)!r} does not belong to {str(path)!r}"
                if required:
                    raise ValueError(
                        f"{problem} (the run was stopped between writing the two); resume "
                        "from another snapshot"
                    )
        if problem is not None:
            logger.log(f"WARNING: {problem}; the environments start afresh.")
            return None
        return saved["state"]

    def _restore(
        self,
        path: Path,
        checkpoint: dict[str, Any],
        sampler_state: Any,
        load_optimizer: bool = True,
    ) -> None:
        """After startup: load the checkpoint's states (random generators last, since
        loading the others may draw from them; the optimizer's only if ``load_optimizer``)
        and drop later progress.csv rows."""
        self.agent.load_state_dict(checkpoint["agent_state_dict"])
        if load_optimizer:
            self.algo.load_optim_state_dict(checkpoint["optimizer_state_dict"])
        if getattr(self.algo, "update_counter", None) is not None:
            self.algo.update_counter = checkpoint["cum_updates"]
        if sampler_state is not None:
            self.sampler.load_state_dict(sampler_state)
        replay_name = checkpoint.get("replay_file")
        if replay_name is not None:
            if hasattr(self.algo, "load_replay"):
                self.algo.load_replay(path.parent / replay_name)
            else:
                logger.log(
                    "WARNING: the checkpoint holds a replay buffer this algorithm can't take."
                )
        elif hasattr(self.algo, "load_replay"):
            logger.log("WARNING: the checkpoint holds no replay buffer; replay starts empty.")
        self._next_itr = self._last_log_next_itr = checkpoint["next_itr"]
        self._cum_completed_trajs = checkpoint["cum_completed_trajs"]
        self._load_runner_state(checkpoint["runner_state"])
        logger.truncate_tabular(checkpoint["runner_state"]["progress_rows"])
        set_rng_state(checkpoint["rng_state"])
        self._start_time = self._last_time = time.time()  # (time before is in cum_time)
        self.pbar = ProgBarCounter(self.log_interval_itrs)
        logger.log(f"Resumed from {path} after {self._next_itr} iterations.")


def _read_checkpoint(path: str | os.PathLike) -> tuple[Path, Any]:
    """The checkpoint file ``path`` names (see ``find_checkpoint``) and its content, loaded
    onto the CPU with ``torch.load(weights_only=True)``; a file that is not one is a
    ValueError."""
    checkpoint_path = find_checkpoint(path)
    try:
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    except Exception as e:  # (pickle, zip and weights-only errors alike)
        raise ValueError(
            f"{str(checkpoint_path)!r} is not a checkpoint that torch.load(weights_only=True) "
            f"can read: {e}"
        ) from e
    return checkpoint_path, checkpoint


def _replay_path(checkpoint: Path, snapshot_id: str) -> Path:
    return companion_path(checkpoint, f"replay-{snapshot_id}").with_suffix(".npz")


class MinibatchRl(MinibatchRlBase):
    """Runs RL on minibatches and logs, at each interval, statistics of the last
    ``log_traj_window`` trajectories completed while training (online performance)."""

    def __init__(self, *args: Any, log_traj_window: int = 100, **kwargs: Any):
        self.log_traj_window = _count("log_traj_window", log_traj_window)
        super().__init__(*args, **kwargs)

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._traj_infos: deque[dict[str, Any]] = deque(maxlen=self.log_traj_window)
        self._new_completed_trajs = 0

    def store_diagnostics(
        self, itr: int, traj_infos: Sequence[Any], opt_info: Any, completed: int | None = None
    ) -> None:
        self._new_completed_trajs += len(traj_infos) if completed is None else completed
        # Only the window's worth is read: a sampler may hand over a sequence that builds
        # its infos when indexed (BatchedSampler: thousands of episodes per batch).
        window = traj_infos[-self.log_traj_window :]
        self._traj_infos.extend(_traj_record(info) for info in window)
        super().store_diagnostics(itr, traj_infos, opt_info, completed)

    def _window(self) -> Sequence[Any]:
        return self._traj_infos

    def _diagnostics(self, itr: int, traj_infos: Sequence[Any] | None, eval_time: float) -> dict:
        row = super()._diagnostics(itr, traj_infos, eval_time)
        row["NewCompletedTrajs"] = self._new_completed_trajs
        row["StepsInTrajWindow"] = sum(r.get("Length", 0) for r in self._traj_infos)
        return row

    def _end_interval(self) -> None:
        super()._end_interval()
        self._new_completed_trajs = 0

    def _runner_state(self) -> dict[str, Any]:
        return {**super()._runner_state(), "traj_window": [dict(r) for r in self._traj_infos]}

    def _load_runner_state(self, state: Mapping[str, Any]) -> None:
        super()._load_runner_state(state)
        self._traj_infos = deque(state["traj_window"], maxlen=self.log_traj_window)


class MinibatchRlEval(MinibatchRlBase):
    """Runs RL on minibatches and evaluates the agent offline with
    ``sampler.evaluate_agent`` before training and at each log interval.

    ``stop_return``: training ends early, after the row and snapshot of the first evaluation
    whose mean return reaches it (a task counted as solved).
    """

    _eval = True

    def __init__(self, *args: Any, stop_return: float | None = None, **kwargs: Any):
        if stop_return is not None and not (
            isinstance(stop_return, (int, float)) and math.isfinite(stop_return)
        ):
            raise ValueError(f"stop_return must be a finite number or None, got {stop_return!r}")
        self.stop_return = stop_return
        super().__init__(*args, **kwargs)

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._cum_eval_time = 0.0

    def _before_training(self) -> None:
        with logger.prefix("itr #0 "):
            eval_traj_infos, eval_time = self.evaluate_agent(0)
            self.log_diagnostics(0, eval_traj_infos, eval_time)

    def _log_interval(self, itr: int) -> None:
        eval_traj_infos, eval_time = self.evaluate_agent(itr)
        self.log_diagnostics(itr, eval_traj_infos, eval_time)
        returns = [_traj_record(info).get("Return", math.nan) for info in eval_traj_infos]
        stop = self.stop_return
        if stop is not None and returns and sum(returns) / len(returns) >= stop:
            logger.log(f"Mean evaluation return reached stop_return={stop}: training ends.")
            self._reached_stop_return = True

    def evaluate_agent(self, itr: int) -> tuple[list[Any], float]:
        """Offline evaluation: ``(trajectory infos, seconds it took)``; skipped (no
        trajectories) before the algorithm's ``min_itr_learn``, except at iteration 0."""
        self.pbar.stop()
        if itr > 0 and itr < self.min_itr_learn - 1:
            return [], 0.0
        logger.log("Evaluating agent...")
        self.agent.eval_mode(itr)
        start = time.time()
        traj_infos = list(self.sampler.evaluate_agent(itr))
        eval_time = time.time() - start
        logger.log("Evaluation runs complete.")
        return traj_infos, eval_time

    def log_diagnostics(
        self,
        itr: int,
        traj_infos: Sequence[Any] | None = None,
        eval_time: float = 0.0,
        prefix: str = "",
    ) -> None:
        traj_infos = list(traj_infos or [])
        if not traj_infos:
            logger.log("WARNING: had no complete trajectories in eval.")
        self._cum_eval_time += eval_time
        super().log_diagnostics(itr, traj_infos, eval_time, prefix)

    def _diagnostics(self, itr: int, traj_infos: Sequence[Any] | None, eval_time: float) -> dict:
        row = super()._diagnostics(itr, traj_infos, eval_time)
        records = [_traj_record(i) for i in traj_infos or []]
        row["CumTrainTime"] = self._cum_time - self._cum_eval_time
        row["CumEvalTime"] = self._cum_eval_time
        row["StepsInEval"] = sum(r.get("Length", 0) for r in records)
        row["TrajsInEval"] = len(records)
        return row

    def _runner_state(self) -> dict[str, Any]:
        return {**super()._runner_state(), "cum_eval_time": self._cum_eval_time}

    def _load_runner_state(self, state: Mapping[str, Any]) -> None:
        super()._load_runner_state(state)
        self._cum_eval_time = state["cum_eval_time"]
