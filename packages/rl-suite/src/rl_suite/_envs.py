"""Environments by id, as the trainer makes them: gymnasium ids through ``rl_samplers.make``,
Atari games (``atari:pong`` or ``ALE/Pong-v5``) through ``AtariEnv`` directly.

``make_env`` is a module-level function, so samplers can start workers with any start method.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium
import numpy as np

from rl_samplers import AtariEnv, GymEnvWrapper, make

from ._config import is_atari

__all__ = ["is_atari", "make_env"]


def atari_game(env_id: str) -> str:
    """``atari:pong`` -> ``pong``; ``ALE/SpaceInvaders-v5`` -> ``space_invaders``."""
    if env_id.startswith("atari:"):
        return env_id.removeprefix("atari:")
    name = env_id.removeprefix("ALE/").split("-")[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class _KeepIndices(gymnasium.ObservationWrapper):
    """Keep only some entries of a flat Box observation (e.g. hide velocities)."""

    def __init__(self, env: gymnasium.Env, indices: list[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"observation_indices needs a flat Box observation, got {space}")
        bad = [i for i in indices if not -space.shape[0] <= i < space.shape[0]]
        if bad or not indices:
            raise ValueError(
                f"observation_indices must name entries of the {space.shape[0]} observation "
                f"entries, got {indices}"
            )
        self.indices = np.asarray(indices)
        self.observation_space = gymnasium.spaces.Box(
            space.low[self.indices], space.high[self.indices], dtype=space.dtype
        )

    def observation(self, observation: Any) -> Any:
        return observation[self.indices]


def make_env(id: str, observation_indices: list[int] | None = None, **kwargs: Any) -> Any:
    """Our ``Env`` for ``id``; ``observation_indices`` keeps only those observation entries
    (CartPole with ``[0, 2]`` sees positions but no velocities: a task that needs memory)."""
    if is_atari(id):
        if observation_indices is not None:
            raise ValueError("observation_indices applies to flat vector observations only")
        return AtariEnv(game=atari_game(id), **kwargs)
    env = make(id, **kwargs)
    if observation_indices is not None:
        env = GymEnvWrapper(_KeepIndices(env.env, list(observation_indices)))
    return env
