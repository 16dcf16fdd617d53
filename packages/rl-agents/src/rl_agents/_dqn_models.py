"""Q-value models for the DQN family: heads (dueling, distributional) and complete models for
Atari (images) and vector observations, feed-forward and recurrent (R2D1).

Complete models take ``[]``, ``[B]`` or ``[T, B]`` leading dims and return the same, as the
policy-gradient models do; recurrent ones take and return ``RnnState(h, c)`` in torch's
``[num_layers, B, H]`` layout (``None`` means zeros). Heads take one batch dim.
Distributional models return logits [..., A, n_atoms]; the agent turns them into
probabilities (softmax over atoms), so a loss may use ``log_softmax`` on them if it wants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rl_arrays import as_count, infer_leading_dims, restore_leading_dims, to_onehot

from ._model_components import MlpModel
from ._model_utils import lstm_dtype, scale_grad
from ._pg_models import (
    RnnState,
    VectorObservationModel,
    atari_conv,
    rnn_state_tuple,
    scaled_images,
)

__all__ = [
    "AtariCatDqnModel",
    "AtariDqnModel",
    "AtariR2d1Model",
    "CatDqnMlpModel",
    "DistributionalDuelingHeadModel",
    "DistributionalHeadModel",
    "DqnMlpModel",
    "DuelingHeadModel",
    "R2d1MlpModel",
]

# The Nature-DQN conv torso, with rlpyt's paddings.
_DQN_CONV = dict(
    channels=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1], paddings=[0, 1, 1]
)

# rlpyt's default: the two dueling streams together send sqrt(2) times the gradient of one
# stream into the shared layers; 1/sqrt(2) brings it back to one stream's size.
_DUELING_GRAD_SCALE = 2 ** (-1 / 2)


def _hidden_mlp(
    input_size: int, hidden_sizes: int | Sequence[int] | None
) -> tuple[torch.nn.Module, int]:
    """ReLU hidden layers (an identity when there are none) and their output size."""
    if not hidden_sizes:
        return torch.nn.Identity(), input_size
    mlp = MlpModel(input_size, hidden_sizes)
    return mlp, mlp.output_size


class DuelingHeadModel(torch.nn.Module):
    """Dueling Q head: ``Q = V + (A - mean(A))`` from a value stream and an advantage stream,
    each an MLP of ``hidden_sizes`` on the input. The advantages share one bias (it cancels
    in Q; kept so ``advantage`` means what rlpyt's does). The gradient into the input is
    scaled by ``grad_scale``.

    ``forward(input [B, input_size]) -> q [B, output_size]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int] | None,
        output_size: int,
        grad_scale: float = _DUELING_GRAD_SCALE,
    ):
        super().__init__()
        self.advantage_hidden, last = _hidden_mlp(input_size, hidden_sizes)
        self.advantage_out = torch.nn.Linear(last, output_size, bias=False)
        self.advantage_bias = torch.nn.Parameter(torch.zeros(1))
        self.value = MlpModel(input_size, hidden_sizes, output_size=1)
        self.grad_scale = grad_scale

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = scale_grad(input, self.grad_scale)
        advantage = self.advantage(x)
        return self.value(x) + (advantage - advantage.mean(dim=-1, keepdim=True))

    def advantage(self, input: torch.Tensor) -> torch.Tensor:
        """The advantages with their shared bias, [B, output_size] (no gradient scaling)."""
        return self.advantage_out(self.advantage_hidden(input)) + self.advantage_bias


class DistributionalHeadModel(torch.nn.Module):
    """An MLP whose output is reshaped to logits [B, output_size, n_atoms]."""

    def __init__(
        self,
        input_size: int,
        layer_sizes: int | Sequence[int] | None,
        output_size: int,
        n_atoms: int,
    ):
        super().__init__()
        self.mlp = MlpModel(input_size, layer_sizes, output_size * n_atoms)
        self.output_size, self.n_atoms = output_size, n_atoms

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.mlp(input).reshape(*input.shape[:-1], self.output_size, self.n_atoms)


class DistributionalDuelingHeadModel(torch.nn.Module):
    """``DuelingHeadModel`` for distributions: value [B, 1, n_atoms] plus advantages
    [B, output_size, n_atoms] minus their mean over actions, as logits (one shared bias
    per atom on the advantages)."""

    def __init__(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int] | None,
        output_size: int,
        n_atoms: int,
        grad_scale: float = _DUELING_GRAD_SCALE,
    ):
        super().__init__()
        self.advantage_hidden, last = _hidden_mlp(input_size, hidden_sizes)
        self.advantage_out = torch.nn.Linear(last, output_size * n_atoms, bias=False)
        self.advantage_bias = torch.nn.Parameter(torch.zeros(n_atoms))
        self.value = MlpModel(input_size, hidden_sizes, output_size=n_atoms)
        self.grad_scale = grad_scale
        self.output_size, self.n_atoms = output_size, n_atoms

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = scale_grad(input, self.grad_scale)
        advantage = self.advantage(x)
        value = self.value(x).unsqueeze(-2)
        return value + (advantage - advantage.mean(dim=-2, keepdim=True))

    def advantage(self, input: torch.Tensor) -> torch.Tensor:
        """The advantages with their shared bias, [B, output_size, n_atoms]."""
        x = self.advantage_out(self.advantage_hidden(input))
        return x.reshape(*x.shape[:-1], self.output_size, self.n_atoms) + self.advantage_bias


def q_head(
    input_size: int,
    hidden_sizes: int | Sequence[int] | None,
    output_size: int,
    dueling: bool,
    n_atoms: int | None = None,
) -> torch.nn.Module:
    """The Q head: plain or dueling, scalar (n_atoms None) or distributional."""
    if n_atoms is None:
        if dueling:
            return DuelingHeadModel(input_size, hidden_sizes, output_size)
        return MlpModel(input_size, hidden_sizes, output_size)
    n_atoms = as_count("n_atoms", n_atoms, 2, expected="an int >= 2")  # 51.0 too
    if dueling:
        return DistributionalDuelingHeadModel(input_size, hidden_sizes, output_size, n_atoms)
    return DistributionalHeadModel(input_size, hidden_sizes, output_size, n_atoms)


def _onehot_prev_action(prev_action: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Integer actions one-hot encoded; float input is taken as already one-hot."""
    if not prev_action.is_floating_point():
        prev_action = to_onehot(prev_action, n)
    return prev_action.to(dtype)


class _AtariQModel(torch.nn.Module):
    """Conv torso, then a Q head on the flattened features (``fc_sizes`` are the head's
    hidden layers, in each stream when dueling)."""

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        n_atoms: int | None,
        fc_sizes: int | Sequence[int],
        dueling: bool,
        use_maxpool: bool,
        channels: Sequence[int] | None,
        kernel_sizes: Sequence[int] | None,
        strides: Sequence[int] | None,
        paddings: Sequence[int] | None,
    ):
        super().__init__()
        self.conv = atari_conv(
            image_shape, None, use_maxpool, channels, kernel_sizes, strides, paddings, _DQN_CONV
        )
        self.head = q_head(self.conv.output_size, fc_sizes, output_size, dueling, n_atoms)
        self.dueling = bool(dueling)

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> torch.Tensor:
        lead_dim, T, B, img_shape = infer_leading_dims(observation, 3)
        features = self.conv(scaled_images(observation, T, B, img_shape))
        return restore_leading_dims(self.head(features), lead_dim, T, B)


class AtariDqnModel(_AtariQModel):
    """Nature-DQN network: 32 8x8 stride-4, 64 4x4 stride-2, 64 3x3 stride-1 filters
    (paddings 0, 1, 1), then fc 512 and the Q-values (dueling streams with ``dueling``).

    ``forward(observation, prev_action, prev_reward) -> q [..., output_size]``; uint8 images
    [..., C, H, W] are scaled by 1/255 inside (frames stay bytes in the replay buffer).
    prev_action and prev_reward are not used.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] = 512,
        dueling: bool = False,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
    ):
        super().__init__(
            image_shape,
            output_size,
            None,
            fc_sizes,
            dueling,
            use_maxpool,
            channels,
            kernel_sizes,
            strides,
            paddings,
        )


class AtariCatDqnModel(_AtariQModel):
    """``AtariDqnModel`` with ``n_atoms`` outputs per action: ``forward(...) -> logits
    [..., output_size, n_atoms]`` of each action's return distribution."""

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        n_atoms: int = 51,
        fc_sizes: int | Sequence[int] = 512,
        dueling: bool = False,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
    ):
        super().__init__(
            image_shape,
            output_size,
            n_atoms,
            fc_sizes,
            dueling,
            use_maxpool,
            channels,
            kernel_sizes,
            strides,
            paddings,
        )


class AtariR2d1Model(torch.nn.Module):
    """Conv torso + fc layer into an LSTM that also reads the previous action (one-hot) and
    reward, then a Q head of ``head_size`` hidden units (dueling streams with ``dueling``).

    ``forward(observation, prev_action, prev_reward, init_rnn_state) -> (q [...,
    output_size], RnnState(h, c))``; integer prev_action is one-hot encoded here, float
    input taken as already one-hot.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_size: int = 512,
        lstm_size: int = 512,
        head_size: int = 512,
        dueling: bool = False,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
    ):
        super().__init__()
        self.output_size = output_size
        self.conv = atari_conv(
            image_shape, fc_size, use_maxpool, channels, kernel_sizes, strides, paddings, _DQN_CONV
        )
        self.lstm = torch.nn.LSTM(self.conv.output_size + output_size + 1, lstm_size)
        self.head = q_head(lstm_size, head_size, output_size, dueling)
        self.dueling = bool(dueling)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple[torch.Tensor, Any]:
        lead_dim, T, B, img_shape = infer_leading_dims(observation, 3)
        features = self.conv(scaled_images(observation, T, B, img_shape))
        lstm_input = torch.cat(
            [
                features.reshape(T, B, -1),
                _onehot_prev_action(prev_action, self.output_size, features.dtype).reshape(
                    T, B, self.output_size
                ),
                prev_reward.to(features.dtype).reshape(T, B, 1),
            ],
            dim=2,
        )
        lstm_out, (h, c) = self.lstm(lstm_input, rnn_state_tuple(init_rnn_state))
        q = self.head(lstm_out.reshape(T * B, -1))
        return restore_leading_dims(q, lead_dim, T, B), RnnState(h=h, c=c)


class _MlpQModel(VectorObservationModel):
    """A Q head (its hidden layers are the whole MLP) on flattened vector observations."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        n_atoms: int | None,
        hidden_sizes: int | Sequence[int] | None,
        dueling: bool,
    ):
        super().__init__()
        input_size = self._init_observation(observation_shape, output_size, False, 10.0, None)
        hidden_sizes = [64, 64] if hidden_sizes is None else hidden_sizes
        self.head = q_head(input_size, hidden_sizes, output_size, dueling, n_atoms)
        self.dueling = bool(dueling)

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> torch.Tensor:
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        dtype = next(self.head.parameters()).dtype
        q = self.head(self._flat_observation(observation, T, B, dtype))
        return restore_leading_dims(q, lead_dim, T, B)


class DqnMlpModel(_MlpQModel):
    """Q-values from an MLP on vector observations (CartPole and the like).

    ``forward(observation, prev_action, prev_reward) -> q [..., output_size]``; ReLU hidden
    layers ``hidden_sizes`` (default [64, 64]), in each stream when ``dueling``.
    prev_action and prev_reward are not used.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        hidden_sizes: int | Sequence[int] | None = None,
        dueling: bool = False,
    ):
        super().__init__(observation_shape, output_size, None, hidden_sizes, dueling)


class CatDqnMlpModel(_MlpQModel):
    """``DqnMlpModel`` with ``n_atoms`` outputs per action: ``forward(...) -> logits
    [..., output_size, n_atoms]``."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        n_atoms: int = 51,
        hidden_sizes: int | Sequence[int] | None = None,
        dueling: bool = False,
    ):
        super().__init__(observation_shape, output_size, n_atoms, hidden_sizes, dueling)


class R2d1MlpModel(VectorObservationModel):
    """An MLP (``hidden_sizes``, default [64]; none when empty) into an LSTM that also reads
    the previous action one-hot and reward, then a Q head of ``head_size`` hidden units
    (dueling streams with ``dueling``).

    ``forward(observation, prev_action, prev_reward, init_rnn_state) -> (q [...,
    output_size], RnnState(h, c))``; integer prev_action is one-hot encoded here.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        hidden_sizes: int | Sequence[int] | None = None,
        lstm_size: int = 64,
        head_size: int = 64,
        dueling: bool = False,
    ):
        super().__init__()
        input_size = self._init_observation(observation_shape, output_size, False, 10.0, None)
        hidden_sizes = [64] if hidden_sizes is None else hidden_sizes
        self._init_lstm(input_size, hidden_sizes, lstm_size, torch.nn.ReLU)
        self.head = q_head(lstm_size, head_size, output_size, dueling)
        self.dueling = bool(dueling)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple[torch.Tensor, Any]:
        dtype = lstm_dtype(self.lstm)
        prev_action = _onehot_prev_action(prev_action, self._action_size, dtype)
        lead_dim, T, B, lstm_flat, rnn_state = self._lstm_outputs(
            observation, prev_action, prev_reward, init_rnn_state
        )
        return restore_leading_dims(self.head(lstm_flat), lead_dim, T, B), rnn_state
