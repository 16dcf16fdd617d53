"""The asynchronous optimizer's pacing: it never trains beyond the algorithm's replay ratio on
the batches the memory copier has put into the replay."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ._async_control import POLL_S
from ._progress import algo_batch_size
from ._protocols import AsyncAlgoProtocol

__all__ = ["OptimizerPacing"]


class OptimizerPacing:
    """Learning starts once ``min_itr_learn + 1`` batches are copied; each ``optimize_agent``
    call then consumes its share of sampler iterations at the replay ratio. ``calls``: those
    made (a checkpoint's ``async_opt_calls``); ``waited``: seconds the optimizer waited since
    the last row (its ``OptThrottle``)."""

    def __init__(self, algo: AsyncAlgoProtocol, itr_batch_size: int, min_itr_learn: int):
        updates = getattr(algo, "updates_per_optimize", 1)
        # Sampler iterations of data each optimize_agent call consumes at the replay ratio.
        self.itrs_per_call = (
            updates * algo_batch_size(algo, itr_batch_size) / (algo.replay_ratio * itr_batch_size)
        )
        self._algo = algo
        self._min_itr_learn = min_itr_learn
        self.calls = 0
        self.learn_from: float = min_itr_learn + 1  # batches copied before updates
        self.waited = 0.0

    def throttle_point(self) -> float:
        """Batches copied the next optimize call needs: learning starts once
        ``min_itr_learn + 1`` are in the replay, each call then consumes its share."""
        return self.learn_from + self.calls * self.itrs_per_call

    def go_on_from(self, checkpoint: Mapping[str, Any], replay_kept: bool) -> None:
        """After a resume's restore: the calls go on from the checkpoint's; without a saved
        replay buffer learning starts again once ``min_itr_learn + 1`` new batches are in."""
        next_itr = int(checkpoint["next_itr"])
        updates = max(int(getattr(self._algo, "updates_per_optimize", 1)), 1)
        state = checkpoint["runner_state"]
        self.calls = int(state.get("async_opt_calls", checkpoint["cum_updates"] // updates))
        if not replay_kept:
            self.learn_from = next_itr + self._min_itr_learn + 1 - self.calls * self.itrs_per_call

    def wait(self) -> None:
        """A waiting step of the optimizer, counted in ``waited``."""
        time.sleep(POLL_S)
        self.waited += POLL_S

    def take_waited(self) -> float:
        """The seconds waited since the last call (a row's ``OptThrottle``)."""
        waited, self.waited = self.waited, 0.0
        return waited
