"""Replay of single (n-step) transitions, with every option of the storage."""

from __future__ import annotations

from typing import Any

import numpy as np

from rl_arrays import AgentInputs, as_count

from . import _device
from ._base import BaseNStepReturnBuffer
from ._schemas import (
    SamplesFromReplay,
    SamplesFromReplayPri,
    SamplesFromReplayTL,
    SamplesFromReplayTLPri,
)

__all__ = ["ReplayBuffer"]


class ReplayBuffer(BaseNStepReturnBuffer):
    """Replays single transitions: uniformly, or by ``priority ** alpha`` (``prioritized``).

    ``ReplayBuffer(example, size, B, discount, n_step_return, *, prioritized, frame_based,
    time_limit, shared_memory, ...)``: options as in ``BaseNStepReturnBuffer``; any
    combination works, and ``device`` (tensors on a torch device) with all but
    ``frame_based`` and ``shared_memory``.  Batches are ``SamplesFromReplay`` (``...TL`` with
    ``time_limit``; ``...Pri`` / ``...TLPri``, with importance weights, when prioritized):
    numpy arrays, or with ``device`` tensors on it.
    """

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Observations at ``[T_idxs, B_idxs]`` (re-assembled from frames in frame buffers)."""
        return self.storage.observation_at(T_idxs, B_idxs)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Training data at ``[T_idxs, B_idxs]``, with the targets ``n_step_return`` later.

        numpy arrays with leading dim ``len(T_idxs)``; ``rl_arrays.torchify_buffer`` turns
        the batch into tensors without copying.  With ``device``: tensors gathered there.
        """
        if self.device is not None:
            return self._extract_on_device(T_idxs, B_idxs, self.device)
        s, n = self.samples, self.n_step_return
        target_T = (T_idxs + n) % self.T
        done_n = self.samples_done_n[T_idxs, B_idxs]
        observation, target_observation = self._observation_pair(T_idxs, B_idxs, done_n)
        fields = dict(
            agent_inputs=self.storage.agent_inputs(T_idxs, B_idxs, observation),
            action=s.action[T_idxs, B_idxs],
            return_=self.samples_return_[T_idxs, B_idxs],
            done=s.done[T_idxs, B_idxs],
            done_n=done_n,
            target_inputs=self.storage.agent_inputs(target_T, B_idxs, target_observation),
        )
        if self.time_limit:
            fields.update(
                timeout=s.timeout[T_idxs, B_idxs],
                timeout_n=self.samples_timeout_n[T_idxs, B_idxs],
            )
            return SamplesFromReplayTL(**fields)
        return SamplesFromReplay(**fields)

    def _extract_on_device(self, T_idxs: np.ndarray, B_idxs: np.ndarray, device: Any) -> Any:
        """``extract_batch`` from tensors: the storage rows of every step read (computed
        where the indices were drawn), then one gather per field; a dozen operations
        whatever the batch size, none reading the device."""
        s, n = self.samples, self.n_step_return
        # The previous steps of t and t + n, then t and t + n.
        rows = _device.storage_rows(T_idxs, B_idxs, [-1, n - 1, 0, n], self.T, self.B, device)
        observation = _device.gather(s.observation, rows[2:])  # at t and t + n
        action = _device.gather(s.action, rows[:3])  # at t - 1, t + n - 1 and t
        done = _device.gather(s.done, rows[:3])
        started = done[:2]  # (the previous action and reward are 0 at an episode's start)
        prev_action = _device.zero_where(action[:2], started)
        prev_reward = _device.zero_where(_device.gather(s.reward, rows[:2]), started)
        fields = dict(
            agent_inputs=AgentInputs(observation[0], prev_action[0], prev_reward[0]),
            action=action[2],
            return_=_device.gather(self.samples_return_, rows[2]),
            done=done[2],
            done_n=_device.gather(self.samples_done_n, rows[2]),
            target_inputs=AgentInputs(observation[1], prev_action[1], prev_reward[1]),
        )
        if self.time_limit:
            fields.update(
                timeout=_device.gather(s.timeout, rows[2]),
                timeout_n=_device.gather(self.samples_timeout_n, rows[2]),
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
            return self.storage.observation_at(T_idxs, B_idxs), self.storage.observation_at(
                (T_idxs + n) % self.T, B_idxs
            )
        nf = self.n_frames
        window = self.storage.frames(T_idxs[:, None] + np.arange(1 - nf, 1 + n), B_idxs[:, None])
        observation, target = window[:, :nf], window[:, n:]
        self.storage.zero_before_resets(observation, T_idxs, B_idxs)
        if done_n.any():
            target = target.copy()
            self.storage.zero_before_resets(target, (T_idxs + n) % self.T, B_idxs)
        return observation, target

    def sample_idxs(self, batch_B: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniformly random valid ``(T_idxs, B_idxs)``: never near the cursor, never unwritten."""
        with self._reading():
            return self.starts.draw(batch_B, self.n_step_return)

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """``batch_B`` transitions, uniformly or by priority (then with importance weights)."""
        if batch_T is not None:
            raise ValueError("single-transition buffers take no batch_T")
        if not self.prioritized:
            return self.sample_batches(batch_B, 1)
        with self._reading():
            T_idxs, B_idxs, is_weights = self._sample_by_priority(batch_B, self.n_step_return)
            batch = self.extract_batch(T_idxs, B_idxs)
        weights: Any = is_weights
        if self.device is not None and not _device.is_tensor(weights):
            weights = _device.as_tensor(is_weights, self.device)
        cls = SamplesFromReplayTLPri if self.time_limit else SamplesFromReplayPri
        return cls(*batch, is_weights=weights)

    def sample_batches(self, batch_B: int, n_batches: int) -> Any:
        """``n_batches`` independent uniform batches of ``batch_B`` transitions, each drawn
        as ``sample_batch`` draws one, extracted together (one gather instead of one per
        batch): leading dim ``n_batches * batch_B``, batch ``i`` in rows ``i * batch_B`` to
        ``(i + 1) * batch_B``.  Uniform buffers only: priorities change between batches."""
        if self.prioritized:
            raise ValueError(
                "sample_batches draws uniformly; with prioritized=True use sample_batch"
            )
        n_batches = as_count("n_batches", n_batches, 1, expected="a positive integer")
        with self._reading():
            T_idxs, B_idxs = self.starts.draw(batch_B, self.n_step_return, 1, n_batches)
            return self.extract_batch(T_idxs, B_idxs)
