"""What every replay buffer shares: ``[T, B]`` storage, a wrapping cursor, n-step returns,
and the options (prioritized sampling, frame-wise storage, time limits, shared memory) that
the transition and sequence buffers both take; saving / restoring the whole state.

Which time slots may be replayed is decided by two offsets around the cursor:
``off_backward`` newest slots are invalid (their n-step future, or the rest of their
sequence, is not written yet) and ``off_forward`` oldest slots are invalid (their previous
action, or their frame history, was just overwritten).  Before the buffer first wraps, the
first ``off_forward`` slots are invalid too.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
from typing import Any

import numpy as np
import numpy.typing as npt

from rl_arrays import (
    AgentInputs,
    as_count,
    buffer_from_example,
    check_memory,
    np_mp_array,
    numpify_buffer,
)

from . import _device
from ._n_step import discount_return_n_step
from ._prioritized import Prioritizer
from ._rw_lock import RWLock

__all__ = ["BaseNStepReturnBuffer", "BaseReplayBuffer", "flatten_arrays"]


def _take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]``.  When the program has loaded torch, its multi-threaded gather does
    it (about twice as fast on two cores for image frames); numpy otherwise."""
    torch = sys.modules.get("torch")
    if torch is None or array.dtype == np.bool_:
        return np.take(array, rows, axis=0)
    return torch.from_numpy(array).index_select(0, torch.from_numpy(rows)).numpy()


REQUIRED_FIELDS = ("observation", "action", "reward", "done")


class BaseReplayBuffer:
    """The interface of every replay buffer."""

    def append_samples(self, samples: Any) -> None:
        """Add new ``[T, B]`` data, possibly ejecting the oldest."""
        raise NotImplementedError

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """A batch of stored data for training."""
        raise NotImplementedError


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


def _check_frame_stacks(observation: np.ndarray, done: np.ndarray) -> None:
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


class BaseNStepReturnBuffer(BaseReplayBuffer):
    """``[T, B]`` storage with a wrapping time cursor, computing n-step returns on write.

    ``example`` is one step of the data with no leading dims (a namedtuple with at least
    observation, action, reward and done); ``size`` is rounded up to a multiple of ``B``.
    ``return_`` and ``done_n`` for a sample are stored at the sample's own index.
    Options (keyword-only; None takes the class attribute of that name, which the rlpyt-named
    classes set): ``prioritized`` (with ``alpha`` 0.6, ``beta`` 0.4, ``default_priority`` 1,
    ``unique``, ``input_priorities``, ``input_priority_shift`` 0), ``frame_based``,
    ``time_limit``, ``shared_memory`` and ``device`` (None: numpy on the host; a torch
    device: tensors there, batches gathered there; ``tree_on_device`` puts the sum tree there
    too); the package README says what each does.
    ``seed`` seeds the buffer's own random generator, saved with its state.
    """

    prioritized: bool = False  # sample by priority (a sum tree)
    frame_based: bool = False  # store each frame once (observation [C, H, W])
    time_limit: bool = False  # carry timeout / timeout_n
    shared_memory: bool = False  # OS shared memory behind a RWLock (async runner)

    def __init__(
        self,
        example: Any,
        size: int,
        B: int,
        discount: float = 1.0,
        n_step_return: int = 1,
        *,
        prioritized: bool | None = None,
        frame_based: bool | None = None,
        time_limit: bool | None = None,
        shared_memory: bool | None = None,
        alpha: float | None = None,
        beta: float | None = None,
        default_priority: float | None = None,
        unique: bool | None = None,
        input_priorities: bool | None = None,
        input_priority_shift: int | None = None,
        tree_on_device: bool | None = None,
        seed: int | None = None,
        device: Any = None,
    ):
        cls = type(self)
        self.prioritized = cls.prioritized if prioritized is None else bool(prioritized)
        self.frame_based = cls.frame_based if frame_based is None else bool(frame_based)
        self.time_limit = cls.time_limit if time_limit is None else bool(time_limit)
        self.shared_memory = cls.shared_memory if shared_memory is None else bool(shared_memory)
        given: dict[str, Any] = dict(
            alpha=alpha,
            beta=beta,
            default_priority=default_priority,
            unique=unique,
            input_priorities=input_priorities,
            input_priority_shift=input_priority_shift,
            tree_on_device=tree_on_device,
        )
        priority_settings = {name: value for name, value in given.items() if value is not None}
        if priority_settings and not self.prioritized:
            raise ValueError(
                f"{', '.join(priority_settings)} only apply with prioritized=True "
                f"({cls.__name__} has prioritized=False)"
            )
        self.device = None if device is None else _device.as_device(device)
        if self.device is not None and (self.frame_based or self.shared_memory):
            option = "frame_based" if self.frame_based else "shared_memory"
            raise ValueError(
                f"device={device!r} cannot be combined with {option}=True: frame and "
                "shared-memory buffers stay numpy on the host (store whole observations, "
                "or use device=None)"
            )
        if priority_settings.pop("tree_on_device", False):
            if self.device is None:
                raise ValueError(
                    "tree_on_device=True needs device= (the storage's device, which the sum "
                    "tree joins)"
                )
            if priority_settings.get("unique"):
                raise ValueError("tree_on_device=True cannot draw unique samples (unique=True)")
            priority_settings["tree_device"] = self.device
        self._check_options()
        size, B, n_step_return = (  # 1e6 too, as rlpyt's scripts write replay_size
            as_count(name, value, 1, expected="a positive integer")
            for name, value in (("size", size), ("B", B), ("n_step_return", n_step_return))
        )
        if not 0 <= discount <= 1:
            raise ValueError(f"discount must be in [0, 1], got {discount}")
        fields = getattr(example, "_fields", None)
        required = REQUIRED_FIELDS + (("timeout",) if self.time_limit else ())
        if fields is None or any(f not in fields for f in required):
            raise ValueError(
                f"{cls.__name__} needs an example namedtuple with fields {required}, "
                f"got {example!r}"
            )
        self.example = example
        self.B = int(B)
        self.T = self._round_T(math.ceil(size / B))
        self.size = self.T * self.B
        self.discount = float(discount)
        self.n_step_return = int(n_step_return)
        self.n_frames = 1
        stored = self._stored_example(example)
        if self.frame_based:
            frame_shape = np.shape(example.observation)
            if len(frame_shape) < 2:
                raise ValueError(
                    f"a frame buffer needs observations [n_frames, ...], got shape {frame_shape}"
                )
            self.n_frames = frame_shape[0]
            stored = stored._replace(observation=None)
        self.off_forward = max(1, self.n_frames - 1)
        if self.off_forward + self.n_step_return >= self.T:
            raise ValueError(
                f"size {size} gives {self.T} time steps per environment, too few for "
                f"n_step_return={self.n_step_return} and {self.n_frames} frames"
            )
        self._check_memory(stored)
        if self.frame_based:
            # Frames of slot t's observation live at samples_frames[t : t + n_frames]; the
            # first n_frames - 1 rows repeat the last ones, so wrapped histories are contiguous.
            self.samples_frames = self._allocate(
                np.asarray(example.observation)[0], self.T + self.n_frames - 1
            )
            self.samples_new_frames = self.samples_frames[self.n_frames - 1 :]
        self.samples = self._allocate(stored, self.T)
        if self.n_step_return > 1:
            self.samples_return_ = self._allocate(np.float32(0), self.T)
            self.samples_done_n = self._allocate(False, self.T)
            if self.time_limit:
                self.samples_timeout_n = self._allocate(False, self.T)
        else:
            self.samples_return_ = self.samples.reward
            self.samples_done_n = self.samples.done
            if self.time_limit:
                self.samples_timeout_n = self.samples.timeout
        self._cursor = np_mp_array(2, np.int64) if self.shared_memory else np.zeros(2, np.int64)
        self.rng = np.random.default_rng(seed)
        # One writer or many readers across processes; None: one process, no locking.
        self.rw_lock = RWLock() if self.shared_memory else None
        self.priorities = None
        if self.prioritized:
            rows, off_backward, off_forward = self._priority_layout()
            self.priorities = Prioritizer(
                rows,
                self.B,
                off_backward,
                off_forward,
                rng=self.rng,
                shared_memory=self.shared_memory,
                **priority_settings,
            )

    def _check_options(self) -> None:
        """Refuse, before any work, option combinations that cannot work (see subclasses)."""

    def _priority_layout(self) -> tuple[int, int, int]:
        """The sum tree's rows (time slots, or stored rnn states), and its off_backward and
        off_forward rows."""
        return self.T, self.n_step_return, self.off_forward

    # ------------------------------------------------------------------------ allocation

    def _round_T(self, T: int) -> int:
        return T

    def _stored_example(self, example: Any) -> Any:
        """What ``self.samples`` holds for one step (sequence buffers drop rnn states)."""
        return example

    def _check_memory(self, stored: Any) -> None:
        """Refuse (MemoryError, naming ``size``) a buffer the available memory (of the
        device, with ``device``) cannot hold."""
        step = sum(np.asarray(a).nbytes for a in flatten_arrays("", stored).values())
        if self.frame_based:
            step += np.asarray(self.example.observation)[0].nbytes
        if self.n_step_return > 1:
            step += 4 + 1 + int(self.time_limit)  # n-step return, done (and timeout)
        free = None if self.device is None else _device.free_bytes(self.device)
        if free is not None and self.size * step > free:
            raise MemoryError(
                f"size={self.size} needs {self.size * step:,} bytes on {self.device}, which has "
                f"{free:,} free: size <= {free // step} would fit"
            )
        hint = ""
        if not self.frame_based and getattr(self.example.observation, "ndim", 0) >= 3:
            hint = "stacked frames stored once (frame_based=True; DQN's frame_buffer) take less"
        if self.device is None or self.device.type == "cpu":
            check_memory("size", self.size, step, hint)

    def _allocate(self, example: Any, T: int) -> Any:
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
        """Time steps written since the buffer was made."""
        return int(self._cursor[1])

    @property
    def _buffer_full(self) -> bool:
        return self.t_total >= self.T

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if self.rw_lock is None else self.rw_lock.write_lock()

    def _reading(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if self.rw_lock is None else self.rw_lock.read_lock()

    # ---------------------------------------------------------------------------- writing

    def _check_samples(self, samples: Any) -> int:
        """The new samples' T, after checking they match the example."""
        fields = getattr(samples, "_fields", None)
        if fields != self.example._fields:
            raise ValueError(
                f"samples must have the example's fields {self.example._fields}, got {fields}"
            )
        T_new = None
        for name, value in flatten_arrays("samples", samples).items():
            shape = np.shape(value)
            if len(shape) < 2 or shape[1] != self.B:
                raise ValueError(f"{name} must have leading dims [T, B={self.B}], got {shape}")
            if T_new is not None and shape[0] != T_new:
                raise ValueError(f"{name} has T={shape[0]}, other fields have T={T_new}")
            T_new = shape[0]
        if T_new is None or not 1 <= T_new <= self.T:
            raise ValueError(f"samples must hold 1 to {self.T} time steps, got {T_new}")
        if self.frame_based and np.shape(samples.observation)[2] != self.n_frames:
            raise ValueError(
                f"observations must hold {self.n_frames} frames, got "
                f"{np.shape(samples.observation)[2]}"
            )
        return T_new

    def append_samples(self, samples: Any) -> None:
        """Write ``[T, B]`` samples at the cursor (wrapping), compute the returns they
        complete, and advance the cursor."""
        priorities = None
        if getattr(samples, "_fields", None) == ("priorities", "samples"):
            priorities, samples = samples.priorities, samples.samples
        with self._writing():
            T_new = self._check_samples(samples)
            self._check_priorities(priorities)
            t = self.t
            idxs = np.arange(t, t + T_new) % self.T if t + T_new > self.T else slice(t, t + T_new)
            self._write(idxs, samples, T_new)
            self.compute_returns(T_new)
            self._advance_priorities(T_new, priorities)
            self._cursor[:] = ((t + T_new) % self.T, self.t_total + T_new)

    def _write(self, idxs: np.ndarray | slice, samples: Any, T_new: int) -> None:
        stored = self._stored_example(samples)
        if self.frame_based:
            stored = stored._replace(observation=None)
            if self.t_total == 0:  # the first observation's history fills the prefix
                _check_frame_stacks(samples.observation, samples.done)
                self.samples_frames[: self.n_frames - 1] = np.moveaxis(
                    samples.observation[0, :, :-1], 0, 1
                )
            self.samples_new_frames[idxs] = samples.observation[:, :, -1]
            if self.t + T_new > self.T - (self.n_frames - 1):
                self.samples_frames[: self.n_frames - 1] = self.samples_frames[self.T :]
        if self.device is not None:
            _device.write(flatten_arrays("", self.samples), idxs, flatten_arrays("", stored))
            return
        self.samples[idxs] = stored

    def _check_priorities(self, priorities: npt.ArrayLike | None) -> None:
        if priorities is None:
            return
        if self.priorities is None:
            raise ValueError(
                f"{type(self).__name__} takes no priorities (it has prioritized=False)"
            )
        if not self.priorities.input_priorities:
            raise ValueError("priorities came with the samples, but input_priorities=False")

    def _advance_priorities(self, T_rows: int, priorities: npt.ArrayLike | None) -> None:
        """Move the sum tree ``T_rows`` rows on, with the samples' input priorities."""
        if self.priorities is not None:
            self.priorities.advance(T_rows, priorities)

    def compute_returns(self, T_new: int) -> None:
        """n-step returns for the slots the ``T_new`` rewards just written complete.

        Called after writing, before the cursor moves.  Slots before the first write get
        values too, harmlessly: they are invalid until written, and recomputed then.
        """
        n = self.n_step_return
        if n == 1:
            return
        if self.device is not None:
            self._compute_returns_on_device(T_new)
            return
        t = self.t
        window = np.arange(t - (n - 1), t + T_new) % self.T
        reward, done = self.samples.reward[window], self.samples.done[window]
        dest = window[:T_new]
        self.samples_return_[dest], self.samples_done_n[dest] = discount_return_n_step(
            reward, done, n, self.discount
        )
        if self.time_limit:
            # Truncated within n steps: the first done in the window was a timeout.
            timeout = self.samples.timeout[window]
            timeout_n = timeout[:T_new].copy()
            done_before = done[:T_new].copy()
            for k in range(1, n):
                timeout_n |= timeout[k : k + T_new] & ~done_before
                done_before |= done[k : k + T_new]
            self.samples_timeout_n[dest] = timeout_n

    def _compute_returns_on_device(self, T_new: int) -> None:
        """``compute_returns`` in torch on the storage's device: the same operations in the
        same order, so the stored values equal the host buffer's."""
        import torch

        n, t = self.n_step_return, self.t
        window = torch.arange(t - (n - 1), t + T_new, device=self.device) % self.T
        reward, done = self.samples.reward[window], self.samples.done[window]
        dest = window[:T_new]
        return_ = reward[:T_new].to(torch.promote_types(reward.dtype, torch.float32), copy=True)
        done_n = done[:T_new].clone()
        for k in range(1, n):
            return_ += self.discount**k * reward[k : k + T_new] * ~done_n
            done_n |= done[k : k + T_new]
        self.samples_return_[dest], self.samples_done_n[dest] = return_.float(), done_n
        if self.time_limit:
            timeout = self.samples.timeout[window]
            timeout_n = timeout[:T_new].clone()
            done_before = done[:T_new].clone()
            for k in range(1, n):
                timeout_n |= timeout[k : k + T_new] & ~done_before
                done_before |= done[k : k + T_new]
            self.samples_timeout_n[dest] = timeout_n

    # --------------------------------------------------------------------------- sampling

    def _valid_count(self, off_backward: int) -> int:
        """How many start slots per environment are valid now."""
        written = min(self.t_total, self.T)
        return written - off_backward - self.off_forward

    def _start_slots(self, k: np.ndarray) -> np.ndarray:
        """The k-th valid start slot (0: the oldest valid one)."""
        oldest = self.t if self._buffer_full else 0
        return (oldest + self.off_forward + k) % self.T

    def _valid_starts(self, off_backward: int, interval: int = 1) -> tuple[int, np.ndarray | None]:
        """How many start slots per environment are valid, and (with an ``interval`` > 1)
        which: only multiples of it, the slots holding a stored rnn state."""
        count = max(self._valid_count(off_backward), 0)
        if interval == 1:
            return count, None
        starts = self._start_slots(np.arange(count))
        starts = starts[starts % interval == 0]
        return len(starts), starts

    def _check_batch_B(self, batch_B: int, n_valid: int, off_backward: int) -> int:
        batch_B = as_count("batch_B", batch_B, 1, expected="a positive integer")
        if n_valid == 0:
            raise ValueError(
                f"not enough data to sample yet: {self.t_total} steps written per environment, "
                f"a valid sample needs {off_backward + self.off_forward + 1}"
            )
        if batch_B > n_valid * self.B:
            raise ValueError(
                f"batch_B={batch_B} is larger than the {n_valid * self.B} valid samples"
            )
        return batch_B

    def _sample_starts(
        self, batch_B: int, off_backward: int, interval: int = 1, n_batches: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Uniformly random valid ``(T_idxs, B_idxs)`` (see ``_valid_starts``): ``n_batches``
        independent batches of ``batch_B``, one after the other."""
        n_valid, starts = self._valid_starts(off_backward, interval)
        batch_B = self._check_batch_B(batch_B, n_valid, off_backward)
        draws = self.rng.integers(n_valid * self.B, size=n_batches * batch_B)
        k, B_idxs = np.divmod(draws, self.B)
        T_idxs = self._start_slots(k) if starts is None else starts[k]
        return T_idxs, B_idxs

    def _sample_by_priority(
        self, batch_B: int, off_backward: int, interval: int = 1
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, B_idxs, is_weights)`` drawn by priority, after the checks of a uniform draw."""
        n_valid, _ = self._valid_starts(off_backward, interval)
        batch_B = self._check_batch_B(batch_B, n_valid, off_backward)
        return self._prioritizer().sample(batch_B)

    def _prioritizer(self) -> Prioritizer:
        if self.priorities is None:
            raise ValueError(f"{type(self).__name__} has prioritized=False: it keeps no priorities")
        return self.priorities

    def set_beta(self, beta: float) -> None:
        """Anneal the importance-sampling exponent (prioritized buffers)."""
        self._prioritizer().beta = float(beta)

    def update_batch_priorities(self, priorities: npt.ArrayLike) -> None:
        """New priorities for the last sampled batch, e.g. its absolute TD errors, as an
        array or a tensor on any device (prioritized buffers)."""
        prioritizer = self._prioritizer()
        if prioritizer.tree_device is None:
            priorities = numpify_buffer(priorities)
        with self._writing():
            prioritizer.update_batch_priorities(priorities)

    # ------------------------------------------------------------------------- extraction

    def _frames(self, times: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """The stored frames of (unwrapped) ``times`` >= -(n_frames - 1), environments
        ``B_idxs`` (broadcast together), gathered in one pass."""
        rows = np.where(times >= self.T, times - self.T, times) + (self.n_frames - 1)
        flat = self.samples_frames.reshape(-1, *self.samples_frames.shape[2:])
        frames = _take_rows(flat, (rows * self.B + B_idxs).ravel())
        return frames.reshape(*rows.shape, *frames.shape[1:])

    def _zero_before_resets(
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

    def _observation_at(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Observations at index arrays of any (matching) shape; frame buffers rebuild
        them OLDEST to NEWEST, zeroing frames from before an environment reset."""
        if not self.frame_based:
            return self.samples.observation[T_idxs, B_idxs]
        times = T_idxs[..., None] + np.arange(1 - self.n_frames, 1)
        observation = self._frames(times, B_idxs[..., None])
        self._zero_before_resets(observation, T_idxs, B_idxs)
        return observation

    def _agent_inputs(self, T_idxs: np.ndarray, B_idxs: np.ndarray, observation: np.ndarray) -> Any:
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

    # ---------------------------------------------------------------------- save / restore

    def _state_arrays(self) -> dict[str, np.ndarray]:
        arrays = {"cursor": self._cursor, **flatten_arrays("samples", self.samples)}
        if self.n_step_return > 1:
            arrays["return_"] = self.samples_return_
            arrays["done_n"] = self.samples_done_n
            if self.time_limit:
                arrays["timeout_n"] = self.samples_timeout_n
        if self.frame_based:
            arrays["frames"] = self.samples_frames
        if self.priorities is not None:
            arrays.update(self.priorities.state_arrays())
        return arrays

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of every array of the buffer's state, and its random generator's state."""
        with self._reading():
            state = {key: _device.host_array(a) for key, a in self._state_arrays().items()}
        state["rng"] = np.array(json.dumps(self.rng.bit_generator.state))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a ``state_dict`` into this buffer (same type, shapes and dtypes)."""
        with self._writing():
            arrays = self._state_arrays()
            missing = set(arrays) - set(state)
            if missing:
                raise ValueError(f"the saved state lacks {sorted(missing)}")
            for key, array in arrays.items():
                value = np.asarray(state[key])
                shape, dtype = tuple(array.shape), _device.numpy_dtype(array)
                if value.shape != shape or value.dtype != dtype:
                    raise ValueError(
                        f"saved {key} is {value.dtype}{value.shape}, this buffer holds "
                        f"{dtype}{shape}: was it made with the same arguments?"
                    )
                _device.load_into(array, value)
        self.rng.bit_generator.state = json.loads(str(state["rng"]))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the full state to ``path`` (an .npz file) atomically: a crash mid-write
        leaves any previous file intact; an OSError (a full disk) names ``path``."""
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".replay-", suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, allow_pickle=False, **self.state_dict())  # as load reads it
                f.flush()
                os.fsync(f.fileno())  # (on disk before it is renamed into place)
            os.replace(tmp, path)
        except BaseException as error:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(error, OSError) and error.filename is None:  # (a full disk, say)
                raise OSError(error.errno, f"{error.strerror} while writing {path}") from error
            raise

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore the state written by ``save``."""
        with np.load(path, allow_pickle=False) as data:
            self.load_state_dict({key: data[key] for key in data.files})

    def __repr__(self) -> str:
        options = ("prioritized", "frame_based", "time_limit", "shared_memory")
        on = "".join(f", {name}=True" for name in options if getattr(self, name))
        if self.device is not None:
            on += f", device={str(self.device)!r}"
        return (
            f"{type(self).__name__}(T={self.T}, B={self.B}, n_step_return={self.n_step_return}"
            f"{on}, t={self.t}, written={self.t_total})"
        )
