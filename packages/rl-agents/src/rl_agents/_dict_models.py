"""Models of ``Dict`` observations (rl-samplers' ``Composite`` of namedarraytuples: an image
and a vector, as robotics and games give): one encoder per field, a CNN for an image (3-D),
an MLP for anything else, their features concatenated, then the policy-gradient or Q heads.
An ``action_mask`` field is not encoded (``ActionMaskedModel`` applies it)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rl_arrays import EnvSpaces, infer_leading_dims, restore_leading_dims

from ._action_mask import MASK_FIELD
from ._dqn_models import q_head
from ._model_components import Conv2dHeadModel, MlpModel
from ._model_kwargs import action_size_of, n_actions

__all__ = ["DictDqnModel", "DictFfModel", "ObservationEncoder"]

# The image encoder's defaults: small images (a grid world's 7x7 to a 64x64 camera) halved
# twice; Atari-sized ones want the Nature CNN (``image_kwargs``).
_IMAGE_DEFAULTS: dict[str, Any] = dict(
    channels=[16, 32], kernel_sizes=[3, 3], strides=[2, 2], paddings=[1, 1], hidden_sizes=64
)


def observation_shapes(space: Any) -> dict[str, tuple[int, ...]]:
    """``{field: shape}`` of a composite observation space, without its action mask."""
    names, spaces = getattr(space, "names", None), getattr(space, "spaces", None)
    if not isinstance(names, tuple) or spaces is None:
        raise ValueError(
            f"a Dict model needs a composite (gymnasium Dict) observation space, got {space!r}"
        )
    return {
        name: tuple(int(s) for s in sub.shape)
        for name, sub in zip(names, spaces, strict=True)
        if name != MASK_FIELD
    }


def dict_categorical_model_kwargs(env_spaces: EnvSpaces) -> dict[str, Any]:
    """``observation_shapes`` and ``output_size`` (the number of actions)."""
    return dict(
        observation_shapes=observation_shapes(env_spaces.observation),
        output_size=n_actions(env_spaces),
    )


def dict_gaussian_model_kwargs(env_spaces: EnvSpaces) -> dict[str, Any]:
    """``observation_shapes`` and ``action_size`` (a 1-D continuous action)."""
    return dict(
        observation_shapes=observation_shapes(env_spaces.observation),
        action_size=action_size_of(env_spaces),
    )


def _channels_last(shape: tuple[int, ...]) -> bool:
    """An image stored [H, W, C] (gymnasium's RGB and grayscale frames), not [C, H, W]."""
    return shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4)


class ObservationEncoder(torch.nn.Module):
    """Features of a composite observation: per field, a CNN (``Conv2dHeadModel`` with
    ``image_kwargs`` over small-image defaults) for a 3-D shape, [C, H, W] or [H, W, C]
    (integer pixels scaled to [0, 1]), an MLP of ``vector_hidden_sizes`` for any other
    (flattened), concatenated in field order.

    ``forward(observation) -> (features [T * B, output_size], lead_dim, T, B)``.
    """

    def __init__(
        self,
        observation_shapes: Mapping[str, Sequence[int]],
        image_kwargs: Mapping[str, Any] | None = None,
        vector_hidden_sizes: int | Sequence[int] = 64,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
    ):
        super().__init__()
        if not observation_shapes:
            raise ValueError("observation_shapes must name at least one field")
        self.shapes = {
            name: tuple(int(s) for s in shape) for name, shape in observation_shapes.items()
        }
        self.encoders = torch.nn.ModuleDict()
        self.output_size = 0
        for name, shape in self.shapes.items():
            encoder: Conv2dHeadModel | MlpModel
            if len(shape) == 3:
                chw = (shape[2], shape[0], shape[1]) if _channels_last(shape) else shape
                kwargs = {**_IMAGE_DEFAULTS, **(image_kwargs or {})}
                encoder = Conv2dHeadModel(chw, nonlinearity=nonlinearity, **kwargs)
            else:
                encoder = MlpModel(math.prod(shape), vector_hidden_sizes, None, nonlinearity)
            self.encoders[name] = encoder
            self.output_size += encoder.output_size

    def forward(self, observation: Any) -> tuple[torch.Tensor, int, int, int]:
        first = next(iter(self.shapes))
        lead_dim, T, B, _ = infer_leading_dims(getattr(observation, first), len(self.shapes[first]))
        dtype = next(self.parameters()).dtype
        features = []
        for name, shape in self.shapes.items():
            x = getattr(observation, name).reshape(T * B, *shape)
            if len(shape) == 3:
                x = x.to(dtype) if x.is_floating_point() else x.to(dtype).mul_(1 / 255)
                x = x.permute(0, 3, 1, 2) if _channels_last(shape) else x
            else:
                x = x.reshape(T * B, -1).to(dtype)
            features.append(self.encoders[name](x))
        return torch.cat(features, dim=-1), lead_dim, T, B


class DictFfModel(torch.nn.Module):
    """A policy-gradient model of composite observations: a policy (``ObservationEncoder``
    and an MLP head of ``hidden_sizes``) and a value function (its own encoder and head;
    ``share_encoder``: the policy's, as SB3's default, which lets the value loss reshape the
    policy's features). With ``output_size`` (discrete actions) ``forward(observation,
    prev_action, prev_reward) -> (pi, value)``; with ``action_size`` (continuous) ``-> (mu,
    log_std, value)``, log_std a learned vector starting at ``init_log_std``. prev_action and
    prev_reward are not used.
    """

    def __init__(
        self,
        observation_shapes: Mapping[str, Sequence[int]],
        output_size: int | None = None,
        action_size: int | None = None,
        hidden_sizes: int | Sequence[int] | None = 64,
        image_kwargs: Mapping[str, Any] | None = None,
        vector_hidden_sizes: int | Sequence[int] = 64,
        hidden_nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        init_log_std: float = 0.0,
        share_encoder: bool = False,
    ):
        super().__init__()
        if (output_size is None) == (action_size is None):
            raise ValueError("DictFfModel needs output_size (discrete) or action_size (continuous)")
        encoder_args = (observation_shapes, image_kwargs, vector_hidden_sizes, hidden_nonlinearity)
        self.pi_encoder = ObservationEncoder(*encoder_args)
        self.value_encoder = None if share_encoder else ObservationEncoder(*encoder_args)
        size = self.pi_encoder.output_size
        out = output_size if action_size is None else action_size
        self.pi = MlpModel(size, hidden_sizes, out, hidden_nonlinearity)
        self.value = MlpModel(size, hidden_sizes, 1, hidden_nonlinearity)
        self.log_std = None
        if action_size is not None:
            self.log_std = torch.nn.Parameter(torch.full((action_size,), float(init_log_std)))

    def forward(self, observation: Any, prev_action: Any, prev_reward: Any) -> tuple[Any, ...]:
        features, lead_dim, T, B = self.pi_encoder(observation)
        if self.value_encoder is not None:
            value_features = self.value_encoder(observation)[0]
        else:
            value_features = features
        head, value = self.pi(features), self.value(value_features).squeeze(-1)
        if self.log_std is None:
            return restore_leading_dims((F.softmax(head, dim=-1), value), lead_dim, T, B)
        log_std = self.log_std.expand_as(head)
        return restore_leading_dims((head, log_std, value), lead_dim, T, B)


class DictDqnModel(torch.nn.Module):
    """Q-values of composite observations: an ``ObservationEncoder`` and a Q head (ReLU
    layers ``hidden_sizes``, dueling when ``dueling``).
    ``forward(observation, prev_action, prev_reward) -> q [..., output_size]``."""

    def __init__(
        self,
        observation_shapes: Mapping[str, Sequence[int]],
        output_size: int,
        hidden_sizes: int | Sequence[int] | None = 64,
        dueling: bool = False,
        image_kwargs: Mapping[str, Any] | None = None,
        vector_hidden_sizes: int | Sequence[int] = 64,
    ):
        super().__init__()
        self.encoder = ObservationEncoder(observation_shapes, image_kwargs, vector_hidden_sizes)
        self.head = q_head(self.encoder.output_size, hidden_sizes, output_size, dueling)

    def forward(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        features, lead_dim, T, B = self.encoder(observation)
        return restore_leading_dims(self.head(features), lead_dim, T, B)
