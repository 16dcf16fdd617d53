"""A sum tree held on a torch device (``ReplayBuffer(device=..., tree_on_device=True)``).

Sampling and priority updates then run where the batch is used: a prioritized batch needs
no index or weight copy to the device and no read of its new priorities on the host. Which
rows turn valid or invalid as the cursor moves stays the host tree's logic (it never reads a
priority); only the node array moves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import _device
from ._sum_tree import SumTree, _int_at_least

__all__ = ["DeviceSumTree"]


class DeviceSumTree(SumTree):
    """A :class:`SumTree` whose nodes are a float64 tensor on ``device``.

    Arguments and validity rules are the host tree's (``shared_memory`` is refused).
    ``sample`` returns tensors on the device and ``update_batch_priorities`` takes them (or
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
        self._last_writer = torch.zeros(self.n_leaves, dtype=torch.int64, device=self.device)

    def _allocate_nodes(self) -> Any:
        torch = _device.torch_module()
        return torch.zeros(2 * self.n_leaves, dtype=torch.float64, device=self.device)

    def _make_views(self) -> None:
        self._nodes = self.tree
        self._pairs = self.tree.view(self.n_leaves, 2)
        self._inputs = self.input_priorities
        self._sampled_leaves = None

    def _write_leaves(self, lo: int, hi: int, values: float | np.ndarray) -> None:
        if isinstance(values, np.ndarray):
            values = _device.as_tensor(values, self.device)  # type: ignore[assignment]
        self._nodes[lo:hi] = values

    def leaf_priorities(self) -> Any:
        """``[T, B]`` view of the leaf priorities (a tensor: do not write to it)."""
        return self._nodes[self.n_leaves : self.n_leaves + self.size].view(self.T, self.B)

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
        leaf_nodes = leaves + self.n_leaves
        self._nodes[leaf_nodes] = values[self._last_writer[leaves]]
        self._propagate_nodes(leaf_nodes)  # (repeats write equal sums)

    def sample(self, n: int, unique: bool = False) -> tuple[Any, Any, Any]:
        """``(T_idxs, B_idxs, priorities)`` of ``n`` slots drawn by priority: tensors on the
        device. The slots are remembered for :meth:`update_batch_priorities`."""
        n = _int_at_least("n", n, 1)
        if unique:
            raise ValueError(
                "unique sampling needs the host tree (a DeviceSumTree draws with replacement)"
            )
        torch = _device.torch_module()
        if self._generator is not None:
            self._generator.manual_seed(int(self.rng.integers(2**63)))
        total = self._nodes[1]
        values = torch.rand(
            n, generator=self._generator, dtype=torch.float64, device=self.device
        ).mul_(total)
        # Rounding of rand() * total could reach total itself; stay strictly below it.
        values = torch.minimum(values, torch.nextafter(total, torch.zeros_like(total)))
        leaves = self._descend(values)
        self._sampled_leaves = leaves
        return leaves // self.B, leaves % self.B, self._nodes[leaves + self.n_leaves]

    def _descend(self, values: Any, overlay: list | None = None) -> Any:
        """The host tree's walk (:meth:`SumTree._descend`) in torch, without overlays."""
        idx = _device.torch_module().ones_like(values, dtype=self._last_writer.dtype)
        for _ in range(self.depth):
            children = self._pairs[idx]
            left = children[:, 0]
            go_right = (values >= left) & (children[:, 1] > 0)
            values = values - left * go_right
            idx = 2 * idx + go_right
        return idx - self.n_leaves
