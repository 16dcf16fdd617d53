"""Replay priorities held on a torch device (``ReplayBuffer(device=..., tree_on_device=True)``).

Sampling and priority updates then run where the batch is used: a prioritized batch needs
no index or weight copy to the device and no read of its new priorities on the host. Which
rows turn valid or invalid as the cursor moves stays the host tree's logic (it never reads a
priority); only the priorities move.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from rl_arrays import as_count

from . import _device
from ._sum_tree import SumTree

__all__ = ["DeviceSumTree"]


class DeviceSumTree(SumTree):
    """A :class:`SumTree` whose priorities are a float64 tensor on ``device``.

    Arguments, node layout and validity rules are the host tree's (``shared_memory`` is
    refused). Writes go to the leaves alone, and a draw inverts their running sum (one
    ``cumsum`` and one binary search for the whole batch): about ten operations per batch
    and per update whatever the size, where a walk down the tree takes about ten per level.
    On a GPU each is a kernel launch. The inner nodes are summed when the state is read
    (``state_dict``, ``total``, ``print_tree``, :meth:`sum_levels`).

    ``sample`` returns tensors on the device; ``update_batch_priorities`` takes them (or
    arrays). Each draw seeds the device's generator from ``rng``, so ``rng``'s state decides
    the samples, as on the host. Not checked, since that would read the device: that new
    priorities are finite and >= 0, and that not all of them are 0 (buffers check that valid
    rows exist). ``unique`` sampling stays on the host tree.
    """

    def __init__(self, *args: Any, device: Any, **kwargs: Any):
        if kwargs.get("shared_memory"):
            raise ValueError("a DeviceSumTree cannot be on shared memory (shared_memory=True)")
        self.device = _device.as_device(device)  # (before the nodes are allocated)
        super().__init__(*args, **kwargs)
        torch = _device.torch_module()
        try:
            self._generator: Any = torch.Generator(self.device)
        except RuntimeError:  # (a device without one of its own, e.g. meta: torch's default)
            self._generator = None
        # Scratch for update_batch_priorities: which sample last wrote each leaf.
        self._last_writer = torch.zeros(self.size, dtype=torch.int64, device=self.device)

    def _allocate_nodes(self) -> Any:
        torch = _device.torch_module()
        return torch.zeros(2 * self.n_leaves, dtype=torch.float64, device=self.device)

    def _make_views(self) -> None:
        self._nodes = self.tree
        self._pairs = self.tree.view(self.n_leaves, 2)
        self._leaves = self.tree[self.n_leaves : self.n_leaves + self.size]
        self._inputs = self.input_priorities
        self._sampled_leaves = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        del state["_leaves"]
        return state

    def _write_leaves(self, lo: int, hi: int, values: float | np.ndarray) -> None:
        if isinstance(values, np.ndarray):
            self._nodes[lo:hi] = _device.as_tensor(values, self.device)
        else:
            self._nodes[lo:hi] = values

    def _propagate_range(self, lo: int, hi: int) -> None:
        """Nothing: the inner nodes are summed when read (:meth:`sum_levels`)."""

    def sum_levels(self) -> None:
        """Recompute every inner node from the leaves, a level at a time."""
        level = self.n_leaves // 2
        while level >= 1:
            self._nodes[level : 2 * level] = self._pairs[level : 2 * level].sum(1)
            level //= 2

    @property
    def total(self) -> float:
        return float(self._leaves.sum())

    def leaf_priorities(self) -> Any:
        """``[T, B]`` view of the leaf priorities (a tensor: do not write to it)."""
        return self._leaves.view(self.T, self.B)

    def print_tree(self, level: int | None = None) -> None:
        self.sum_levels()
        super().print_tree(level)

    def state_dict(self) -> dict[str, Any]:
        self.sum_levels()
        return super().state_dict()

    def update_batch_priorities(self, priorities: npt.ArrayLike) -> None:
        """Set the leaves of the last :meth:`sample` to ``priorities`` (as given); where a
        leaf was sampled more than once, its last priority is kept, as on the host."""
        leaves = self._sampled_leaves
        if leaves is None:
            raise RuntimeError("update_batch_priorities() called before any sample()")
        torch = _device.torch_module()
        values = torch.as_tensor(priorities, dtype=torch.float64, device=self.device)
        if values.shape != leaves.shape:
            raise ValueError(
                f"priorities must have shape {tuple(leaves.shape)} (one per sample of the last "
                f"sample() call), got {tuple(values.shape)}"
            )
        # Every sample of a leaf writes the value of that leaf's last sample, so the order
        # of writes to a repeated index (undefined on a GPU) does not matter.
        order = torch.arange(len(leaves), device=self.device)
        self._last_writer.scatter_reduce_(0, leaves, order, "amax", include_self=False)
        self._leaves[leaves] = values[self._last_writer[leaves]]

    def sample(self, n: int, unique: bool = False) -> tuple[Any, Any, Any]:
        """``(T_idxs, B_idxs, priorities)`` of ``n`` slots drawn by priority: tensors on the
        device. The slots are remembered for :meth:`update_batch_priorities`."""
        n = as_count("n", n, 1, expected="a positive integer")
        if unique:
            raise ValueError(
                "unique sampling needs the host tree (a DeviceSumTree draws with replacement)"
            )
        torch = _device.torch_module()
        if self._generator is not None:
            self._generator.manual_seed(int(self.rng.integers(2**63)))
        values = torch.rand(n, generator=self._generator, dtype=torch.float64, device=self.device)
        leaves = self._invert_cumsum(values)
        self._sampled_leaves = leaves
        return leaves // self.B, leaves % self.B, self._leaves[leaves]

    def _invert_cumsum(self, fractions: Any) -> Any:
        """The leaves where the running sum of priorities first exceeds each of
        ``fractions`` (in [0, 1)) of the total: a leaf of priority 0 adds nothing to the
        sum, so it is never the one where the sum exceeds a value."""
        torch = _device.torch_module()
        running = self._leaves.cumsum(0)
        total = running[-1]
        # Rounding of fraction * total could reach total itself; stay strictly below it.
        values = torch.minimum(fractions * total, torch.nextafter(total, torch.zeros_like(total)))
        # (clamped: were every priority 0, no leaf would be found; a GPU must not index past)
        return torch.searchsorted(running, values, right=True).clamp_(max=self.size - 1)
