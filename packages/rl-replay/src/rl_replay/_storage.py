"""The ``[T, B]`` arrays of a replay buffer and the cursor that wraps around them: allocating
them (numpy, OS shared memory or tensors on a device), writing new steps and the n-step
returns they complete, and reading observations back (a frame buffer stores each frame once
and rebuilds its observations).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rl_arrays import AgentInputs, buffer_from_example, check_memory, np_mp_array

from . import _device
from ._n_step import discount_return_n_step, discount_return_n_step_tensor, timeout_n_step

__all__ = ["RingStorage", "check_frame_stacks", "count_frames", "flatten_arrays", "take_rows"]


def flatten_arrays(prefix: str, buffer_: Any) -> dict[str, np.ndarray]:
    """Every array in a (nested) namedarraytuple, keyed by its dotted path."""
    if buffer_ is None:
        return {}
    if hasattr(buffer_, "_fields"):  # a namedtuple or namedarraytuple
        flat: dict[str, np.ndarray] = {}
        for name, item in zip(buffer_._fields, buffer_, strict=True):
            flat.update(flatten_arrays(f"{prefix}.{name}", item))
        return flat
    return {prefix: buffer_}


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]``.  When the program has loaded torch, its multi-threaded gather does
    it (about twice as fast on two cores for image frames); numpy otherwise."""
    torch = sys.modules.get("torch")
    if torch is None or array.dtype == np.bool_:
        return np.take(array, rows, axis=0)
    return torch.from_numpy(array).index_select(0, torch.from_numpy(rows)).numpy()


def count_frames(observation: Any) -> int:
    """The frames of one observation ``[n_frames, ...]`` that a frame buffer stores apart."""
    frame_shape = np.shape(observation)
    if len(frame_shape) < 2:
        raise ValueError(
            f"a frame buffer needs observations [n_frames, ...], got shape {frame_shape}"
        )
    return frame_shape[0]


def check_frame_stacks(observation: np.ndarray, done: np.ndarray) -> None:
    """A frame buffer keeps only the newest frame of each observation: refuse ``[T, B,
    n_frames, ...]`` observations that are not a sliding window over one stream of frames
    (colour channels, say), where consecutive steps of an episode share ``n_frames - 1``."""
    continuing = ~np.asarray(done[:-1], bool)
    if not np.array_equal(observation[1:, :, :-1][continuing], observation[:-1, :, 1:][continuing]):
        raise ValueError(
            f"a frame buffer stores only the newest of each observation's frames, but these "
            f"observations (shape {np.shape(observation)[2:]}) are not stacked frames: "
            "consecutive steps do not share their other frames. Store whole observations "
            "(frame_based=False; DQN's frame_buffer=False)"
        )


class RingStorage:
    """``T`` time slots of ``B`` environments and the cursor (``t``: the next slot written;
    ``t_total``: steps written in all).

    ``stored`` is one step of what ``samples`` holds; ``observation`` one step's observation.
    With ``frame_based``, ``samples.observation`` is None and the frames of slot t's
    observation are ``samples_frames[t : t + n_frames]``.  n-step returns (``n_step_return``
    > 1) get arrays of their own; with 1 they are the stored rewards and dones.
    """

    def __init__(
        self,
        stored: Any,
        observation: Any,
        T: int,
        B: int,
        *,
        frame_based: bool,
        n_frames: int,
        n_step_return: int,
        time_limit: bool,
        device: Any,
        shared_memory: bool,
    ):
        self.T, self.B, self.size = T, B, T * B
        self.frame_based, self.n_frames = frame_based, n_frames
        self.n_step_return, self.time_limit = n_step_return, time_limit
        self.device, self.shared_memory = device, shared_memory
        if frame_based:
            stored = stored._replace(observation=None)
        self.check_memory(stored, observation)
        if frame_based:
            # The first n_frames - 1 rows repeat the last ones, so wrapped histories are contiguous.
            self.samples_frames = self.allocate(np.asarray(observation)[0], T + n_frames - 1)
            self.samples_new_frames = self.samples_frames[n_frames - 1 :]
        self.samples = self.allocate(stored, T)
        if n_step_return > 1:
            self.samples_return_ = self.allocate(np.float32(0), T)
            self.samples_done_n = self.allocate(False, T)
            if time_limit:
                self.samples_timeout_n = self.allocate(False, T)
        else:
            self.samples_return_ = self.samples.reward
            self.samples_done_n = self.samples.done
            if time_limit:
                self.samples_timeout_n = self.samples.timeout
        self._cursor = np_mp_array(2, np.int64) if shared_memory else np.zeros(2, np.int64)

    def check_memory(self, stored: Any, observation: Any) -> None:
        """Refuse (MemoryError, naming ``size``) storage the available memory (of the
        device, with ``device``) cannot hold."""
        step = sum(np.asarray(a).nbytes for a in flatten_arrays("", stored).values())
        if self.frame_based:
            step += np.asarray(observation)[0].nbytes
        if self.n_step_return > 1:
            step += 4 + 1 + int(self.time_limit)  # n-step return, done (and timeout)
        free = None if self.device is None else _device.free_bytes(self.device)
        if free is not None and self.size * step > free:
            raise MemoryError(
                f"size={self.size} needs {self.size * step:,} bytes on {self.device}, which has "
                f"{free:,} free: size <= {free // step} would fit"
            )
        hint = ""
        if not self.frame_based and getattr(observation, "ndim", 0) >= 3:
            hint = "stacked frames stored once (frame_based=True; DQN's frame_buffer) take less"
        if self.device is None or self.device.type == "cpu":
            check_memory("size", self.size, step, hint)

    def allocate(self, example: Any, T: int) -> Any:
        """Zeroed ``[T, B]`` arrays shaped like ``example``'s, where this storage keeps them."""
        if self.device is not None:
            return _device.allocate(example, T, self.B, self.device)
        return buffer_from_example(example, (T, self.B), share_memory=self.shared_memory)

    # ---------------------------------------------------------------------------- cursor

    @property
    def t(self) -> int:
        """The next time slot to be written."""
        return int(self._cursor[0])

    @property
    def t_total(self) -> int:
        """Time steps written since the storage was made."""
        return int(self._cursor[1])

    @property
    def full(self) -> bool:
        """Every slot written at least once: the oldest slot is the cursor's."""
        return self.t_total >= self.T

    def advance(self, T_new: int) -> None:
        """Move the cursor past ``T_new`` steps just written."""
        self._cursor[:] = ((self.t + T_new) % self.T, self.t_total + T_new)

    # ---------------------------------------------------------------------------- writing

    def write(self, idxs: np.ndarray | slice, steps: Any, T_new: int) -> None:
        """``T_new`` steps (shaped like ``stored``) into slots ``idxs``, at the cursor."""
        if self.frame_based:
            self._write_frames(idxs, steps.observation, steps.done, T_new)
            steps = steps._replace(observation=None)
        if self.device is not None:
            _device.write(flatten_arrays("", self.samples), idxs, flatten_arrays("", steps))
            return
        self.samples[idxs] = steps

    def _write_frames(
        self, idxs: np.ndarray | slice, observation: np.ndarray, done: np.ndarray, T_new: int
    ) -> None:
        nf = self.n_frames
        if self.t_total == 0:  # the first observation's history fills the prefix
            check_frame_stacks(observation, done)
            self.samples_frames[: nf - 1] = np.moveaxis(observation[0, :, :-1], 0, 1)
        self.samples_new_frames[idxs] = observation[:, :, -1]
        if self.t + T_new > self.T - (nf - 1):
            self.samples_frames[: nf - 1] = self.samples_frames[self.T :]

    def write_returns(self, T_new: int, discount: float) -> None:
        """n-step returns for the slots the ``T_new`` rewards just written complete.

        Called after writing, before the cursor moves.  Slots before the first write get
        values too, harmlessly: they are invalid until written, and recomputed then.
        """
        n, t = self.n_step_return, self.t
        if n == 1:
            return
        if self.device is None:
            window: Any = np.arange(t - (n - 1), t + T_new) % self.T
            reward, done = self.samples.reward[window], self.samples.done[window]
            returns: tuple[Any, Any] = discount_return_n_step(reward, done, n, discount)
        else:  # (in torch where the storage is: the same values as on the host)
            torch = _device.torch_module()
            window = torch.arange(t - (n - 1), t + T_new, device=self.device) % self.T
            reward, done = self.samples.reward[window], self.samples.done[window]
            return_, done_n = discount_return_n_step_tensor(reward, done, n, discount, T_new)
            returns = (return_.float(), done_n)
        dest = window[:T_new]
        self.samples_return_[dest], self.samples_done_n[dest] = returns
        if self.time_limit:
            timeout = self.samples.timeout[window]
            self.samples_timeout_n[dest] = timeout_n_step(timeout, done, n, T_new)

    # ---------------------------------------------------------------------------- reading

    def frames(self, times: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """The stored frames of (unwrapped) ``times`` >= -(n_frames - 1), environments
        ``B_idxs`` (broadcast together), gathered in one pass."""
        rows = np.where(times >= self.T, times - self.T, times) + (self.n_frames - 1)
        flat = self.samples_frames.reshape(-1, *self.samples_frames.shape[2:])
        frames = take_rows(flat, (rows * self.B + B_idxs).ravel())
        return frames.reshape(*rows.shape, *frames.shape[1:])

    def zero_before_resets(
        self, observation: np.ndarray, T_idxs: np.ndarray, B_idxs: np.ndarray
    ) -> None:
        """Zero, in place, the frames of observations at ``T_idxs`` that come from before an
        environment reset (frame k predates a reset after step t-f when k < n_frames - f)."""
        nf = self.n_frames
        if nf == 1:
            return
        back = (T_idxs[..., None] - np.arange(1, nf)) % self.T  # t-1, t-2, ... t-(nf-1)
        reset = np.logical_or.accumulate(self.samples.done[back, B_idxs[..., None]], axis=-1)
        if reset.any():
            mask = np.zeros((*reset.shape[:-1], nf), bool)
            mask[..., :-1] = reset[..., ::-1]
            observation[mask] = 0

    def observation_at(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Observations at index arrays of any (matching) shape; frame buffers rebuild
        them OLDEST to NEWEST, zeroing frames from before an environment reset."""
        if not self.frame_based:
            return self.samples.observation[T_idxs, B_idxs]
        times = T_idxs[..., None] + np.arange(1 - self.n_frames, 1)
        observation = self.frames(times, B_idxs[..., None])
        self.zero_before_resets(observation, T_idxs, B_idxs)
        return observation

    def agent_inputs(self, T_idxs: np.ndarray, B_idxs: np.ndarray, observation: np.ndarray) -> Any:
        """Inputs as the agent saw them: the previous action and reward are zero at an
        episode's first step."""
        prev = (T_idxs - 1) % self.T
        prev_action = self.samples.action[prev, B_idxs]
        prev_reward = self.samples.reward[prev, B_idxs]
        started = self.samples.done[prev, B_idxs]
        if started.any():  # (fancy indexing made copies)
            prev_action[started] = 0
            prev_reward[started] = 0
        return AgentInputs(observation, prev_action, prev_reward)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every array of the state (the cursor's included), keyed as saved."""
        arrays = {"cursor": self._cursor, **flatten_arrays("samples", self.samples)}
        if self.n_step_return > 1:
            arrays["return_"] = self.samples_return_
            arrays["done_n"] = self.samples_done_n
            if self.time_limit:
                arrays["timeout_n"] = self.samples_timeout_n
        if self.frame_based:
            arrays["frames"] = self.samples_frames
        return arrays
