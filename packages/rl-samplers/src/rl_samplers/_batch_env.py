"""A batch of environments as ``BatchedSampler`` steps it: the ``BatchEnv`` interface
(torch tensors, batch and agent outputs on its device, nothing read on the host per step),
the adapter that makes a gymnasium ``VectorEnv`` one, and the calls that read what either
returns.

A ``VectorEnv`` (numpy, batch on the CPU) must autoreset in the ``SAME_STEP`` or
``DISABLED`` mode (``NEXT_STEP`` would record a fake transition after each done, and is
refused).  A ``BatchEnv`` may add a privileged observation for the critic
(``ActorCriticObservation``), per-step values its trajectory infos sum
(``traj_info_fields``, e.g. Atari's raw game score) and the ends of trajectories that
outlast an episode (``TRAJ_DONE``, e.g. Atari's episodic lives).  The README
("BatchedSampler and BatchEnv") has the details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rl_arrays import (
    EnvSpaces,
    is_namedarraytuple,
    namedarraytuple,
    numpify_buffer,
    torchify_buffer,
)

from ._gym import GymSpaceWrapper
from ._spaces import Composite, Space
from ._traj_info import TrajInfo

if TYPE_CHECKING:
    from gymnasium.vector import VectorEnv

__all__ = [
    "CRITIC_OBSERVATION",
    "TRAJ_DONE",
    "ActorCriticObservation",
    "BatchEnv",
    "GymVectorAdapter",
    "as_batch_env",
    "buffer_to_cpu",
    "env_extra",
    "env_reset",
    "env_step",
    "observation_space_of",
    "traj_info_fields_of",
]

ActorCriticObservation = namedarraytuple("ActorCriticObservation", ["actor", "critic"])
ActorCriticObservation.__doc__ = (
    "An observation in two parts: ``actor``, what the policy sees, and ``critic``, what the "
    "value function sees (privileged information, e.g. the full state), each [..., shape]."
)

CRITIC_OBSERVATION = "critic_observation"  # the extras key of the privileged observation
TRAJ_DONE = "traj_done"  # the extras key of where a trajectory record ends (else: every done)


class BatchEnv:
    """``num_envs`` environments stepped together as torch tensors on ``device``.

    Subclasses set ``num_envs``, ``device``, ``observation_space`` and ``action_space``
    (per-env spaces of ours) and implement ``reset() -> observation`` and ``step(action) ->
    (observation, reward, terminated, truncated)``, each ``[B, ...]`` on ``device``.  A done
    env resets inside ``step`` (the observation returned is its next episode's first);
    ``seed(seed)`` applies at the next ``reset``.  With ``critic_observation_space`` set,
    ``reset`` returns ``(observation, extras)`` and ``step`` a fifth element, ``extras``,
    with ``extras["critic_observation"]`` of the same state (README: privileged observations).

    Trajectory infos: ``step``'s extras may hold ``extras["traj_done"]`` (bool ``[B]``), where
    a trajectory record ends (a life loss is done, the game goes on: its record too); each
    name in ``traj_info_fields`` is a per-step value ``[B]`` in the extras that the records
    sum into a field of that name (``AleVectorEnv``: the raw game score, ``GameScore``).
    """

    num_envs: int
    device: torch.device
    observation_space: Space
    action_space: Space
    critic_observation_space: Space | None = None
    traj_info_fields: tuple[str, ...] = ()

    def reset(self) -> Any:
        raise NotImplementedError

    def step(self, action: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def seed(self, seed: int | None) -> None:
        raise NotImplementedError

    @property
    def spaces(self) -> EnvSpaces:
        """The per-env spaces; with a critic observation, ``observation`` is the
        ``Composite`` of the actor's and the critic's spaces (``ActorCriticObservation``)."""
        return EnvSpaces(observation=observation_space_of(self), action=self.action_space)

    def close(self) -> None:
        """Release the environment's resources."""


def observation_space_of(env: BatchEnv | GymVectorAdapter) -> Space:
    """What the sampler records as the observation of ``env``: its observation space, or
    with a critic observation space the ``Composite`` of both (``ActorCriticObservation``)."""
    critic = getattr(env, "critic_observation_space", None)
    if critic is None:
        return env.observation_space
    return Composite([env.observation_space, critic], ActorCriticObservation)


def _with_critic(
    env: BatchEnv | GymVectorAdapter, observation: Any, extras: object, call: str
) -> Any:
    """``observation``, or ``ActorCriticObservation(observation, critic observation)`` when
    ``env`` has a critic observation space (the privileged part taken from ``extras``)."""
    if getattr(env, "critic_observation_space", None) is None:
        return observation
    critic = extras.get(CRITIC_OBSERVATION) if isinstance(extras, dict) else None
    if critic is None:
        raise ValueError(
            f"{type(env).__name__} has a critic_observation_space, so {call} must return "
            f"extras (a dict) with the key {CRITIC_OBSERVATION!r}; got "
            f"{'extras ' + repr(sorted(extras)) if isinstance(extras, dict) else 'no extras'}"
        )
    return ActorCriticObservation(actor=observation, critic=critic)


def env_reset(env: BatchEnv | GymVectorAdapter) -> Any:
    """``env.reset()``'s observation (as the sampler records it; see ``BatchEnv``)."""
    result = env.reset()
    if isinstance(result, tuple) and not is_namedarraytuple(result):
        if len(result) != 2:
            raise ValueError(
                f"{type(env).__name__}.reset() returned a tuple of {len(result)}; expected the "
                "observation or (observation, extras)"
            )
        return _with_critic(env, result[0], result[1], "reset()")
    return _with_critic(env, result, None, "reset()")


def env_step(
    env: BatchEnv | GymVectorAdapter, action: Any
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """``env.step(action)`` as ``(observation, reward, terminated, truncated, extras)``, the
    observation as the sampler records it (see ``BatchEnv``), extras None if none."""
    result = env.step(action)
    if len(result) == 4:
        observation, reward, terminated, truncated = result
        extras = None
    elif len(result) == 5:
        observation, reward, terminated, truncated, extras = result
    else:
        raise ValueError(
            f"{type(env).__name__}.step() returned {len(result)} values; expected "
            "(observation, reward, terminated, truncated[, extras])"
        )
    observation = _with_critic(env, observation, extras, "step()")
    return observation, reward, terminated, truncated, extras


def traj_info_fields_of(env: BatchEnv | GymVectorAdapter) -> tuple[str, ...]:
    """``env.traj_info_fields``, checked: public names that ``TrajInfo`` does not have."""
    fields = tuple(getattr(env, "traj_info_fields", ()))
    reserved = set(TrajInfo())
    for name in fields:
        if (
            not (isinstance(name, str) and name.isidentifier())
            or name in reserved
            or name[0] == "_"
        ):
            raise ValueError(
                f"{type(env).__name__}.traj_info_fields: {name!r} is not a field name a "
                f"trajectory info can take (an identifier, not _-prefixed, none of "
                f"{', '.join(sorted(reserved))})"
            )
    return fields


def env_extra(env: BatchEnv | GymVectorAdapter, extras: Any, key: str) -> Any:
    """``extras[key]``, or an error that names the env and the key it did not return."""
    if not isinstance(extras, dict) or key not in extras:
        raise ValueError(
            f"{type(env).__name__} lists {key!r} in traj_info_fields, so step() must return "
            f"extras (a dict) with that key; got "
            f"{'extras ' + repr(sorted(extras)) if isinstance(extras, dict) else 'no extras'}"
        )
    return extras[key]


class GymVectorAdapter:
    """A gymnasium ``VectorEnv`` seen as a ``BatchEnv`` on the CPU (torch views of numpy)."""

    device = torch.device("cpu")

    def __init__(self, env: VectorEnv):
        from gymnasium.vector import AutoresetMode

        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED):
            raise ValueError(
                f"BatchedSampler: make_env returned a VectorEnv with autoreset_mode={mode}; "
                "use AutoresetMode.SAME_STEP or DISABLED, e.g. gymnasium.make_vec(..., "
                'vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP})'
            )
        self.env, self.num_envs, self.same_step = env, env.num_envs, mode == AutoresetMode.SAME_STEP
        self.observation_space = GymSpaceWrapper(env.single_observation_space, name="obs")
        self.action_space = GymSpaceWrapper(env.single_action_space, name="act")
        self._seeds: list[int] | None = None

    def seed(self, seeds: list[int] | None) -> None:
        self._seeds = seeds

    def reset(self) -> Any:
        # (Sync/AsyncVectorEnv take a seed per env; the base VectorEnv.reset says int only.)
        observation, _ = self.env.reset(seed=self._seeds)  # type: ignore[arg-type]  # seed list ok
        self._seeds = None  # later episodes continue each env's random stream
        return torchify_buffer(self.observation_space.convert(observation))

    def step(self, action: Any) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        action = _gym_batch(self.action_space, numpify_buffer(buffer_to_cpu(action)))
        observation, reward, terminated, truncated, _ = self.env.step(action)
        if not self.same_step and np.any(terminated | truncated):
            fresh, _ = self.env.reset(options={"reset_mask": terminated | truncated})
            observation = _np_where(terminated | truncated, fresh, observation)
        return (
            torchify_buffer(self.observation_space.convert(observation)),
            torch.from_numpy(np.asarray(reward, np.float32)),
            torch.from_numpy(np.asarray(terminated, bool)),
            torch.from_numpy(np.asarray(truncated, bool)),
        )

    def close(self) -> None:
        self.env.close()


def buffer_to_cpu(buffer: Any) -> Any:
    """``buffer`` (a tensor, a namedarraytuple of them, or None) with its tensors on the CPU."""
    if buffer is None:
        return None
    if is_namedarraytuple(buffer):
        return type(buffer)(*(buffer_to_cpu(x) for x in buffer))
    return buffer.cpu() if isinstance(buffer, torch.Tensor) else buffer


def _gym_batch(space: GymSpaceWrapper, value: Any) -> Any:
    """A batch of our actions as the vector env expects (dicts/tuples of gym-dtype arrays)."""
    if not space._children:
        return np.asarray(value, dtype=space.gym_space.dtype)
    parts = [_gym_batch(c, v) for c, v in zip(space._children, value, strict=True)]
    return dict(zip(space._keys, parts, strict=True)) if space._keys is not None else tuple(parts)


def _np_where(mask: np.ndarray, a: Any, b: Any) -> Any:
    if isinstance(a, dict):
        return {k: _np_where(mask, a[k], b[k]) for k in a}
    if isinstance(a, tuple):
        return tuple(_np_where(mask, x, y) for x, y in zip(a, b, strict=True))
    return np.where(mask.reshape(-1, *([1] * (np.ndim(a) - 1))), a, b)


def as_batch_env(made: object, num_envs: int) -> BatchEnv | GymVectorAdapter:
    """What ``make_env(num_envs)`` returned, as a ``BatchEnv`` (a ``VectorEnv`` adapted);
    anything else, or another number of envs, refused."""
    import gymnasium

    env: BatchEnv | GymVectorAdapter
    if isinstance(made, gymnasium.vector.VectorEnv):
        env = GymVectorAdapter(made)
    elif isinstance(made, BatchEnv):
        env = made
    else:
        raise TypeError(
            f"BatchedSampler: make_env({num_envs}) must return a gymnasium VectorEnv or a "
            f"BatchEnv, got {type(made).__name__}"
        )
    if env.num_envs != num_envs:
        raise ValueError(f"BatchedSampler: make_env({num_envs}) made {env.num_envs} envs")
    return env
