"""What every replay buffer shares: the options (prioritized sampling, frame-wise storage,
time limits, shared memory, a device) that the transition and sequence buffers both take,
and their parts composed: the ``[T, B]`` storage with its cursor and n-step returns
(``RingStorage``), the valid start slots (``ValidStarts``) and the priorities
(``Prioritizer``); writing, saving and restoring the whole state.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any

import numpy as np
import numpy.typing as npt

from rl_arrays import as_count, numpify_buffer

from . import _device
from ._options import priority_settings, storage_device, with_tree_device
from ._prioritized import Prioritizer
from ._rw_lock import RWLock
from ._sampling import ValidStarts
from ._saving import load_arrays, save_npz
from ._storage import RingStorage, count_frames, flatten_arrays

__all__ = ["BaseNStepReturnBuffer", "BaseReplayBuffer"]


REQUIRED_FIELDS = ("observation", "action", "reward", "done")


class BaseReplayBuffer:
    """The interface of every replay buffer."""

    def append_samples(self, samples: Any) -> None:
        """Add new ``[T, B]`` data, possibly ejecting the oldest."""
        raise NotImplementedError

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """A batch of stored data for training."""
        raise NotImplementedError


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
        settings = priority_settings(
            cls.__name__,
            self.prioritized,
            alpha=alpha,
            beta=beta,
            default_priority=default_priority,
            unique=unique,
            input_priorities=input_priorities,
            input_priority_shift=input_priority_shift,
            tree_on_device=tree_on_device,
        )
        self.device = storage_device(device, self.frame_based, self.shared_memory)
        settings = with_tree_device(settings, self.device)
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
        self.n_frames = count_frames(example.observation) if self.frame_based else 1
        self.off_forward = max(1, self.n_frames - 1)
        if self.off_forward + self.n_step_return >= self.T:
            raise ValueError(
                f"size {size} gives {self.T} time steps per environment, too few for "
                f"n_step_return={self.n_step_return} and {self.n_frames} frames"
            )
        self.storage = RingStorage(
            self._stored_example(example),
            example.observation,
            self.T,
            self.B,
            frame_based=self.frame_based,
            n_frames=self.n_frames,
            n_step_return=self.n_step_return,
            time_limit=self.time_limit,
            device=self.device,
            shared_memory=self.shared_memory,
        )
        self.rng = np.random.default_rng(seed)
        # One writer or many readers across processes; None: one process, no locking.
        self.rw_lock = RWLock() if self.shared_memory else None
        self.starts = ValidStarts(self.storage, self.off_forward, self.rng)
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
                **settings,
            )

    def _check_options(self) -> None:
        """Refuse, before any work, option combinations that cannot work (see subclasses)."""

    def _priority_layout(self) -> tuple[int, int, int]:
        """The sum tree's rows (time slots, or stored rnn states), and its off_backward and
        off_forward rows."""
        return self.T, self.n_step_return, self.off_forward

    def _round_T(self, T: int) -> int:
        return T

    def _stored_example(self, example: Any) -> Any:
        """What ``self.samples`` holds for one step (sequence buffers drop rnn states)."""
        return example

    # -------------------------------------------------------- the storage's arrays, cursor

    @property
    def samples(self) -> Any:
        """The stored steps, ``[T, B]`` (observation None in a frame buffer)."""
        return self.storage.samples

    @property
    def samples_return_(self) -> Any:
        return self.storage.samples_return_

    @property
    def samples_done_n(self) -> Any:
        return self.storage.samples_done_n

    @property
    def samples_timeout_n(self) -> Any:
        return self.storage.samples_timeout_n

    @property
    def samples_frames(self) -> Any:
        """A frame buffer's frames, ``[T + n_frames - 1, B, ...]``."""
        return self.storage.samples_frames

    @property
    def samples_new_frames(self) -> Any:
        """A frame buffer's newest frame of each step: ``samples_frames[n_frames - 1:]``."""
        return self.storage.samples_new_frames

    @property
    def t(self) -> int:
        """The next time slot to be written."""
        return self.storage.t

    @property
    def t_total(self) -> int:
        """Time steps written since the buffer was made."""
        return self.storage.t_total

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
            self.storage.advance(T_new)

    def _write(self, idxs: np.ndarray | slice, samples: Any, T_new: int) -> None:
        self.storage.write(idxs, self._stored_example(samples), T_new)

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
        """n-step returns for the slots the ``T_new`` rewards just written complete
        (after writing, before the cursor moves)."""
        self.storage.write_returns(T_new, self.discount)

    # --------------------------------------------------------------------------- sampling

    def _valid_starts(self, off_backward: int, interval: int = 1) -> tuple[int, np.ndarray | None]:
        """How many start slots per environment are valid (and which, every ``interval``)."""
        return self.starts.valid(off_backward, interval)

    def _sample_by_priority(
        self, batch_B: int, off_backward: int, interval: int = 1
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, B_idxs, is_weights)`` drawn by priority, after the checks of a uniform draw."""
        batch_B = self.starts.checked_batch_B(batch_B, off_backward, interval)
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

    # ---------------------------------------------------------------------- save / restore

    def _state_arrays(self) -> dict[str, np.ndarray]:
        arrays = self.storage.state_arrays()
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
            load_arrays(self._state_arrays(), state)
        self.rng.bit_generator.state = json.loads(str(state["rng"]))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the full state to ``path`` (an .npz file) atomically: a crash mid-write
        leaves any previous file intact; an OSError (a full disk) names ``path``."""
        save_npz(path, self.state_dict())

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
