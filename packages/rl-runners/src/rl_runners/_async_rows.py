"""The asynchronous runner's rows: which sampler iterations each covers, so that a row counts
exactly its own batches although the sampler's news arrives ahead of the optimizer."""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["RowBook"]


class RowBook:
    """``next_row``: the sampler iterations the next row covers; ``received``: trajectory-info
    messages received (one per batch, in order); ``evals``: the evaluations received,
    ``(n_batches, infos, seconds)``. The infos of batches past the next row wait for it."""

    def __init__(self, log_interval_itrs: int):
        self._interval = log_interval_itrs
        self.next_row = log_interval_itrs
        self.received = 0
        self._pending: list[tuple[int, list[Any]]] = []
        self.evals: deque[tuple[int, list[Any], float]] = deque()

    def take(self, news: list[tuple[Any, ...]]) -> list[tuple[int, list[Any]]]:
        """The children's messages, evaluations queued; returns ``(itr, traj_infos)`` of the
        next row's batches."""
        trained = [(message[1], message[2]) for message in news if message[0] == "train"]
        self.received += len(trained)
        self.evals.extend(message[1:] for message in news if message[0] != "train")
        return self._sort(trained)

    def due(self, copied: int, throttle_point: float) -> bool:
        """(online rows) The row's batches are copied, trained on and their infos in."""
        b = self.next_row
        return copied >= b and throttle_point >= b and self.received >= b

    def written(self, n_batches: int) -> list[tuple[int, list[Any]]]:
        """The row after ``n_batches`` sampler iterations is written: on to the next; returns
        ``(itr, traj_infos)`` that waited for it."""
        self.next_row = n_batches + self._interval
        pending, self._pending = self._pending, []
        return self._sort(pending)

    def go_on_from(self, next_itr: int) -> None:
        """(a resume) The rows go on from the checkpoint's iteration."""
        self.received = next_itr
        self.next_row = (next_itr // self._interval + 1) * self._interval

    def _sort(self, infos: list[tuple[int, list[Any]]]) -> list[tuple[int, list[Any]]]:
        """Those of the next row's batches; the others wait."""
        ready: list[tuple[int, list[Any]]] = []
        for itr, traj_infos in infos:
            (ready if itr < self.next_row else self._pending).append((itr, traj_infos))
        return ready
