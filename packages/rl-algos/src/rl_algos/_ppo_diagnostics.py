"""PPO's per-step diagnostics: what each gradient step of an ``optimize_agent`` call leaves
behind, turned into its rows of means at the end, on the device, for one read."""

from __future__ import annotations

from typing import Any, cast

import torch

from rl_arrays import buffer_func

from ._protocols import PgDistributionLike

__all__ = ["StepRecords"]


class StepRecords:
    """The gradient steps of one ``optimize_agent`` call: each step's loss, gradient norm
    and learning rate, and what its distribution diagnostics are computed from."""

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.grad_norms: list[torch.Tensor] = []
        self.learning_rates: list[float | torch.Tensor] = []
        self.steps: list[tuple[Any, torch.Tensor, Any, torch.Tensor]] = []

    def add(
        self,
        loss: torch.Tensor,
        grad_norm: torch.Tensor,
        learning_rate: float | torch.Tensor,
        dist_info: Any,
        ratio: torch.Tensor,
        minibatch: Any,
    ) -> None:
        """A step on ``minibatch`` (loss inputs), its new ``dist_info`` and ``ratio``; a
        learning rate on the device is copied (an adaptive one changes in place)."""
        if isinstance(learning_rate, torch.Tensor):
            learning_rate = learning_rate.clone()
        self.learning_rates.append(learning_rate)
        self.grad_norms.append(grad_norm)
        self.losses.append(loss)
        self.steps.append((dist_info, ratio, minibatch.old_dist_info, minibatch.valid))

    def table(
        self, dist: PgDistributionLike, ratio_clip: float, learning_rates: bool
    ) -> torch.Tensor:
        """``[6, steps]``: loss, gradient norm, entropy, perplexity, KL(old || new) and clip
        fraction of each step; with ``learning_rates`` (on the device) a 7th row of them."""
        rows = [
            torch.stack(self.losses)[None],
            torch.stack(self.grad_norms)[None],
            step_means(dist, self.steps, ratio_clip),
        ]
        if learning_rates:
            on_device = cast(list[torch.Tensor], self.learning_rates)
            rows.append(torch.stack(on_device).to(rows[0].dtype)[None])
        return torch.cat(rows)


@torch.no_grad()
def step_means(
    dist: PgDistributionLike,
    steps: list[tuple[Any, torch.Tensor, Any, torch.Tensor]],
    ratio_clip: float,
) -> torch.Tensor:
    """Mean entropy, perplexity, KL(old || new) and clip fraction (the share of likelihood
    ratios outside ``[1 - ratio_clip, 1 + ratio_clip]``) ``[4, steps]`` over the valid data
    of each gradient step (``steps``: its ``(dist_info, ratio, old_dist_info, valid)``), all
    computed at once after the steps rather than in a few dozen small operations each."""
    # valid has the minibatch's leading dims: [n] single steps, or [T, B_mb] sequences
    dist_info, ratio, old_dist_info, valid = (
        _cat([buffer_func(step[i], _flatten_lead, step[3].dim()) for step in steps])
        for i in range(4)
    )
    outside = ((ratio - 1.0).abs() > ratio_clip).to(ratio.dtype)
    values = torch.stack(
        [
            dist.entropy(dist_info),
            dist.perplexity(dist_info),
            dist.kl(old_dist_info, dist_info),
            outside,
        ]
    )
    # Built on the data's device: a copy from the host would wait for the device.
    step_of = torch.cat(
        [torch.full((step[3].numel(),), i, device=valid.device) for i, step in enumerate(steps)]
    )
    sums = values.new_zeros(4, len(steps)).index_add_(1, step_of, values * valid)
    counts = valid.new_zeros(len(steps)).index_add_(0, step_of, valid)
    return sums / counts


def _flatten_lead(x: torch.Tensor, lead: int) -> torch.Tensor:
    return x.reshape(-1, *x.shape[lead:])


def _cat(parts: list[Any]) -> Any:
    """Concatenate same-structured buffers (tensors or namedarraytuples of them) on dim 0."""
    first = parts[0]
    if first is None:
        return None
    if hasattr(first, "_make"):  # a namedarraytuple
        return first._make(_cat(list(leaves)) for leaves in zip(*parts, strict=True))
    return torch.cat(parts)
