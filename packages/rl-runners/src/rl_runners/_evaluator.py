"""Offline evaluation, a part a runner is given (``MinibatchRl(..., evaluator=Evaluator())``)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ._logger import logger
from ._modes import AgentModes
from ._values import traj_record

__all__ = ["EvalAgent", "EvalSampler", "Evaluator"]


class EvalSampler(Protocol):
    """What an evaluator needs of the sampler, beyond the runner's protocol."""

    def evaluate_agent(self, itr: int) -> Sequence[Any]: ...


class EvalAgent(Protocol):
    """What an evaluator needs of the agent, beyond the runner's protocol."""

    def eval_mode(self, itr: int) -> None: ...


class Evaluator:
    """Evaluates the agent with ``sampler.evaluate_agent(itr)`` (in eval mode) before
    training and at each log interval; the rows summarize those trajectories.

    ``stop_return``: training ends after the row of the first evaluation whose mean return
    reaches it.  Skipped (no trajectories) before the algorithm's ``min_itr_learn``.
    """

    window: Sequence[Any] = ()  # (rows always get the evaluation's trajectories)

    def __init__(self, stop_return: float | None = None):
        if stop_return is not None and not (
            isinstance(stop_return, (int, float)) and math.isfinite(stop_return)
        ):
            raise ValueError(f"stop_return must be a finite number or None, got {stop_return!r}")
        self.stop_return = stop_return
        self.cum_eval_time = 0.0

    @staticmethod
    def skips(itr: int, min_itr_learn: int) -> bool:
        """Whether the evaluation after iteration ``itr`` is skipped (learning not begun)."""
        return 0 < itr < min_itr_learn - 1

    def evaluate(
        self, sampler: EvalSampler, modes: AgentModes, itr: int, min_itr_learn: int
    ) -> tuple[list[Any], float]:
        """``(trajectory infos, seconds it took)`` of an evaluation after iteration ``itr``."""
        if self.skips(itr, min_itr_learn):
            return [], 0.0
        logger.debug("Evaluating agent...")
        modes.switch("eval", itr)
        start = time.time()
        traj_infos = list(sampler.evaluate_agent(itr))
        eval_time = time.time() - start
        logger.debug("Evaluation runs complete.")
        return traj_infos, eval_time

    def account(self, traj_infos: Sequence[Any] | None, eval_time: float) -> list[Any]:
        """An evaluation about to be logged: its time counted, its infos as a list."""
        traj_infos = list(traj_infos or [])
        if not traj_infos:
            logger.log("WARNING: had no complete trajectories in eval.")
        self.cum_eval_time += eval_time
        return traj_infos

    def reached(self, traj_infos: Sequence[Any]) -> bool:
        """Whether the mean return of ``traj_infos`` reaches ``stop_return``."""
        returns = [traj_record(info).get("Return", math.nan) for info in traj_infos]
        stop = self.stop_return
        if stop is not None and returns and sum(returns) / len(returns) >= stop:
            logger.log(f"Mean evaluation return reached stop_return={stop}: training ends.")
            return True
        return False

    # (TrajStats: what the rows get from the evaluations)
    def store(self, records: Sequence[dict[str, Any]], completed: int) -> None:
        pass

    def columns(self, row: Mapping[str, Any], records: Sequence[dict[str, Any]]) -> dict:
        return {
            "CumTrainTime": row["CumTime (s)"] - self.cum_eval_time,
            "CumEvalTime": self.cum_eval_time,
            "StepsInEval": sum(r.get("Length", 0) for r in records),
            "TrajsInEval": len(records),
        }

    def state(self) -> dict[str, Any]:
        return {"cum_eval_time": self.cum_eval_time}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.cum_eval_time = state["cum_eval_time"]
