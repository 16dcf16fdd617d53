"""Reward scaling by the running spread of the discounted return, for policy gradients."""

from __future__ import annotations

from typing import Any

import torch


class ReturnScaler:
    """Divides rewards by the running standard deviation of each environment's discounted
    return, then clips them to ``[-clip, clip]``: the reward half of SB3's ``VecNormalize``,
    which rl-baselines3-zoo's MuJoCo PPO settings were tuned with. Value targets then stay
    near unit scale whatever the task's reward scale.

    Each batch ``[T, B]`` continues the ``B`` running returns (``r_t + discount * ret``,
    restarted after a done), folds all ``T * B`` of them into the statistics, and scales the
    batch by the updated deviation. Under torch.distributed every process must scale together:
    the statistics are pooled, so all keep identical values. The state (the running returns
    and the statistics) is tensors and numbers, for a checkpoint.
    """

    def __init__(self, discount: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.discount = discount
        self.clip = clip
        self.epsilon = epsilon
        self.running_return: torch.Tensor | None = None  # [B], made at the first batch
        # (mean, var, count) as float64 tensors where the rewards are: no host read per batch
        self.moments = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)

    @torch.no_grad()
    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        T, B = reward.shape
        ret = self.running_return
        if ret is None or ret.shape != (B,) or ret.device != reward.device:
            ret = torch.zeros(B, dtype=torch.float64, device=reward.device)
        returns = torch.empty((T, B), dtype=torch.float64, device=reward.device)
        not_done = 1.0 - done.to(torch.float64)
        for t in range(T):
            ret = ret * self.discount + reward[t]
            returns[t] = ret
            ret = ret * not_done[t]
        self.running_return = ret
        self._update(returns)
        scale = (self.moments[1] + self.epsilon).rsqrt().to(reward.dtype)
        return (reward * scale).clamp(-self.clip, self.clip)

    def _update(self, returns: torch.Tensor) -> None:
        """Fold ``returns`` into the mean and variance (Chan et al.'s parallel update)."""
        batch_mean, batch_var = returns.mean(), returns.var(unbiased=False)
        n = float(returns.numel())
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():  # equal counts on every process
            world_size = dist.get_world_size()
            pooled = batch_mean.clone()
            dist.all_reduce(pooled)
            pooled /= world_size
            spread = batch_var + (batch_mean - pooled) ** 2
            dist.all_reduce(spread)
            batch_mean, batch_var = pooled, spread / world_size
            n *= world_size
        moments = self.moments.to(returns.device)
        mean, var, count = moments.unbind()
        total = count + n
        delta = batch_mean - mean
        m2 = var * count + batch_var * n + delta**2 * count * n / total
        self.moments = torch.stack([mean + delta * n / total, m2 / total, total])

    def state_dict(self) -> dict[str, Any]:
        return {
            "running_return": None if self.running_return is None else self.running_return.clone(),
            "moments": self.moments.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ret = state["running_return"]
        self.running_return = None if ret is None else torch.as_tensor(ret).clone()
        self.moments = torch.as_tensor(state["moments"], dtype=torch.float64).clone()
