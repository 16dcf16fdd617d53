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
        self.var = 1.0
        self.mean = 0.0
        self.count = 0.0

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
        scale = 1.0 / (self.var + self.epsilon) ** 0.5
        return (reward * scale).clamp(-self.clip, self.clip)

    def _update(self, returns: torch.Tensor) -> None:
        """Fold ``returns`` into the mean and variance (Chan et al.'s parallel update)."""
        moments = torch.stack([returns.mean(), returns.var(unbiased=False)])
        n = float(returns.numel())
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():  # equal counts on every process
            world_size = dist.get_world_size()
            means = moments[0].clone()
            dist.all_reduce(means)
            means /= world_size
            moments[1] += (moments[0] - means) ** 2
            dist.all_reduce(moments[1:])
            moments = torch.stack([means, moments[1] / world_size])
            n *= world_size
        batch_mean, batch_var = moments.tolist()
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {
            "running_return": None if self.running_return is None else self.running_return.clone(),
            "mean": self.mean,
            "var": self.var,
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ret = state["running_return"]
        self.running_return = None if ret is None else torch.as_tensor(ret).clone()
        self.mean, self.var, self.count = (float(state[k]) for k in ("mean", "var", "count"))
