"""A run's counters and its rows in ``progress.csv``, and the trajectories they summarize."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from ._console import ProgBarCounter
from ._logger import logger
from ._protocols import AlgoProtocol, AsyncAlgoProtocol
from ._values import traj_record

__all__ = ["Progress", "TrajStats", "TrajWindow", "algo_batch_size"]


def algo_batch_size(algo: object, itr_batch_size: int) -> int:
    """Samples per update, for the replay ratio: the algorithm's ``batch_size``, else the
    sampler batch split into the algorithm's ``minibatches`` (1 when it has none)."""
    size = getattr(algo, "batch_size", None)
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    return itr_batch_size // max(int(getattr(algo, "minibatches", 1)), 1)


class TrajStats(Protocol):
    """Where a row's trajectory statistics come from: ``TrajWindow`` or ``Evaluator``."""

    @property
    def window(self) -> Sequence[Any]:
        """The records a row without trajectory infos summarizes."""

    def store(self, records: Sequence[dict[str, Any]], completed: int) -> None: ...

    def columns(self, row: Mapping[str, Any], records: Sequence[dict[str, Any]]) -> dict: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: Mapping[str, Any]) -> None: ...


class TrajWindow:
    """Online statistics: the last ``size`` trajectories completed while training."""

    def __init__(self, size: int):
        self.size = size
        self.window: deque[dict[str, Any]] = deque(maxlen=size)
        self.new_completed = 0

    def store(self, records: Sequence[dict[str, Any]], completed: int) -> None:
        self.new_completed += completed
        self.window.extend(records)

    def columns(self, row: Mapping[str, Any], records: Sequence[dict[str, Any]]) -> dict:
        columns = {
            "NewCompletedTrajs": self.new_completed,
            "StepsInTrajWindow": sum(r.get("Length", 0) for r in self.window),
        }
        self.new_completed = 0
        return columns

    def state(self) -> dict[str, Any]:
        return {"traj_window": [dict(r) for r in self.window], "new_completed": self.new_completed}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.window = deque(state["traj_window"], maxlen=self.size)
        self.new_completed = state.get("new_completed", 0)


class Progress:
    """Counters of a run (iterations, steps, updates, trajectories, time) and its rows:
    rlpyt's columns, then the trajectory and OptInfo statistics (see the README)."""

    def __init__(
        self,
        algo: AlgoProtocol | AsyncAlgoProtocol,
        itr_batch_size: int,
        log_interval_itrs: int,
        trajs: TrajStats,
    ):
        self.algo, self.trajs = algo, trajs
        self.itr_batch_size, self.log_interval_itrs = itr_batch_size, log_interval_itrs
        self.opt_infos: dict[str, list[Any]] = {k: [] for k in algo.opt_info_fields}
        self.traj_keys: list[str] = []
        self.start_time = self.last_time = time.time()
        self.cum_time_before = 0.0  # of the run before a resume
        self.cum_time = 0.0
        self.cum_completed_trajs = 0
        self.cum_updates = 0  # counted from the OptInfo when the algo has no update_counter
        self.last_update_counter = 0
        self.next_itr = 0  # iterations done
        self.last_log_next_itr = 0
        self.stop_itr = 0  # where the current run of iterations ends
        self.extra: dict[str, Any] = {}  # the next row's further columns (AsyncRl's)
        self.pbar = ProgBarCounter(log_interval_itrs)

    def updates(self) -> int:
        counter = getattr(self.algo, "update_counter", None)
        return self.cum_updates if counter is None else int(counter)

    def store(self, itr: int, records: Sequence[dict[str, Any]], completed: int, opt_info: Any):
        """Keep an iteration's trajectory records (of ``completed`` trajectories) and
        OptInfo values for the next row."""
        self.cum_completed_trajs += completed
        self.trajs.store(records, completed)
        for key, values in self.opt_infos.items():
            new = getattr(opt_info, key, [])
            if isinstance(new, torch.Tensor):  # (kept on its device until the row is written)
                values.append(new.detach().reshape(-1))
            else:
                values.extend(new if isinstance(new, (list, tuple)) else [new])
        if self.opt_infos and getattr(self.algo, "update_counter", None) is None:
            first = getattr(opt_info, next(iter(self.opt_infos)), [])
            if isinstance(first, torch.Tensor):
                self.cum_updates += first.numel()
            else:
                self.cum_updates += len(first) if isinstance(first, (list, tuple)) else 1
        self.pbar.update(itr + 1 - self.last_log_next_itr)

    def write_row(
        self, itr: int, traj_infos: Sequence[Any] | None, eval_time: float, prefix: str
    ) -> None:
        """One row: the runner's columns (``prefix`` before their names), the statistics of
        ``traj_infos`` (None: the window's) and of the OptInfo values stored since the last."""
        self.pbar.stop()
        infos = self.trajs.window if traj_infos is None else traj_infos
        records = [traj_record(i) for i in infos]
        row = self._columns(itr, eval_time)
        row.update(self.trajs.columns(row, records))
        row.update(self.extra)
        self.extra = {}
        with logger.tabular_prefix(prefix):
            for key, value in row.items():
                logger.record_tabular(key, value)
        for key in records[0] if records else ():
            if key not in self.traj_keys:
                self.traj_keys.append(key)
        for key in self.traj_keys:  # (a field seen before keeps its column, NaN when empty)
            logger.record_tabular_misc_stat(key, [r[key] for r in records if key in r])
        for key, values in _read_tensors(self.opt_infos).items():
            logger.record_tabular_misc_stat(key, values)
        self.opt_infos = {k: [] for k in self.opt_infos}
        logger.dump_tabular(total_steps=self.stop_itr * self.itr_batch_size)
        self.last_update_counter = self.updates()
        self.last_log_next_itr = self.next_itr

    def _columns(self, itr: int, eval_time: float) -> dict[str, Any]:
        now = time.time()
        self.cum_time = self.cum_time_before + now - self.start_time
        train_time = now - self.last_time - eval_time
        updates = self.updates()
        new_updates = updates - self.last_update_counter
        new_steps = (self.next_itr - self.last_log_next_itr) * self.itr_batch_size
        cum_steps = self.next_itr * self.itr_batch_size
        per_second = new_steps and train_time > 0
        batch, nan = algo_batch_size(self.algo, self.itr_batch_size), math.nan
        self.last_time = now
        return {
            "Iteration": itr,
            "CumTime (s)": self.cum_time,
            "CumSteps": cum_steps,
            "CumCompletedTrajs": self.cum_completed_trajs,
            "CumUpdates": updates,
            "StepsPerSecond": new_steps / train_time if per_second else nan,
            "UpdatesPerSecond": new_updates / train_time if per_second else nan,
            "ReplayRatio": new_updates * batch / new_steps if new_steps else nan,
            "CumReplayRatio": batch * updates / cum_steps if cum_steps else nan,
        }

    def next_interval(self) -> None:
        """After a row: announce the next interval, if iterations are left."""
        if self.next_itr < self.stop_itr:
            logger.debug(f"Optimizing over {self.log_interval_itrs} iterations.")
            self.pbar = ProgBarCounter(self.log_interval_itrs)

    def state(self) -> dict[str, Any]:
        """The bookkeeping a checkpoint keeps (``runner_state``), as plain values; between
        log intervals (a run stopped by a signal) also what the next row has gathered."""
        return {
            "cum_time": self.cum_time_before + time.time() - self.start_time,
            "cum_updates_counted": self.cum_updates,
            "last_update_counter": self.last_update_counter,
            "last_log_next_itr": self.last_log_next_itr,
            "opt_infos": _read_tensors(self.opt_infos),
            "traj_keys": list(self.traj_keys),
            "progress_rows": logger.tabular_row_count,
            **self.trajs.state(),
        }

    def load_state(self, next_itr: int, cum_completed_trajs: int, state: Mapping[str, Any]):
        """Continue from a checkpoint's counters; the clock restarts now."""
        self.next_itr = next_itr
        self.last_log_next_itr = state.get("last_log_next_itr", next_itr)
        self.opt_infos = {k: list(state.get("opt_infos", {}).get(k, [])) for k in self.opt_infos}
        self.cum_completed_trajs = cum_completed_trajs
        self.cum_time_before = self.cum_time = state["cum_time"]
        self.cum_updates = state["cum_updates_counted"]
        self.last_update_counter = state["last_update_counter"]
        self.traj_keys = list(state["traj_keys"])
        self.trajs.load_state(state)
        self.start_time = self.last_time = time.time()
        self.pbar = ProgBarCounter(self.log_interval_itrs)


def _read_tensors(opt_infos: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The OptInfo values as numbers, the tensors among them (an algorithm's diagnostics
    left on the device) read together: one wait for the device per row."""
    tensors = [v for values in opt_infos.values() for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return opt_infos
    numbers = iter(torch.cat([t.to(torch.float64) for t in tensors]).tolist())
    read: dict[str, list[Any]] = {}
    for key, values in opt_infos.items():
        read[key] = []
        for value in values:
            if isinstance(value, torch.Tensor):
                read[key] += [next(numbers) for _ in range(value.numel())]
            else:
                read[key].append(value)
    return read
