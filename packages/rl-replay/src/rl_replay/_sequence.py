"""Replay of sequences for recurrent agents, with stored rnn states.

``rnn_state_interval`` says how often the agent's recurrent state is stored: every step
(1), every k steps (k > 1, sequences then start only at those steps, saving memory), or
never (0: sequences start anywhere and ``init_rnn_state`` is None).  The example must have a
``prev_rnn_state`` field unless the interval is 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from rl_arrays import as_count, extract_sequences

from ._base import BaseNStepReturnBuffer
from ._schemas import SequenceSamplesFromReplay, SequenceSamplesFromReplayPri
from ._storage import flatten_arrays

__all__ = ["SequenceReplayBuffer"]


class SequenceReplayBuffer(BaseNStepReturnBuffer):
    """Replays ``[batch_T, batch_B]`` sequences, starting uniformly or by the priority of
    their start (``prioritized``), and keeps the agent's rnn state.

    ``SequenceReplayBuffer(example, size, B, rnn_state_interval, batch_T=None, *,
    discount, n_step_return, prioritized, frame_based, shared_memory, ...)``: options as in
    ``BaseNStepReturnBuffer``, but no ``time_limit``.  Prioritized: one sum-tree leaf per
    stored rnn state, so ``batch_T`` is fixed at construction and appends must span whole
    rnn-state intervals; ``input_priority_shift`` counts stored states.
    """

    def __init__(
        self,
        example: Any,
        size: int,
        B: int,
        rnn_state_interval: int,
        batch_T: int | None = None,
        **options: Any,
    ):
        rnn_state_interval = as_count("rnn_state_interval", rnn_state_interval, expected=">= 0")
        if batch_T is not None:
            batch_T = as_count("batch_T", batch_T, 1, expected="a positive integer")
        if rnn_state_interval > 0 and "prev_rnn_state" not in getattr(example, "_fields", ()):
            raise ValueError("rnn_state_interval > 0 needs a prev_rnn_state field in the example")
        self.rnn_state_interval = rnn_state_interval
        self.batch_T = batch_T
        super().__init__(example, size, B, **options)
        if self.rnn_state_interval > 1:
            self.samples_prev_rnn_state = self.storage.allocate(
                example.prev_rnn_state, self.T // self.rnn_state_interval
            )
        if batch_T is not None:
            self._check_batch_T(batch_T)

    def _check_options(self) -> None:
        if self.device is not None:
            raise ValueError(
                f"device={str(self.device)!r}: sequence buffers stay numpy on the host "
                "(device= is an option of ReplayBuffer)"
            )
        if self.time_limit:
            raise ValueError(
                "time_limit=True: sequence batches carry no timeout; use a ReplayBuffer"
            )
        if self.prioritized and self.batch_T is None:
            raise ValueError(
                "prioritized=True needs batch_T at construction (a prioritized sequence "
                "buffer's tree holds the starts of whole batch_T sequences)"
            )

    @property
    def _interval(self) -> int:
        """Steps between possible sequence starts: between stored rnn states, or 1."""
        return max(self.rnn_state_interval, 1)

    def _priority_layout(self) -> tuple[int, int, int]:
        """One row per stored rnn state: a start is valid while its whole sequence is."""
        interval, batch_T = self._interval, self.batch_T
        assert batch_T is not None  # (_check_options)
        off_backward = math.ceil((self._off_backward(batch_T) + 1) / interval) - 1
        off_forward = math.ceil(self.off_forward / interval)
        if off_backward + off_forward >= self.T // interval:
            raise ValueError(
                f"{self.T} time steps per environment: once the buffer wraps, no sequence "
                f"start at a stored rnn state (every {interval} steps) leaves room for "
                f"batch_T={batch_T} plus n_step_return={self.n_step_return} steps; make "
                "size larger"
            )
        return self.T // interval, off_backward, off_forward

    def _round_T(self, T: int) -> int:
        """A whole number of rnn-state intervals."""
        return math.ceil(T / self._interval) * self._interval

    def _stored_example(self, example: Any) -> Any:
        if self.rnn_state_interval != 1 and "prev_rnn_state" in example._fields:
            return example._replace(prev_rnn_state=None)
        return example

    def _check_batch_T(self, batch_T: int) -> None:
        if batch_T + self.n_step_return + self.off_forward > self.T:
            raise ValueError(
                f"batch_T={batch_T} plus n_step_return={self.n_step_return} does not fit in "
                f"{self.T} time steps per environment"
            )

    def _off_backward(self, batch_T: int) -> int:
        """Newest slots that cannot start a sequence: it would read unwritten steps."""
        return batch_T + self.n_step_return - 1

    def _check_samples(self, samples: Any) -> int:
        T_new = super()._check_samples(samples)
        if self.prioritized and (self.t % self._interval or T_new % self._interval):
            raise ValueError(
                f"append whole rnn-state intervals of {self._interval} steps: got {T_new} "
                f"steps at step {self.t}"
            )
        return T_new

    def _advance_priorities(self, T_new: int, priorities: npt.ArrayLike | None) -> None:
        super()._advance_priorities(T_new // self._interval, priorities)  # a row per state

    def _write(self, idxs: np.ndarray | slice, samples: Any, T_new: int) -> None:
        super()._write(idxs, samples, T_new)
        interval = self.rnn_state_interval
        if interval > 1:  # keep the states at steps that are multiples of the interval
            steps = np.arange((-self.t) % interval, T_new, interval)
            slots = ((self.t + steps) % self.T) // interval
            self.samples_prev_rnn_state[slots] = samples.prev_rnn_state[steps]

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray, T: int) -> np.ndarray:
        """``[T, len(B_idxs), ...]`` observation sequences starting at ``[T_idxs, B_idxs]``."""
        times = (T_idxs[None, :] + np.arange(T)[:, None]) % self.T
        return self.storage.observation_at(times, np.broadcast_to(B_idxs, times.shape))

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray, T: int) -> Any:
        """Sequences for training: see ``SequenceSamplesFromReplay`` for the fields.

        Observations, previous actions and previous rewards span ``T + n_step_return``
        steps so the targets can be sliced from the same arrays; the actions taken span
        ``T``.  ``T_idxs`` must hold stored rnn states.
        """
        s, interval, n = self.samples, self.rnn_state_interval, self.n_step_return
        if interval > 1:
            if np.any(T_idxs % interval):
                raise ValueError(f"sequence starts must be multiples of {interval}")
            init_rnn_state = self.samples_prev_rnn_state[T_idxs // interval, B_idxs]
        elif interval == 1:
            init_rnn_state = s.prev_rnn_state[T_idxs, B_idxs]
        else:
            init_rnn_state = None
        prev_T = T_idxs - 1
        all_reward = extract_sequences(s.reward, prev_T, B_idxs, T + n)
        all_action = extract_sequences(s.action, prev_T, B_idxs, T + n)
        # Zero the previous action and reward at each episode's first step, as the agent saw.
        started = extract_sequences(s.done, prev_T, B_idxs, T + n)
        if started.any():
            all_reward[started] = 0
            all_action[started] = 0
        return SequenceSamplesFromReplay(
            all_observation=self.extract_observation(T_idxs, B_idxs, T + n),
            all_action=all_action,
            all_reward=all_reward,
            return_=extract_sequences(self.samples_return_, T_idxs, B_idxs, T),
            done=extract_sequences(s.done, T_idxs, B_idxs, T),
            done_n=extract_sequences(self.samples_done_n, T_idxs, B_idxs, T),
            init_rnn_state=init_rnn_state,
            action=extract_sequences(s.action, T_idxs, B_idxs, T),
        )

    def _state_arrays(self) -> dict[str, np.ndarray]:
        arrays = super()._state_arrays()
        if self.rnn_state_interval > 1:
            arrays.update(flatten_arrays("prev_rnn_state", self.samples_prev_rnn_state))
        return arrays

    def sample_idxs(self, batch_B: int, batch_T: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniformly random starts whose whole sequence (and previous step) holds valid
        data, and that hold a stored rnn state."""
        return self.starts.draw(batch_B, self._off_backward(batch_T), self._interval)

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """``[batch_T, batch_B]`` sequences (``batch_T`` defaults to the one given at
        construction); by priority with importance weights ``[batch_B]``."""
        if self.prioritized and batch_T not in (None, self.batch_T):
            raise ValueError(f"this buffer replays batch_T={self.batch_T} only")
        batch_T = self.batch_T if batch_T is None else batch_T
        if batch_T is None:
            raise ValueError("give batch_T here or when making the buffer")
        batch_T = as_count("batch_T", batch_T, 1, expected="a positive integer")
        self._check_batch_T(batch_T)
        with self._reading():
            if not self.prioritized:
                T_idxs, B_idxs = self.sample_idxs(batch_B, batch_T)
                return self.extract_batch(T_idxs, B_idxs, batch_T)
            off_backward = self._off_backward(batch_T)
            rows, B_idxs, is_weights = self._sample_by_priority(
                batch_B, off_backward, self._interval
            )
            batch = self.extract_batch(rows * self._interval, B_idxs, batch_T)
        return SequenceSamplesFromReplayPri(*batch, is_weights=is_weights)
