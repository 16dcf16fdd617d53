"""Replay of single transitions: uniform or prioritized, plain, frame-wise or time-limit."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._base import BaseNStepReturnBuffer
from ._prioritized import Prioritizer
from ._schemas import (
    SamplesFromReplay,
    SamplesFromReplayPri,
    SamplesFromReplayTL,
    SamplesFromReplayTLPri,
)

__all__ = [
    "NStepReturnBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayFrameBuffer",
    "TlPrioritizedReplayBuffer",
    "TlUniformReplayBuffer",
    "UniformReplayBuffer",
    "UniformReplayFrameBuffer",
]


class NStepReturnBuffer(BaseNStepReturnBuffer):
    """What a single-transition replay returns; subclasses choose which transitions."""

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Observations at ``[T_idxs, B_idxs]`` (re-assembled from frames in frame buffers)."""
        return self._observation_at(T_idxs, B_idxs)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Training data at ``[T_idxs, B_idxs]``, with the targets ``n_step_return`` later.

        numpy arrays with leading dim ``len(T_idxs)``; ``rl_arrays.torchify_buffer`` turns
        the batch into tensors without copying.
        """
        s, n = self.samples, self.n_step_return
        target_T = (T_idxs + n) % self.T
        done_n = self.samples_done_n[T_idxs, B_idxs]
        observation, target_observation = self._observation_pair(T_idxs, B_idxs, done_n)
        fields = dict(
            agent_inputs=self._agent_inputs(T_idxs, B_idxs, observation),
            action=s.action[T_idxs, B_idxs],
            return_=self.samples_return_[T_idxs, B_idxs],
            done=s.done[T_idxs, B_idxs],
            done_n=done_n,
            target_inputs=self._agent_inputs(target_T, B_idxs, target_observation),
        )
        if self.time_limit:
            fields.update(
                timeout=s.timeout[T_idxs, B_idxs],
                timeout_n=self.samples_timeout_n[T_idxs, B_idxs],
            )
            return SamplesFromReplayTL(**fields)
        return SamplesFromReplay(**fields)

    def _observation_pair(
        self, T_idxs: np.ndarray, B_idxs: np.ndarray, done_n: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Observations at t and at t + n_step_return.  Frame buffers gather the frames of
        both in one window and return two overlapping views of it, unless a reset within
        the n steps means the target must zero frames the observation keeps."""
        n = self.n_step_return
        if not self.frame_based:
            return self._observation_at(T_idxs, B_idxs), self._observation_at(
                (T_idxs + n) % self.T, B_idxs
            )
        nf = self.n_frames
        window = self._frames(T_idxs[:, None] + np.arange(1 - nf, 1 + n), B_idxs[:, None])
        observation, target = window[:, :nf], window[:, n:]
        self._zero_before_resets(observation, T_idxs, B_idxs)
        if done_n.any():
            target = target.copy()
            self._zero_before_resets(target, (T_idxs + n) % self.T, B_idxs)
        return observation, target


class UniformReplayBuffer(NStepReturnBuffer):
    """Replays single transitions chosen uniformly among the valid ones."""

    def sample_idxs(self, batch_B: int) -> tuple[np.ndarray, np.ndarray]:
        """Random valid ``(T_idxs, B_idxs)``: never near the cursor, never unwritten."""
        with self._reading():
            return self._sample_starts(batch_B, self.n_step_return)

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """``batch_B`` transitions, uniformly at random."""
        if batch_T is not None:
            raise ValueError("single-transition buffers take no batch_T")
        return self.sample_batches(batch_B, 1)

    def sample_batches(self, batch_B: int, n_batches: int) -> Any:
        """``n_batches`` independent batches of ``batch_B`` transitions, each drawn as
        ``sample_batch`` draws one, extracted together (one gather instead of one per
        batch): leading dim ``n_batches * batch_B``, batch ``i`` in rows ``i * batch_B`` to
        ``(i + 1) * batch_B``."""
        if not isinstance(n_batches, (int, np.integer)) or n_batches < 1:
            raise ValueError(f"n_batches must be a positive integer, got {n_batches!r}")
        with self._reading():
            T_idxs, B_idxs = self._sample_starts(batch_B, self.n_step_return, 1, n_batches)
            return self.extract_batch(T_idxs, B_idxs)


class PrioritizedReplayBuffer(NStepReturnBuffer):
    """Replays single transitions drawn in proportion to ``priority ** alpha``.

    New samples get ``default_priority`` unless ``input_priorities`` is on and they come as
    ``PrioritiesSamplesToBuffer(priorities, samples)``; ``input_priority_shift`` assigns
    input priorities that many steps earlier.  ``unique`` samples without replacement.
    """

    def __init__(
        self,
        example: Any,
        size: int,
        B: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        default_priority: float = 1.0,
        unique: bool = False,
        input_priorities: bool = False,
        input_priority_shift: int = 0,
        **kwargs: Any,
    ):
        super().__init__(example, size, B, **kwargs)
        self.priorities = Prioritizer(
            self.T,
            self.B,
            self.n_step_return,
            self.off_forward,
            alpha=alpha,
            beta=beta,
            default_priority=default_priority,
            unique=unique,
            input_priorities=input_priorities,
            input_priority_shift=input_priority_shift,
            rng=self.rng,
            shared_memory=self.shared_memory,
        )

    def set_beta(self, beta: float) -> None:
        """Anneal the importance-sampling exponent (the algorithm's schedule calls this)."""
        self.priorities.beta = float(beta)

    def _advance_priorities(self, T_new: int, priorities: Any) -> None:
        self.priorities.advance(T_new, priorities)

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """``batch_B`` transitions by priority, with their importance weights."""
        if batch_T is not None:
            raise ValueError("single-transition buffers take no batch_T")
        with self._reading():
            n_valid, _ = self._valid_starts(self.n_step_return)
            self._check_batch_B(batch_B, n_valid, self.n_step_return)
            T_idxs, B_idxs, is_weights = self.priorities.sample(batch_B)
            batch = self.extract_batch(T_idxs, B_idxs)
        cls = SamplesFromReplayTLPri if self.time_limit else SamplesFromReplayPri
        return cls(*batch, is_weights=is_weights)

    def update_batch_priorities(self, priorities: Any) -> None:
        """New priorities for the last sampled batch, e.g. its absolute TD errors."""
        with self._writing():
            self.priorities.update_batch_priorities(priorities)

    def _state_arrays(self) -> dict[str, np.ndarray]:
        return {**super()._state_arrays(), **self.priorities.state_arrays()}


class UniformReplayFrameBuffer(UniformReplayBuffer):
    """Uniform replay storing each frame of multi-frame observations once."""

    frame_based = True


class PrioritizedReplayFrameBuffer(PrioritizedReplayBuffer):
    """Prioritized replay storing each frame of multi-frame observations once."""

    frame_based = True


class TlUniformReplayBuffer(UniformReplayBuffer):
    """Uniform replay returning ``timeout`` and ``timeout_n``, so the algorithm can
    bootstrap through time-limit truncations instead of treating them as terminal."""

    time_limit = True


class TlPrioritizedReplayBuffer(PrioritizedReplayBuffer):
    """Prioritized replay returning ``timeout`` and ``timeout_n``."""

    time_limit = True
