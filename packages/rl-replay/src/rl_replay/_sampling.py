"""Which time slots of a replay buffer's storage may start a sample, and uniform draws among
them.

Two offsets around the cursor decide it: ``off_backward`` newest slots are invalid (their
n-step future, or the rest of their sequence, is not written yet: it depends on what is
sampled, so each call gives it) and ``off_forward`` oldest slots are invalid (their previous
action, or their frame history, was just overwritten).  Before the storage first wraps, the
first ``off_forward`` slots are invalid too.
"""

from __future__ import annotations

import numpy as np

from rl_arrays import as_count

from ._storage import RingStorage

__all__ = ["ValidStarts"]


class ValidStarts:
    """The valid start slots of ``storage``, drawn from with ``rng`` (the buffer's)."""

    def __init__(self, storage: RingStorage, off_forward: int, rng: np.random.Generator):
        self.storage, self.off_forward, self.rng = storage, off_forward, rng

    def count(self, off_backward: int) -> int:
        """How many start slots per environment are valid now (negative: none)."""
        written = min(self.storage.t_total, self.storage.T)
        return written - off_backward - self.off_forward

    def slots(self, k: np.ndarray) -> np.ndarray:
        """The k-th valid start slot (0: the oldest valid one)."""
        oldest = self.storage.t if self.storage.full else 0
        return (oldest + self.off_forward + k) % self.storage.T

    def valid(self, off_backward: int, interval: int = 1) -> tuple[int, np.ndarray | None]:
        """How many start slots per environment are valid, and (with an ``interval`` > 1)
        which: only multiples of it, the slots holding a stored rnn state."""
        count = max(self.count(off_backward), 0)
        if interval == 1:
            return count, None
        starts = self.slots(np.arange(count))
        starts = starts[starts % interval == 0]
        return len(starts), starts

    def checked_batch_B(self, batch_B: int, off_backward: int, interval: int = 1) -> int:
        """``batch_B`` as an int, once there are enough valid starts to draw it from."""
        n_valid, _ = self.valid(off_backward, interval)
        return self._checked_batch_B(batch_B, n_valid, off_backward)

    def _checked_batch_B(self, batch_B: int, n_valid: int, off_backward: int) -> int:
        batch_B = as_count("batch_B", batch_B, 1, expected="a positive integer")
        if n_valid == 0:
            raise ValueError(
                f"not enough data to sample yet: {self.storage.t_total} steps written per "
                f"environment, a valid sample needs {off_backward + self.off_forward + 1}"
            )
        if batch_B > n_valid * self.storage.B:
            raise ValueError(
                f"batch_B={batch_B} is larger than the {n_valid * self.storage.B} valid samples"
            )
        return batch_B

    def draw(
        self, batch_B: int, off_backward: int, interval: int = 1, n_batches: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Uniformly random valid ``(T_idxs, B_idxs)`` (see ``valid``): ``n_batches``
        independent batches of ``batch_B``, one after the other."""
        n_valid, starts = self.valid(off_backward, interval)
        batch_B = self._checked_batch_B(batch_B, n_valid, off_backward)
        B = self.storage.B
        draws = self.rng.integers(n_valid * B, size=n_batches * batch_B)
        k, B_idxs = np.divmod(draws, B)
        T_idxs = self.slots(k) if starts is None else starts[k]
        return T_idxs, B_idxs
