"""Action distributions: the agent samples from them, the algorithm scores with them.

Each distribution is a small stateless-ish object (it keeps only settings such as a fixed
std or an epsilon); the parameters of each datum travel in ``dist_info`` namedarraytuples,
so every method keeps whatever leading dims (``[T, B]``, ``[B]`` or none) its inputs have
and reduces only over the trailing action dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rl_arrays import (
    as_count,
    from_onehot,
    namedarraytuple,
    select_at_indexes,
    to_onehot,
    valid_mean,
)

__all__ = [
    "Categorical",
    "CategoricalEpsilonGreedy",
    "DiscreteMixin",
    "DistInfo",
    "DistInfoStd",
    "Distribution",
    "EpsilonGreedy",
    "Gaussian",
]

# Guards log(0) for probabilities that are exactly zero (e.g. after a softmax underflow).
EPS = 1e-8

DistInfo = namedarraytuple("DistInfo", ["prob"])
DistInfo.__doc__ = "Categorical distribution parameters: ``prob`` [..., dim], rows summing to 1."

DistInfoStd = namedarraytuple("DistInfoStd", ["mean", "log_std"])
DistInfoStd.__doc__ = (
    "Diagonal Gaussian parameters: ``mean`` and ``log_std``, each [..., dim]. With a fixed "
    "std set on the distribution only ``mean`` is read (``log_std`` may be None)."
)

_LOG_SQRT_2PI_E = 0.5 * math.log(2 * math.pi * math.e)
_LOG_2PI = math.log(2 * math.pi)


def _check_dim(dim: Any) -> int:
    return as_count("dim", dim, 1, expected="a positive integer")  # 4.0 too


class Distribution:
    """What every distribution offers; the mean_* reductions are shared.

    ``valid`` (same leading dims as the data, bool or 0/1) excludes entries from the means,
    e.g. the blank steps a wait-reset collector records after an episode ended.
    """

    def __init__(self, dim: int):
        self._dim = _check_dim(dim)

    @property
    def dim(self) -> int:
        """Size of the action (the trailing dim of samples and parameters)."""
        return self._dim

    def sample(self, dist_info: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement sample()")

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement log_likelihood()")

    def likelihood_ratio(
        self, x: torch.Tensor, old_dist_info: Any, new_dist_info: Any
    ) -> torch.Tensor:
        """p_new(x) / p_old(x) at each datum."""
        return torch.exp(
            self.log_likelihood(x, new_dist_info) - self.log_likelihood(x, old_dist_info)
        )

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement kl()")

    def entropy(self, dist_info: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement entropy()")

    def perplexity(self, dist_info: Any) -> torch.Tensor:
        """exp(entropy): the effective number of equally likely actions."""
        return torch.exp(self.entropy(dist_info))

    def mean_kl(
        self, old_dist_info: Any, new_dist_info: Any, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Mean KL(old || new) over the valid data."""
        return valid_mean(self.kl(old_dist_info, new_dist_info), valid)

    def mean_entropy(self, dist_info: Any, valid: torch.Tensor | None = None) -> torch.Tensor:
        return valid_mean(self.entropy(dist_info), valid)

    def mean_perplexity(self, dist_info: Any, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Mean of the per-datum perplexities (not exp of the mean entropy), as rlpyt logs it."""
        return valid_mean(self.perplexity(dist_info), valid)


class DiscreteMixin:
    """Integer actions in ``range(dim)``: conversions to and from one-hot vectors."""

    def __init__(
        self,
        dim: int,
        dtype: torch.dtype = torch.long,
        onehot_dtype: torch.dtype = torch.float,
        **kwargs: Any,
    ):
        super().__init__(dim=dim, **kwargs)  # type: ignore[call-arg]
        self.dtype = dtype
        self.onehot_dtype = onehot_dtype

    def to_onehot(self, indexes: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """One-hot vectors [..., dim] of integer ``indexes`` [...] (leading dims kept)."""
        return to_onehot(indexes, self.dim, dtype=self.onehot_dtype if dtype is None else dtype)  # type: ignore[attr-defined]

    def from_onehot(self, onehot: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Integer indexes [...] of one-hot vectors [..., dim] (leading dims kept)."""
        return from_onehot(onehot, dtype=self.dtype if dtype is None else dtype)


class Categorical(DiscreteMixin, Distribution):
    """Distribution over ``range(dim)`` given by probabilities ``DistInfo(prob)``."""

    def sample(self, dist_info: Any) -> torch.Tensor:
        """One index per datum, drawn with ``torch.multinomial`` over the trailing dim."""
        prob = dist_info.prob
        flat = prob.reshape(-1, prob.shape[-1])
        sample = torch.multinomial(flat, num_samples=1)
        return sample.reshape(prob.shape[:-1]).to(self.dtype)

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        return torch.log(select_at_indexes(x, dist_info.prob) + EPS)

    def likelihood_ratio(
        self, x: torch.Tensor, old_dist_info: Any, new_dist_info: Any
    ) -> torch.Tensor:
        new = select_at_indexes(x, new_dist_info.prob)
        old = select_at_indexes(x, old_dist_info.prob)
        return (new + EPS) / (old + EPS)

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        p, q = old_dist_info.prob, new_dist_info.prob
        return torch.sum(p * (torch.log(p + EPS) - torch.log(q + EPS)), dim=-1)

    def entropy(self, dist_info: Any) -> torch.Tensor:
        p = dist_info.prob
        return -torch.sum(p * torch.log(p + EPS), dim=-1)


class Gaussian(Distribution):
    """Diagonal Gaussian over ``dim`` real actions.

    The std is fixed (``std``, ``set_std``) or read per datum from ``dist_info.log_std``
    (``std=None``), optionally clamped to ``[min_std, max_std]``. Sampling options, all off
    by default: ``noise_clip``, ``clip`` and tanh ``squash`` (``clip`` and ``squash`` exclude
    each other). With ``squash``, ``log_likelihood`` takes the *pre-squash* value and scores
    the squashed action; ``entropy`` is then undefined. Clipping is not reflected in the
    formulas. Details: the package README, "Distributions".
    """

    def __init__(
        self,
        dim: int,
        std: float | Sequence[float] | torch.Tensor | None = None,
        clip: float | None = None,
        noise_clip: float | None = None,
        min_std: float | None = None,
        max_std: float | None = None,
        squash: float | None = None,
    ):
        super().__init__(dim)
        for name, value in (("min_std", min_std), ("max_std", max_std)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value!r}")
        if min_std is not None and max_std is not None and min_std > max_std:
            raise ValueError(f"min_std ({min_std}) must not exceed max_std ({max_std})")
        self.min_std = min_std
        self.max_std = max_std
        self._min_log_std = None if min_std is None else math.log(min_std)
        self._max_log_std = None if max_std is None else math.log(max_std)
        self.clip: float | None = None
        self.squash: float | None = None
        self.noise_clip: float | None = None
        self._device = torch.device("cpu")
        self.set_std(std)
        self.set_clip(clip)
        self.set_squash(squash)
        self.set_noise_clip(noise_clip)

    # ------------------------------------------------------------------ settings

    def set_std(self, std: float | Sequence[float] | torch.Tensor | None) -> None:
        """Fix the std (scalar, or broadcastable to ``[dim]``), or None to read
        ``dist_info.log_std``. A std of 0 makes ``sample`` return the mean."""
        if std is not None:
            std = torch.as_tensor(std, dtype=torch.float32).detach().clone()
            try:
                std = torch.broadcast_to(std, (self.dim,)).clone()
            except RuntimeError:
                raise ValueError(
                    f"std must be a scalar or broadcast to the action shape ({self.dim},), "
                    f"got shape {tuple(std.shape)}"
                ) from None
            if bool((std < 0).any()) or bool(torch.isnan(std).any()):
                raise ValueError(f"std must be non-negative, got {std.tolist()}")
            std = std.to(self._device)
        self.std: torch.Tensor | None = std

    def to(self, device: torch.device | str) -> Gaussian:
        """Keep the fixed std on ``device``, where the means will be (no copy per sample,
        which on a GPU waits for it, and which a captured CUDA graph cannot hold)."""
        self._device = torch.device(device)
        if self.std is not None:
            self.std = self.std.to(self._device)
        return self

    def set_clip(self, clip: float | None) -> None:
        """Clamp samples to ``[-clip, clip]``; None turns it off."""
        self._check_positive("clip", clip)
        if clip is not None and self.squash is not None:
            raise ValueError("Gaussian: clip and squash exclude each other; set one to None")
        self.clip = clip

    def set_squash(self, squash: float | None) -> None:
        """Samples become ``squash * tanh(u)``; None turns it off."""
        self._check_positive("squash", squash)
        if squash is not None and self.clip is not None:
            raise ValueError("Gaussian: clip and squash exclude each other; set one to None")
        self.squash = squash

    def set_noise_clip(self, noise_clip: float | None) -> None:
        """Clamp the sampled noise to ``[-noise_clip, noise_clip]``; None turns it off."""
        self._check_positive("noise_clip", noise_clip)
        self.noise_clip = noise_clip

    @staticmethod
    def _check_positive(name: str, value: Any) -> None:
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name} must be a positive number or None, got {value!r}")

    # ----------------------------------------------------------------- internals

    def _log_std(self, dist_info: Any) -> torch.Tensor:
        """Log std per datum and dim, on the mean's device."""
        mean = dist_info.mean
        if self.std is not None:
            return torch.log(self.std.to(device=mean.device, dtype=mean.dtype))
        log_std = getattr(dist_info, "log_std", None)
        if log_std is None:
            raise ValueError(
                "Gaussian has no fixed std (std=None), so dist_info must carry log_std"
            )
        if self._min_log_std is not None or self._max_log_std is not None:
            log_std = torch.clamp(log_std, self._min_log_std, self._max_log_std)
        return log_std

    def _squash_log_det(self, u: torch.Tensor) -> torch.Tensor:
        """log |d(squash * tanh(u)) / du| summed over dims, in a form stable for large |u|:
        log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))."""
        assert self.squash is not None
        log_det = math.log(self.squash) + 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return torch.sum(log_det, dim=-1)

    # ------------------------------------------------------------------- methods

    def sample(self, dist_info: Any) -> torch.Tensor:
        """``mean + std * noise`` (reparameterised: gradients reach mean and log_std),
        then noise clip, clip or squash as set."""
        mean = dist_info.mean
        std = torch.exp(self._log_std(dist_info))
        noise = std * torch.randn_like(mean)
        if self.noise_clip is not None:
            noise = torch.clamp(noise, -self.noise_clip, self.noise_clip)
        sample = mean + noise
        if self.clip is not None:
            sample = torch.clamp(sample, -self.clip, self.clip)
        elif self.squash is not None:
            sample = self.squash * torch.tanh(sample)
        return sample

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        """Log-density at ``x``, summed over dims. With squashing, ``x`` is the pre-squash
        value and the result is the log-density of ``squash * tanh(x)``."""
        log_std = self._log_std(dist_info)
        z = (x - dist_info.mean) * torch.exp(-log_std)
        logli = -torch.sum(log_std + 0.5 * z**2, dim=-1) - 0.5 * self.dim * _LOG_2PI
        if self.squash is not None:
            logli = logli - self._squash_log_det(x)
        return logli

    def sample_loglikelihood(self, dist_info: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """A new (squashed, when set) sample and its log-likelihood, both differentiable,
        e.g. for SAC's policy loss. Noise clip and clip are not applied here."""
        mean = dist_info.mean
        log_std = self._log_std(dist_info)
        u = mean + torch.exp(log_std) * torch.randn_like(mean)
        logli = self.log_likelihood(u, dist_info)
        if self.squash is not None:
            u = self.squash * torch.tanh(u)
        return u, logli

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        """KL(old || new) per datum, summed over dims."""
        old_log_std = self._log_std(old_dist_info)
        new_log_std = self._log_std(new_dist_info)
        diff = old_dist_info.mean - new_dist_info.mean
        ratio = torch.exp(2.0 * (old_log_std - new_log_std))
        vals = 0.5 * (ratio + diff**2 * torch.exp(-2.0 * new_log_std) - 1.0)
        vals = vals + new_log_std - old_log_std
        return torch.sum(vals, dim=-1)

    def entropy(self, dist_info: Any) -> torch.Tensor:
        if self.squash is not None:
            raise NotImplementedError("Gaussian.entropy has no closed form with squashing")
        log_std = self._log_std(dist_info)
        log_std = torch.broadcast_to(log_std, dist_info.mean.shape)
        return torch.sum(log_std + _LOG_SQRT_2PI_E, dim=-1)


class EpsilonGreedy(DiscreteMixin, Distribution):
    """Epsilon-greedy choice from Q-values [..., dim]: the argmax, replaced with
    probability ``epsilon`` by a uniformly random action.

    ``epsilon`` is a number or a vector with one value per environment (length B): for
    input [B, dim] or [T, B, dim] it applies along B (the same for every T).
    """

    def __init__(self, epsilon: float | Sequence[float] | torch.Tensor = 1, **kwargs: Any):
        super().__init__(**kwargs)
        self.set_epsilon(epsilon)

    @property
    def epsilon(self) -> float | Sequence[float] | torch.Tensor:
        """The epsilon as it was set."""
        return self._epsilon

    def set_epsilon(self, epsilon: float | Sequence[float] | torch.Tensor) -> None:
        """A number or a per-environment vector, each in [0, 1]."""
        values = torch.as_tensor(epsilon, dtype=torch.float32)
        if values.ndim > 1 or bool(((values < 0) | (values > 1) | values.isnan()).any()):
            raise ValueError(
                f"epsilon must be a number or a vector of numbers in [0, 1], got {epsilon!r}"
            )
        self._epsilon = epsilon
        self._epsilon_tensor = values

    def sample(self, q: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """The greedy action, or with probability epsilon a uniformly random one (among the
        ``valid`` ones [..., dim] when given: an action mask, of which q must have been
        masked too)."""
        greedy = torch.argmax(q, dim=-1)
        epsilon = self._epsilon_tensor.to(q.device)
        if epsilon.ndim == 1 and (greedy.ndim == 0 or greedy.shape[-1] != epsilon.shape[0]):
            raise ValueError(
                f"a vector epsilon of length {epsilon.shape[0]} needs Q-values shaped "
                f"[B, dim] or [T, B, dim] with B = {epsilon.shape[0]}, got {tuple(q.shape)}"
            )
        explore = torch.rand(greedy.shape, device=q.device) < epsilon
        if valid is None:
            random = torch.randint(0, q.shape[-1], greedy.shape, device=q.device)
        else:  # (an all-false row draws uniformly from all: multinomial needs a weight)
            weights = valid.reshape(-1, q.shape[-1]).to(torch.float32)
            weights = torch.where(weights.sum(-1, keepdim=True) > 0, weights, 1.0)
            random = torch.multinomial(weights, 1).reshape(greedy.shape)
        return torch.where(explore, random, greedy).to(self.dtype)


class CategoricalEpsilonGreedy(EpsilonGreedy):
    """Epsilon-greedy for distributional Q-values: ``p`` [..., dim, n_atoms] over the atom
    values ``z`` [n_atoms]; the greedy action maximises the expected value ``sum(p * z)``."""

    def __init__(self, z: Sequence[float] | torch.Tensor | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.set_z(z)

    def set_z(self, z: Sequence[float] | torch.Tensor | None) -> None:
        """The atom values (the support of the return distribution), shape [n_atoms]."""
        if z is not None:
            z = torch.as_tensor(z, dtype=torch.float32)
            if z.ndim != 1:
                raise ValueError(f"z must be a vector of atom values, got shape {tuple(z.shape)}")
        self.z: torch.Tensor | None = z

    def sample(
        self, p: torch.Tensor, z: Sequence[float] | torch.Tensor | None = None
    ) -> torch.Tensor:
        z = self.z if z is None else torch.as_tensor(z)
        if z is None:
            raise ValueError("CategoricalEpsilonGreedy needs atom values z (set_z or sample(p, z))")
        q = torch.tensordot(p, z.to(device=p.device, dtype=p.dtype), dims=1)
        return super().sample(q)
