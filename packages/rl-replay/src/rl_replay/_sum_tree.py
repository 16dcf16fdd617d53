"""Sum trees of replay priorities over a ``[T, B]`` matrix of buffer slots.

One float64 array holds every node (the arithmetic on it: ``_sum_nodes``). The tree mirrors
a replay buffer's time cursor and keeps exactly the slots whose history and n-step future
are written and not overwritten sampleable. Layout and validity rules: the package README,
"SumTree".
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rl_arrays import np_mp_array

from . import _device
from ._sum_nodes import descend, propagate_nodes, propagate_range, sample_unique, uniforms

__all__ = ["AsyncSumTree", "SumTree"]


def _int_at_least(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, (float, np.floating)) and value.is_integer():
        value = int(value)  # 1e3, as rlpyt writes counts
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got a bool ({value!r})")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _ring_ranges(start: int, stop: int, T: int) -> list[tuple[int, int]]:
    """Absolute rows ``[start, stop)`` (at most ``T`` of them) as row ranges of a ring of ``T``."""
    n = stop - start
    if n <= 0:
        return []
    lo = start % T
    if lo + n <= T:
        return [(lo, lo + n)]
    return [(lo, T), (0, lo + n - T)]


def _as_priorities(name: str, values: npt.ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    try:
        array = np.broadcast_to(array, shape)
    except ValueError:
        raise ValueError(
            f"{name} must be a scalar or broadcast to shape {shape}, got shape {array.shape}"
        ) from None
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError(f"{name} must be finite and >= 0, got {array}")
    return array


class SumTree:
    """Priorities of ``T * B`` replay slots ``[T, B]`` in a binary sum tree.

    ``T``: time rows (the buffer's ``T``, or its stored rnn states for sequence replay);
    ``B``: columns (environments), all covered by every advance. ``off_backward`` rows before
    the cursor (n-step future unwritten) and ``off_forward`` rows from it (history
    overwritten) stay invalid. New rows get ``default_value``, or with
    ``enable_input_priorities`` the priorities given to ``advance``, shifted back by
    ``input_priority_shift`` rows (at most ``off_backward``). ``rng``: a generator or a seed.
    ``shared_memory``: arrays on OS shared memory, writes serialised by the caller (None: the
    class attribute, True in ``AsyncSumTree``). Details: the package README, "SumTree".
    """

    shared_memory: bool = False

    def __init__(
        self,
        T: int,
        B: int,
        off_backward: int,
        off_forward: int,
        default_value: float = 1.0,
        enable_input_priorities: bool = False,
        input_priority_shift: int = 0,
        rng: np.random.Generator | int | None = None,
        *,
        shared_memory: bool | None = None,
    ):
        default = type(self).shared_memory
        self.shared_memory = default if shared_memory is None else bool(shared_memory)
        self.T = _int_at_least("T", T, 1)
        self.B = _int_at_least("B", B, 1)
        self.off_backward = _int_at_least("off_backward", off_backward, 0)
        self.off_forward = _int_at_least("off_forward", off_forward, 0)
        if self.off_backward + self.off_forward >= self.T:
            raise ValueError(
                f"off_backward + off_forward must be < T so that some rows can be valid, got "
                f"off_backward={self.off_backward}, off_forward={self.off_forward}, T={self.T}"
            )
        default_value = float(default_value)
        if not (np.isfinite(default_value) and default_value > 0):
            raise ValueError(f"default_value must be finite and > 0, got {default_value}")
        self.default_value = default_value
        self.enable_input_priorities = bool(enable_input_priorities)
        self.input_priority_shift = _int_at_least("input_priority_shift", input_priority_shift, 0)
        if self.input_priority_shift > self.off_backward:
            raise ValueError(
                f"input_priority_shift ({self.input_priority_shift}) must be <= off_backward "
                f"({self.off_backward}): otherwise a row would turn valid before its input "
                "priority has been given"
            )
        if isinstance(rng, np.random.Generator):
            self.rng = rng
        elif rng is None or isinstance(rng, (int, np.integer, np.random.SeedSequence)):
            self.rng = np.random.default_rng(rng)
        else:
            raise TypeError(
                f"rng must be a numpy.random.Generator, a seed or None, got {type(rng).__name__}"
            )

        self.size = self.T * self.B
        self.n_leaves = 1 << (self.size - 1).bit_length()
        self.depth = self.n_leaves.bit_length() - 1
        self.tree = self._allocate_nodes()
        self._cursor = self._allocate(2, np.int64)  # [t, t_total]
        self.input_priorities = (
            self._allocate((self.T, self.B), np.float64) if self.enable_input_priorities else None
        )
        self._make_views()

    # --- storage -------------------------------------------------------------------------

    def _allocate(self, shape: int | tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        return np_mp_array(shape, dtype) if self.shared_memory else np.zeros(shape, dtype)

    def _allocate_nodes(self) -> Any:
        """Every node of the tree, zeroed: index 1 is the root, leaves start at n_leaves."""
        return self._allocate(2 * self.n_leaves, np.float64)

    def _make_views(self) -> None:
        # Plain ndarray views for the arithmetic (the stored arrays may be a subclass).
        self._nodes = self.tree.view(np.ndarray)
        self._pairs = self._nodes.reshape(self.n_leaves, 2)  # row i = children of node i
        self._inputs = (
            None if self.input_priorities is None else self.input_priorities.view(np.ndarray)
        )
        self._sampled_leaves: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for derived in ("_nodes", "_pairs", "_inputs", "_sampled_leaves"):
            del state[derived]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._make_views()

    # --- read-only views -----------------------------------------------------------------

    @property
    def t(self) -> int:
        """The cursor: next time row to be written."""
        return int(self._cursor[0])

    @property
    def t_total(self) -> int:
        """Time rows advanced in all, since construction."""
        return int(self._cursor[1])

    @property
    def total(self) -> float:
        """Sum of all priorities (the root)."""
        return float(self._nodes[1])

    def leaf_priorities(self) -> np.ndarray:
        """Read-only ``[T, B]`` view of the leaf priorities."""
        leaves = self._nodes[self.n_leaves : self.n_leaves + self.size].reshape(self.T, self.B)
        leaves.flags.writeable = False
        return leaves

    def print_tree(self, level: int | None = None) -> None:
        """Print the node values of every level, or only of ``level`` (0 is the root)."""
        levels: Sequence[int]
        if level is None:
            levels = range(self.depth + 1)
        else:
            levels = [_int_at_least("level", level, 0)]
            if levels[0] > self.depth:
                raise ValueError(f"level must be <= {self.depth} (the leaf level), got {level}")
        for d in levels:
            print(f"level {d}: {self._nodes[1 << d : 2 << d]}")

    # --- writing -------------------------------------------------------------------------

    def advance(self, T: int, priorities: npt.ArrayLike | None = None) -> None:
        """Account for ``T`` new rows just written at ``[t, t + T)`` (all ``B`` columns).

        Rows whose n-step future is now complete turn valid (their input priority, or
        ``default_value``); rows near the new cursor turn invalid (priority 0).  Optional
        ``priorities`` (scalar, ``[B]`` or ``[T, B]``) need ``enable_input_priorities``.
        """
        n_new = _int_at_least("T", T, 0)
        if priorities is not None and not self.enable_input_priorities:
            raise ValueError(
                "priorities were given to advance() but the tree was built with "
                "enable_input_priorities=False"
            )
        limit = self.T - self.off_backward - self.off_forward
        if n_new > limit:
            raise ValueError(
                f"advance(T={n_new}) exceeds T_tree - off_backward - off_forward = {limit}: the "
                "rows turned valid and the rows invalid around the new cursor would overlap "
                "in the ring"
            )
        if n_new == 0:
            return
        if self._inputs is not None:
            if priorities is None:
                values = np.float64(self.default_value)
            else:
                values = _as_priorities("priorities", priorities, (n_new, self.B))
            t = int(self._cursor[0])
            rows = (np.arange(t, t + n_new) - self.input_priority_shift) % self.T
            self._inputs[rows] = values

        t_total = int(self._cursor[1])
        B, first_leaf = self.B, self.n_leaves
        changed = []
        on_start = max(t_total - self.off_backward, self.off_forward)
        for lo, hi in _ring_ranges(on_start, t_total + n_new - self.off_backward, self.T):
            new = self.default_value if self._inputs is None else self._inputs[lo:hi].ravel()
            self._write_leaves(first_leaf + lo * B, first_leaf + hi * B, new)
            changed.append((lo, hi))
        new_total = t_total + n_new
        for lo, hi in _ring_ranges(
            new_total - self.off_backward, new_total + self.off_forward, self.T
        ):
            self._write_leaves(first_leaf + lo * B, first_leaf + hi * B, 0.0)
            changed.append((lo, hi))
        for lo, hi in changed:
            self._propagate_range(first_leaf + lo * B, first_leaf + hi * B)
        self._cursor[0] = new_total % self.T
        self._cursor[1] = new_total

    def _write_leaves(self, lo: int, hi: int, values: float | np.ndarray) -> None:
        """Nodes ``[lo, hi)`` of the leaf level set to ``values`` (a number or host array)."""
        self._nodes[lo:hi] = values

    def _propagate_range(self, lo: int, hi: int) -> None:
        """Recompute the ancestors of the contiguous nodes ``[lo, hi)`` of the leaf level."""
        propagate_range(self._nodes, lo, hi)

    def update_batch_priorities(self, priorities: npt.ArrayLike) -> None:
        """Set the leaves returned by the last :meth:`sample` to ``priorities`` (as given).

        Where a leaf was sampled more than once, its last priority is kept.
        """
        leaves = self._sampled_leaves
        if leaves is None:
            raise RuntimeError("update_batch_priorities() called before any sample()")
        values = np.asarray(priorities, dtype=np.float64)
        if values.shape != leaves.shape:
            raise ValueError(
                f"priorities must have shape {leaves.shape} (one per sample of the last "
                f"sample() call), got {values.shape}"
            )
        if not np.isfinite(values).all() or (values < 0).any():
            raise ValueError(f"priorities must be finite and >= 0, got {values}")
        # Keep the last occurrence of each leaf: first occurrence in the reversed order.
        unique_leaves, first = np.unique(leaves[::-1], return_index=True)
        leaf_nodes = unique_leaves + self.n_leaves
        self._nodes[leaf_nodes] = values[::-1][first]
        propagate_nodes(self._nodes, self._pairs, leaf_nodes)

    # --- sampling ------------------------------------------------------------------------

    def sample(self, n: int, unique: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw ``n`` slots with probability proportional to priority.

        With ``unique=True`` the slots are distinct (successive draws without replacement,
        each proportional to the priorities not drawn yet); the tree is not written to.

        Returns:
            ``(T_idxs, B_idxs, priorities)``: int64 row and column indexes and the priorities
            of the drawn slots.  The slots are remembered for :meth:`update_batch_priorities`.
        """
        n = _int_at_least("n", n, 1)
        total = self._nodes[1]
        if not total > 0:
            raise ValueError(
                "no valid samples yet: every priority is 0 (advance the tree past "
                "off_backward + off_forward rows first)"
            )
        if unique:
            if n > self.size:
                raise ValueError(f"cannot draw {n} unique samples from a tree of {self.size} slots")
            leaves = sample_unique(self._pairs, self.rng, n, total)
        else:
            leaves = self._descend(uniforms(self.rng, n, total))
        self._sampled_leaves = leaves
        return leaves // self.B, leaves % self.B, self._nodes[leaves + self.n_leaves]

    def _descend(self, values: np.ndarray) -> np.ndarray:
        """Leaves (0-based) where the cumulative priority reaches each of ``values``."""
        return descend(self._pairs, values)

    # --- checkpoints ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: tree, cursor, input priorities, rng state, config."""
        state: dict[str, Any] = {
            "T": self.T,
            "B": self.B,
            "off_backward": self.off_backward,
            "off_forward": self.off_forward,
            "default_value": self.default_value,
            "enable_input_priorities": self.enable_input_priorities,
            "input_priority_shift": self.input_priority_shift,
            "tree": _device.host_array(self._nodes),
            "cursor": np.array(self._cursor.view(np.ndarray)),
            "rng_state": self.rng.bit_generator.state,
        }
        if self._inputs is not None:
            state["input_priorities"] = np.array(self._inputs)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a tree built with the same arguments (in place)."""
        config = (
            "T",
            "B",
            "off_backward",
            "off_forward",
            "default_value",
            "enable_input_priorities",
            "input_priority_shift",
        )
        for key in config:
            if key not in state or state[key] != getattr(self, key):
                raise ValueError(
                    f"state_dict has {key}={state.get(key, '<missing>')!r} but this tree has "
                    f"{key}={getattr(self, key)!r}"
                )
        arrays = {
            "tree": (np.float64, self._nodes.shape),
            "cursor": (np.int64, (2,)),
        }
        if self._inputs is not None:
            arrays["input_priorities"] = (np.float64, self._inputs.shape)
        loaded = {}
        for key, (dtype, shape) in arrays.items():
            loaded[key] = np.asarray(state[key], dtype=dtype)
            if loaded[key].shape != shape:
                raise ValueError(
                    f"state_dict[{key!r}] has shape {loaded[key].shape}, expected {shape}"
                )
        self.rng.bit_generator.state = state["rng_state"]
        _device.load_into(self._nodes, loaded["tree"])
        self._cursor[...] = loaded["cursor"]
        if self._inputs is not None:
            self._inputs[...] = loaded["input_priorities"]
        self._sampled_leaves = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(T={self.T}, B={self.B}, off_backward={self.off_backward}, "
            f"off_forward={self.off_forward}, t={self.t}, total={self.total:.6g})"
        )


class AsyncSumTree(SumTree):
    """rlpyt's name for a :class:`SumTree` on shared memory (``shared_memory=True``)."""

    shared_memory = True
