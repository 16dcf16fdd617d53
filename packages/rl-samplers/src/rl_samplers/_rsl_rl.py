"""rsl_rl's ``VecEnv`` (what Isaac Lab hands to rsl_rl) as a ``BatchEnv``, so a simulator
written for rsl_rl trains with ``BatchedSampler``.  Duck-typed: rsl_rl is not imported.

The env keeps its own episodes: it resets done envs inside ``step`` and has no ``reset``, so
the first batch starts from ``get_observations()``.  ``dones`` with ``extras["time_outs"]``
become ``truncated`` (bootstrapped) and the rest ``terminated``.  The README ("rsl_rl
VecEnv") has the details.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rl_arrays import normalize_device

from ._batched import CRITIC_OBSERVATION, BatchEnv
from ._spaces import FloatBox

__all__ = ["RslRlVecEnvAdapter"]


def _groups(observation: Any, extras: Any) -> Any:
    """The observation groups: a ``TensorDict`` (rsl-rl-lib >= 3) as it is, or rsl-rl-lib
    2.x's ``observation`` tensor as group ``"policy"`` beside ``extras["observations"]``."""
    if not isinstance(observation, torch.Tensor):
        return observation
    others = extras.get("observations", {}) if isinstance(extras, Mapping) else {}
    return {**others, "policy": observation}


def _split(result: Any) -> tuple[Any, Any]:
    """``get_observations()``'s observations and extras: rsl-rl-lib 2.x returns both."""
    if isinstance(result, tuple):
        return result[0], result[1]
    return result, None


class RslRlVecEnvAdapter(BatchEnv):
    """``env``, an rsl_rl ``VecEnv``, as a ``BatchEnv`` on ``env.device``.

    ``obs_groups`` is rsl_rl's runner setting of that name: ``{"actor": [...], "critic":
    [...]}``, lists of the env's observation groups (several are concatenated on the last
    dim).  Without ``"actor"`` the policy reads ``"policy"``; without ``"critic"`` the
    critic reads group ``"critic"`` if the env has one (as ``ActorCriticObservation.critic``),
    else what the policy reads.  Actions are ``FloatBox(-inf, inf, (env.num_actions,))``.

    Hand ``make_env`` to ``BatchedSampler`` with ``batch_B=adapter.num_envs``: it gives this
    adapter, and for the sampler's one-env probe (a simulator cannot make a second copy) a
    view of env 0's current observation that never steps the simulator.  ``seed`` and
    ``close`` leave the env alone: it is seeded and closed by whoever made it.
    """

    def __init__(self, env: Any, obs_groups: Mapping[str, Sequence[str]] | None = None):
        for name in ("num_envs", "num_actions", "device", "get_observations", "step"):
            if not hasattr(env, name):
                raise TypeError(
                    f"RslRlVecEnvAdapter: env must have rsl_rl VecEnv's num_envs, num_actions, "
                    f"device, get_observations() and step(); {type(env).__name__} has no {name}"
                )
        self.env, self.num_envs = env, int(env.num_envs)
        self.device = normalize_device(env.device)
        groups = _groups(*_split(env.get_observations()))
        self.actor_groups, self.critic_groups = self._resolve(dict(obs_groups or {}), groups)
        self._last = groups  # the current observations, for the probe
        self.observation_space = self._space(groups, self.actor_groups)
        if self.critic_groups is not None:
            self.critic_observation_space = self._space(groups, self.critic_groups)
        self.action_space = FloatBox(-float("inf"), float("inf"), shape=(int(env.num_actions),))
        self._handed_out = False

    @staticmethod
    def _resolve(
        obs_groups: dict[str, Sequence[str]], groups: Any
    ) -> tuple[list[str], list[str] | None]:
        available = sorted(groups.keys())
        unknown = sorted(set(obs_groups) - {"actor", "critic"})
        if unknown:
            raise ValueError(
                f"RslRlVecEnvAdapter: obs_groups takes the keys 'actor' and 'critic', got {unknown}"
            )
        chosen = {
            "actor": obs_groups.get("actor", ["policy"]),
            "critic": obs_groups.get("critic", ["critic"] if "critic" in available else None),
        }
        for key, names in chosen.items():
            if names is None:
                continue
            if isinstance(names, str) or not names:
                raise ValueError(
                    f"RslRlVecEnvAdapter: obs_groups[{key!r}] must be a non-empty list of "
                    f"group names, got {names!r}"
                )
            missing = [name for name in names if name not in available]
            if missing:
                raise ValueError(
                    f"RslRlVecEnvAdapter: obs_groups[{key!r}] names {missing}, which the env "
                    f"does not return; its observation groups: {available}"
                )
        actor, critic = list(chosen["actor"] or ()), chosen["critic"]
        critic = None if critic is None or list(critic) == actor else list(critic)
        return actor, critic

    def _space(self, groups: Any, names: list[str]) -> FloatBox:
        shape = tuple(self._join(groups, names).shape[1:])
        return FloatBox(-float("inf"), float("inf"), shape=shape)

    def _join(self, groups: Any, names: list[str]) -> torch.Tensor:
        if len(names) == 1:
            return groups[names[0]]
        parts = [groups[name] for name in names]
        if any(part.dim() != 2 for part in parts):
            shapes = [tuple(part.shape) for part in parts]
            raise ValueError(
                f"RslRlVecEnvAdapter: groups {names} are joined on their last dim, which needs "
                f"[num_envs, size] each; got {shapes}"
            )
        return torch.cat(parts, dim=-1)

    def _observation(self, groups: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self._last = groups
        observation = self._join(groups, self.actor_groups)
        if self.critic_groups is None:
            return observation, {}
        return observation, {CRITIC_OBSERVATION: self._join(groups, self.critic_groups)}

    def make_env(self, num_envs: int) -> BatchEnv:
        """``BatchedSampler``'s ``make_env``: this adapter for ``self.num_envs`` (once), the
        one-env probe for 1 (see the class)."""
        if num_envs == self.num_envs and not self._handed_out:
            self._handed_out = True
            return self
        if num_envs == 1:
            return _Probe(self)
        raise ValueError(
            f"RslRlVecEnvAdapter wraps {self.num_envs} envs: give BatchedSampler "
            f"batch_B={self.num_envs}, not {num_envs}"
        )

    def reset(self) -> Any:
        """The current observations (rsl_rl's env resets itself; nothing is restarted)."""
        observation, extras = self._observation(_groups(*_split(self.env.get_observations())))
        return observation if self.critic_groups is None else (observation, extras)

    def step(self, action: torch.Tensor) -> tuple[Any, ...]:
        observation, reward, dones, extras = self.env.step(action)
        done = dones.reshape(self.num_envs).to(torch.bool)
        time_outs = extras.get("time_outs") if isinstance(extras, Mapping) else None
        if time_outs is None:
            truncated = torch.zeros_like(done)
        else:
            truncated = done & time_outs.reshape(self.num_envs).to(device=done.device).bool()
        observation, more = self._observation(_groups(observation, extras))
        reward = reward.reshape(self.num_envs).to(torch.float32)
        if self.critic_groups is None:
            return observation, reward, done & ~truncated, truncated
        return observation, reward, done & ~truncated, truncated, more

    def seed(self, seed: int | None) -> None:
        """Nothing: an rsl_rl env is seeded where it is made (Isaac Lab: its config's seed)."""


class _Probe(BatchEnv):
    """One env showing the adapter's current observation of env 0, reward 0, never done:
    what ``BatchedSampler`` needs to size its buffers, without stepping the simulator."""

    def __init__(self, adapter: RslRlVecEnvAdapter):
        self.adapter, self.num_envs, self.device = adapter, 1, adapter.device
        self.observation_space, self.action_space = adapter.observation_space, adapter.action_space
        self.critic_observation_space = adapter.critic_observation_space

    def _now(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        observation, extras = self.adapter._observation(self.adapter._last)
        return observation[:1].clone(), {k: v[:1].clone() for k, v in extras.items()}

    def reset(self) -> Any:
        observation, extras = self._now()
        return observation if self.critic_observation_space is None else (observation, extras)

    def step(self, action: torch.Tensor) -> tuple[Any, ...]:
        observation, extras = self._now()
        flags = torch.zeros(1, dtype=torch.bool, device=self.device)
        reward = torch.zeros(1, device=self.device)
        if self.critic_observation_space is None:
            return observation, reward, flags, flags
        return observation, reward, flags, flags, extras

    def seed(self, seed: int | None) -> None:
        """Nothing: the probe has no randomness."""
