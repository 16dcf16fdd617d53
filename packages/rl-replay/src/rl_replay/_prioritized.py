"""Prioritized replay, shared by the single-step and sequence buffers: a sum tree over
the valid start slots, priorities raised to ``alpha``, importance weights with ``beta``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import _device
from ._device_tree import DeviceSumTree
from ._sum_tree import SumTree

__all__ = ["Prioritizer"]


class Prioritizer:
    """The priority tree of one buffer and the arithmetic around it.

    Stored priorities are ``priority ** alpha``; a sampled batch comes with importance
    weights ``priority ** -beta`` divided by their maximum (so the largest is 1). With a
    ``tree_device``, the tree is a ``DeviceSumTree`` there: batches are drawn and weighted
    there, and new priorities stay there.
    """

    def __init__(
        self,
        T: int,
        B: int,
        off_backward: int,
        off_forward: int,
        *,
        rng: np.random.Generator,
        shared_memory: bool,
        alpha: float = 0.6,
        beta: float = 0.4,
        default_priority: float = 1.0,
        unique: bool = False,
        input_priorities: bool = False,
        input_priority_shift: int = 0,
        tree_device: Any = None,
    ):
        if alpha < 0 or beta < 0:
            raise ValueError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
        if default_priority <= 0:
            raise ValueError(f"default_priority must be > 0, got {default_priority}")
        self.alpha, self.beta, self.unique = float(alpha), float(beta), bool(unique)
        self.input_priorities = bool(input_priorities)
        tree_args: dict[str, Any] = dict(
            default_value=default_priority**alpha,
            enable_input_priorities=input_priorities,
            input_priority_shift=input_priority_shift,
            rng=rng,
            shared_memory=shared_memory,
        )
        if tree_device is None:
            self.tree = SumTree(T, B, off_backward, off_forward, **tree_args)
        else:
            self.tree = DeviceSumTree(
                T, B, off_backward, off_forward, **tree_args, device=tree_device
            )
        self.tree_device = tree_device
        self._sampled: tuple[Any, Any] | None = None

    def advance(self, T: int, priorities: npt.ArrayLike | None) -> None:
        """Move the tree ``T`` rows on; ``priorities`` (None, or the samples' input ones:
        checked by the buffer) are raised to ``alpha``."""
        if priorities is not None:
            priorities = np.asarray(priorities, np.float64) ** self.alpha
        # The tree moves at most this far at once; a longer append goes in pieces.
        step = self.tree.T - self.tree.off_backward - self.tree.off_forward
        for start in range(0, T, step):
            stop = min(start + step, T)
            piece = priorities
            if priorities is not None and priorities.ndim == 2:
                piece = priorities[start:stop]
            self.tree.advance(stop - start, piece)

    def sample(self, n: int) -> tuple[Any, Any, Any]:
        """``(T_idxs, B_idxs, is_weights)`` of ``n`` slots drawn by priority (float32
        weights; arrays, or tensors on the tree's device)."""
        T_idxs, B_idxs, priorities = self.tree.sample(n, unique=self.unique)
        self._sampled = (T_idxs, B_idxs)
        weights = priorities**-self.beta
        weights = weights / weights.max()
        return (
            T_idxs,
            B_idxs,
            weights.float() if self.tree_device is not None else weights.astype(np.float32),
        )

    def update_batch_priorities(self, priorities: npt.ArrayLike) -> None:
        """New priorities for the last sampled batch (e.g. absolute TD errors).

        Slots turned off since they were sampled (overwritten, in async use) stay off.
        """
        if self._sampled is None:
            raise RuntimeError("update_batch_priorities needs a sample_batch first")
        if self.tree_device is not None:
            torch = _device.torch_module()
            new = torch.as_tensor(priorities, dtype=torch.float64, device=self.tree_device)
            where = torch.where
        else:
            new, where = np.asarray(priorities, np.float64), np.where
        new = new.reshape(-1) ** self.alpha
        if len(new) != len(self._sampled[0]):
            raise ValueError(f"got {len(new)} priorities for a batch of {len(self._sampled[0])}")
        still_valid = self.tree.leaf_priorities()[self._sampled] > 0
        self.tree.update_batch_priorities(where(still_valid, new, 0.0))

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The tree's arrays, for saving and restoring the buffer."""
        if isinstance(self.tree, DeviceSumTree):
            self.tree.sum_levels()
        arrays = {"tree.values": self.tree.tree, "tree.cursor": self.tree._cursor}
        if self.tree.input_priorities is not None:
            arrays["tree.input_priorities"] = self.tree.input_priorities
        return arrays
