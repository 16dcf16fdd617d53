"""What agents read from the environment's spaces: the number of discrete actions, the size
of a continuous action, and the model kwargs of the Atari, MuJoCo and vector forms (the
functions agents take as ``env_to_model_kwargs``), with rlpyt's mixins over them."""

from __future__ import annotations

from typing import Any

from rl_arrays import EnvSpaces

__all__ = ["AtariMixin", "MujocoMixin", "VectorCategoricalMixin"]


def observation_shape(space: Any, name: str = "observation") -> tuple[int, ...]:
    shape = getattr(space, "shape", None)
    if shape is None:
        raise ValueError(f"env_spaces.{name} must have a shape, got {space!r}")
    return tuple(int(s) for s in shape)


def n_actions(env_spaces: EnvSpaces) -> int:
    n = getattr(env_spaces.action, "n", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            "a categorical agent needs a discrete action space with an int attribute n >= 1, "
            f"got env_spaces.action={env_spaces.action!r}"
        )
    return n


def action_size_of(env_spaces: EnvSpaces) -> int:
    shape = getattr(env_spaces.action, "shape", None)
    if shape is None or len(shape) != 1:
        raise ValueError(
            "a Gaussian agent needs a continuous action space with a 1-D shape, got "
            f"env_spaces.action={env_spaces.action!r} with shape {shape}"
        )
    return int(shape[0])


def atari_model_kwargs(env_spaces: EnvSpaces) -> dict[str, Any]:
    """``image_shape`` (C, H, W) and ``output_size`` (the number of actions)."""
    image_shape = observation_shape(env_spaces.observation)
    if len(image_shape) != 3:
        raise ValueError(f"Atari agents need image observations (C, H, W), got shape {image_shape}")
    return dict(image_shape=image_shape, output_size=n_actions(env_spaces))


def mujoco_model_kwargs(env_spaces: EnvSpaces) -> dict[str, Any]:
    """``observation_shape`` and ``action_size`` (a 1-D continuous action)."""
    return dict(
        observation_shape=observation_shape(env_spaces.observation),
        action_size=action_size_of(env_spaces),
    )


def vector_model_kwargs(env_spaces: EnvSpaces) -> dict[str, Any]:
    """``observation_shape`` and ``output_size`` (the number of actions)."""
    return dict(
        observation_shape=observation_shape(env_spaces.observation),
        output_size=n_actions(env_spaces),
    )


class AtariMixin:
    """rlpyt's mixin, for agents of one's own (``class MyAgent(AtariMixin, CategoricalPgAgent)``):
    the model kwargs of ``atari_model_kwargs``."""

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict[str, Any]:
        return atari_model_kwargs(env_spaces)


class MujocoMixin:
    """rlpyt's mixin, as ``AtariMixin``: the model kwargs of ``mujoco_model_kwargs``."""

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict[str, Any]:
        return mujoco_model_kwargs(env_spaces)


class VectorCategoricalMixin:
    """As ``AtariMixin``: the model kwargs of ``vector_model_kwargs``, and the previous
    action handed to the model as integer indexes (``onehot_prev_action=False``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.onehot_prev_action = False

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict[str, Any]:
        return vector_model_kwargs(env_spaces)
