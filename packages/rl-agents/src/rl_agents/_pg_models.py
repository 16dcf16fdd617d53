"""Complete policy-gradient models for Atari (images, discrete actions), MuJoCo-style
(vector observations, continuous actions) and classic-control (vector observations,
discrete actions) tasks, feed-forward and LSTM.

Every ``forward`` accepts inputs with leading dims ``[T, B]``, ``[B]`` or none and returns
outputs with the same leading dims; layers run on one flattened ``[T * B]`` batch (LSTMs on
``[T, B]``). LSTM models take and return ``RnnState(h, c)`` in torch's ``[num_layers, B, H]``
layout (B = 1 without leading dims); ``init_rnn_state=None`` means zeros.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rl_arrays import infer_leading_dims, namedarraytuple, restore_leading_dims, to_onehot

from ._model_components import Conv2dHeadModel, MlpModel, RunningMeanStdModel, layer_sizes
from ._model_utils import lstm_dtype

__all__ = [
    "AtariFfModel",
    "AtariLstmModel",
    "CategoricalFfModel",
    "CategoricalLstmModel",
    "MujocoFfModel",
    "MujocoLstmModel",
    "RnnState",
]

RnnState = namedarraytuple("RnnState", ["h", "c"])
RnnState.__doc__ = "LSTM state: hidden ``h`` and cell ``c``, each [num_layers, B, H]."

_ATARI_CONV = dict(channels=[16, 32], kernel_sizes=[8, 4], strides=[4, 2], paddings=[0, 1])


def atari_conv(
    image_shape: Sequence[int],
    fc_sizes: int | Sequence[int] | None,
    use_maxpool: bool,
    channels: Sequence[int] | None,
    kernel_sizes: Sequence[int] | None,
    strides: Sequence[int] | None,
    paddings: Sequence[int] | None,
    defaults: dict[str, list[int]] = _ATARI_CONV,
) -> Conv2dHeadModel:
    """The conv torso + fully connected layer(s) (with nonlinearity, when ``fc_sizes``) of
    the Atari models; the conv settings not given come from ``defaults``."""
    return Conv2dHeadModel(
        image_shape=image_shape,
        channels=defaults["channels"] if channels is None else channels,
        kernel_sizes=defaults["kernel_sizes"] if kernel_sizes is None else kernel_sizes,
        strides=defaults["strides"] if strides is None else strides,
        paddings=defaults["paddings"] if paddings is None else paddings,
        use_maxpool=use_maxpool,
        hidden_sizes=fc_sizes,
    )


def scaled_images(image: torch.Tensor, T: int, B: int, img_shape: tuple[int, ...]) -> torch.Tensor:
    """uint8 frames ``[T, B] + img_shape`` as one float32 batch ``[T * B] + img_shape`` in
    [0, 1] (a new tensor; the input is kept), channels-last as the conv torso runs: laid out
    while still uint8, a quarter of the bytes to move, then converted and scaled in place."""
    frames = image.reshape(T * B, *img_shape).contiguous(memory_format=torch.channels_last)
    return frames.to(torch.float32, copy=True).mul_(1.0 / 255)


# SB3's orthogonal initialisation (from OpenAI baselines): hidden layers with gain sqrt(2),
# the policy's output layer 0.01 (a near-uniform first policy), the value's 1; biases 0.
HIDDEN_GAIN, POLICY_GAIN, VALUE_GAIN = math.sqrt(2), 0.01, 1.0


@torch.no_grad()
def orthogonal_init_(module: torch.nn.Module, gain: float) -> None:
    """Orthogonal weights scaled by ``gain`` and zero biases for every linear and conv
    layer in ``module`` (drawn contiguous: the conv torso keeps channels-last weights)."""
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear | torch.nn.Conv2d):
            weight = torch.empty(layer.weight.shape, dtype=layer.weight.dtype)
            layer.weight.copy_(torch.nn.init.orthogonal_(weight, gain))
            if layer.bias is not None:
                layer.bias.zero_()


def rnn_state_tuple(init_rnn_state: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    if init_rnn_state is None:
        return None
    h, c = init_rnn_state
    return h, c


# On the CPU, from this many rows the pair runs as two MLPs, one matrix product per member and
# layer: there the pair's batched product is the slower one (by 7 % at [256, 128, 64], 7 x at
# a one-column output layer); below it, half the operations is the larger saving.
_CPU_PER_MEMBER_ROWS = 1024
# Floats of the pair's widest activations per chunk (4 MB): small enough to stay in the CPU's
# cache from a layer to the next, large enough that the matrix products run at full speed.
_CPU_CHUNK_FLOATS = 2**20


def _cpu_chunk_rows(widest: int) -> int:
    """Rows per chunk for a twin MLP whose widest layer has ``widest`` units: on the CPU a
    layer's elementwise work (bias, nonlinearity and their gradients) is bound by memory
    traffic; at [256, 128, 64] on 24k rows, forward and backward run 1.4 x faster when it
    stays in the cache."""
    return max(1, _CPU_CHUNK_FLOATS // (2 * widest))


_Pair = tuple[torch.Tensor, ...]  # a layer's weights (or biases) of the two members


class _TwinMlp(torch.nn.Module):
    """Two MLPs with the same hidden sizes on the same input (a policy and a value function),
    evaluated as one: each layer is one batched matrix product over the pair, half the
    operations of two separate MLPs forward, backward and in the optimizer step. The two
    members' parameters are independent, each initialised as ``torch.nn.Linear``; the smaller
    output is padded to the larger inside (the padding gets no gradient).

    ``forward(x [N, input_size]) -> (first [N, output_sizes[0]], second [N, output_sizes[1]])``.
    On the CPU, from ``_CPU_PER_MEMBER_ROWS`` rows on, it runs member by member in chunks of
    ``chunk_rows`` rows that stay in the cache (``_cpu_chunk_rows``), with the same outputs
    and the same gradients.
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int],
        output_sizes: tuple[int, int],
        nonlinearity: type[torch.nn.Module],
    ):
        super().__init__()
        sizes = [input_size, *layer_sizes("hidden_sizes", hidden_sizes), max(output_sizes)]
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1 / math.sqrt(fan_in)  # torch.nn.Linear's default initialisation
            self.weights.append(torch.nn.Parameter(torch.empty(2, fan_in, fan_out)))
            self.biases.append(torch.nn.Parameter(torch.empty(2, 1, fan_out)))
            torch.nn.init.uniform_(self.weights[-1], -bound, bound)
            torch.nn.init.uniform_(self.biases[-1], -bound, bound)
        self.nonlinearity = nonlinearity()
        self.output_sizes = output_sizes
        self.chunk_rows = _cpu_chunk_rows(max(sizes))

    @torch.no_grad()
    def orthogonal_(self, output_gains: tuple[float, float]) -> None:
        """``orthogonal_init_`` of each member: hidden layers with ``HIDDEN_GAIN``, the output
        layers with ``output_gains`` (first member's, second's)."""
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            for member in range(2):
                gain = output_gains[member] if i == last else HIDDEN_GAIN
                torch.nn.init.orthogonal_(weight[member], gain)
            bias.zero_()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.is_cpu and x.shape[0] >= _CPU_PER_MEMBER_ROWS:
            return self._members_in_chunks(x)
        h = x.expand(2, *x.shape)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(bias, h, weight)
            if i < last:
                h = self.nonlinearity(h)
        return h[0, :, : self.output_sizes[0]], h[1, :, : self.output_sizes[1]]

    def _members_in_chunks(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` as two MLPs on chunks of ``chunk_rows`` rows, on views of the pair's
        parameters (their gradients summed over the chunks)."""
        layers = [
            (weight.unbind(0), bias.unbind(0))
            for weight, bias in zip(self.weights, self.biases, strict=True)
        ]
        chunks = x.split(self.chunk_rows)
        first = [self._member_forward(chunk, layers, 0) for chunk in chunks]
        second = [self._member_forward(chunk, layers, 1) for chunk in chunks]
        return torch.cat(first), torch.cat(second)

    def member_grads(self, member: int) -> list[torch.Tensor]:
        """The gradients of member ``member``'s weights and biases, as views of the pair's
        (scaling them in place scales that member's alone)."""
        return [p.grad[member] for p in (*self.weights, *self.biases) if p.grad is not None]

    def _member_forward(
        self, x: torch.Tensor, layers: list[tuple[_Pair, _Pair]], member: int
    ) -> torch.Tensor:
        """One member's MLP on ``x``; ``layers``: each layer's (weights, biases) per member."""
        h = x
        last = len(layers) - 1
        for i, (weights, biases) in enumerate(layers):
            h = torch.addmm(biases[member], h, weights[member])
            if i < last:
                h = self.nonlinearity(h)
        return h[:, : self.output_sizes[member]]


class VectorObservationModel(torch.nn.Module):
    """Observation handling shared by the models of vector observations, including the optional
    normalisation by running statistics in ``obs_rms`` (buffers, changed only by
    ``update_obs_rms``)."""

    def _init_observation(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        normalize_observation: bool,
        norm_obs_clip: float,
        norm_obs_var_clip: float | None,
    ) -> int:
        observation_shape = tuple(int(s) for s in observation_shape)
        if isinstance(action_size, bool) or not isinstance(action_size, int) or action_size < 1:
            raise ValueError(f"the action size must be a positive int, got {action_size!r}")
        self._obs_ndim = len(observation_shape)
        self._action_size = action_size
        self.normalize_observation = bool(normalize_observation)
        if self.normalize_observation:
            if not norm_obs_clip > 0:
                raise ValueError(f"norm_obs_clip must be positive, got {norm_obs_clip!r}")
            self.obs_rms = RunningMeanStdModel(observation_shape)
            self.norm_obs_clip = norm_obs_clip
            self.norm_obs_var_clip = norm_obs_var_clip
        return math.prod(observation_shape)

    def _flat_observation(
        self, observation: torch.Tensor, T: int, B: int, dtype: torch.dtype
    ) -> torch.Tensor:
        """[T * B, obs_size] observations of ``dtype``, standardised when normalising."""
        observation = observation.to(dtype)
        if self.normalize_observation:
            var = self.obs_rms.var
            if self.norm_obs_var_clip is not None:
                var = torch.clamp(var, min=self.norm_obs_var_clip)
            observation = (observation - self.obs_rms.mean) * torch.rsqrt(var)
            observation = torch.clamp(observation, -self.norm_obs_clip, self.norm_obs_clip)
        return observation.reshape(T * B, -1)

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Fold a batch of observations (any leading dims) into the normalisation
        statistics, the only thing that changes them (a no-op without normalisation)."""
        if self.normalize_observation:
            self.obs_rms.update(observation)

    def _init_lstm(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int],
        lstm_size: int,
        nonlinearity: type[torch.nn.Module],
    ) -> None:
        """An MLP (none without hidden sizes) into an LSTM that also reads the previous
        action [action size] and reward."""
        if hidden_sizes:
            self.mlp: torch.nn.Module = MlpModel(input_size, hidden_sizes, None, nonlinearity)
            features = self.mlp.output_size
        else:
            self.mlp = torch.nn.Identity()
            features = input_size
        self.lstm = torch.nn.LSTM(features + self._action_size + 1, lstm_size)

    def _lstm_outputs(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple[int, int, int, torch.Tensor, Any]:
        """``(lead_dim, T, B, LSTM outputs [T * B, lstm_size], next RnnState)``."""
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        dtype = lstm_dtype(self.lstm)
        features = self.mlp(self._flat_observation(observation, T, B, dtype))
        lstm_input = torch.cat(
            [
                features.reshape(T, B, -1),
                prev_action.to(dtype).reshape(T, B, self._action_size),
                prev_reward.to(dtype).reshape(T, B, 1),
            ],
            dim=2,
        )
        lstm_out, (h, c) = self.lstm(lstm_input, rnn_state_tuple(init_rnn_state))
        return lead_dim, T, B, lstm_out.reshape(T * B, -1), RnnState(h=h, c=c)


class AtariFfModel(torch.nn.Module):
    """Conv torso + fully connected layer, then a softmax policy head and a value head.

    ``forward(image, prev_action, prev_reward) -> (pi, value)``: ``image`` uint8 [..., C, H, W]
    scaled by 1/255 inside (storing frames as bytes keeps sample buffers small); ``pi``
    [..., output_size] action probabilities, ``value`` [...]. prev_action and prev_reward are
    not used. Defaults: 16 8x8 stride-4 then 32 4x4 stride-2 (padding 1) filters, fc 512.
    ``orthogonal_init``: SB3's initialisation (``ortho_init``, on in the zoo's Atari PPO)
    instead of torch's default.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] = 512,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
        orthogonal_init: bool = False,
    ):
        super().__init__()
        self.conv = atari_conv(
            image_shape, fc_sizes, use_maxpool, channels, kernel_sizes, strides, paddings
        )
        self.pi = torch.nn.Linear(self.conv.output_size, output_size)
        self.value = torch.nn.Linear(self.conv.output_size, 1)
        if orthogonal_init:
            orthogonal_init_(self.conv, HIDDEN_GAIN)
            orthogonal_init_(self.pi, POLICY_GAIN)
            orthogonal_init_(self.value, VALUE_GAIN)

    def forward(
        self, image: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lead_dim, T, B, img_shape = infer_leading_dims(image, 3)
        features = self.conv(scaled_images(image, T, B, img_shape))
        pi = F.softmax(self.pi(features), dim=-1)
        value = self.value(features).squeeze(-1)
        return restore_leading_dims((pi, value), lead_dim, T, B)


class AtariLstmModel(torch.nn.Module):
    """Conv torso + fully connected layer into an LSTM, then policy and value heads.

    ``forward(image, prev_action, prev_reward, init_rnn_state) -> (pi, value,
    next_rnn_state)``. The LSTM input at each step is the image features, the previous
    action one-hot (integer indexes are one-hot encoded here; float input is taken as
    already one-hot) and the previous reward.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] = 512,
        lstm_size: int = 512,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
    ):
        super().__init__()
        self.output_size = output_size
        self.conv = atari_conv(
            image_shape, fc_sizes, use_maxpool, channels, kernel_sizes, strides, paddings
        )
        self.lstm = torch.nn.LSTM(self.conv.output_size + output_size + 1, lstm_size)
        self.pi = torch.nn.Linear(lstm_size, output_size)
        self.value = torch.nn.Linear(lstm_size, 1)

    def forward(
        self,
        image: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        lead_dim, T, B, img_shape = infer_leading_dims(image, 3)
        features = self.conv(scaled_images(image, T, B, img_shape))
        if not prev_action.is_floating_point():
            prev_action = to_onehot(prev_action, self.output_size)
        lstm_input = torch.cat(
            [
                features.reshape(T, B, -1),
                prev_action.to(features.dtype).reshape(T, B, self.output_size),
                prev_reward.to(features.dtype).reshape(T, B, 1),
            ],
            dim=2,
        )
        lstm_out, (h, c) = self.lstm(lstm_input, rnn_state_tuple(init_rnn_state))
        lstm_flat = lstm_out.reshape(T * B, -1)
        pi = F.softmax(self.pi(lstm_flat), dim=-1)
        value = self.value(lstm_flat).squeeze(-1)
        pi, value = restore_leading_dims((pi, value), lead_dim, T, B)
        return pi, value, RnnState(h=h, c=c)


class MujocoFfModel(VectorObservationModel):
    """An MLP for the action means, a state-independent learned ``log_std`` parameter, and
    a separate MLP for the state value (the two MLPs evaluated together, as one batched MLP).

    ``forward(observation, prev_action, prev_reward) -> (mu, log_std, value)``, mu and
    log_std [..., action_size], value [...]. With ``normalize_observation`` the observation
    is standardised by running statistics (variance floored at ``norm_obs_var_clip``,
    result clipped to ``[-norm_obs_clip, norm_obs_clip]``); the statistics are buffers
    changed only by ``update_obs_rms``. ``mu_nonlinearity`` (default Tanh, None for none)
    follows the mean MLP's last layer. ``orthogonal_init``: SB3's initialisation (its
    ``ortho_init``) instead of torch's default.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: int | Sequence[int] | None = None,
        hidden_nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        mu_nonlinearity: type[torch.nn.Module] | None = torch.nn.Tanh,
        init_log_std: float = 0.0,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
        orthogonal_init: bool = False,
    ):
        super().__init__()
        input_size = self._init_observation(
            observation_shape, action_size, normalize_observation, norm_obs_clip, norm_obs_var_clip
        )
        hidden_sizes = [64, 64] if hidden_sizes is None else hidden_sizes
        self.mlps = _TwinMlp(input_size, hidden_sizes, (action_size, 1), hidden_nonlinearity)
        if orthogonal_init:
            self.mlps.orthogonal_((POLICY_GAIN, VALUE_GAIN))
        self.mu_nonlinearity = None if mu_nonlinearity is None else mu_nonlinearity()
        self.log_std = torch.nn.Parameter(torch.full((action_size,), float(init_log_std)))

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        obs_flat = self._flat_observation(observation, T, B, self.log_std.dtype)
        mu, value = self.mlps(obs_flat)
        if self.mu_nonlinearity is not None:
            mu = self.mu_nonlinearity(mu)
        log_std = self.log_std.expand(T * B, -1)
        return restore_leading_dims((mu, log_std, value.squeeze(-1)), lead_dim, T, B)

    def gradient_groups(self) -> list[list[torch.Tensor]]:
        """The policy's gradients (its MLP's and ``log_std``'s) and the value function's."""
        log_std = [] if self.log_std.grad is None else [self.log_std.grad]
        return [self.mlps.member_grads(0) + log_std, self.mlps.member_grads(1)]


class MujocoLstmModel(VectorObservationModel):
    """An MLP into an LSTM, with one linear head for the action means, log_std and value.

    ``forward(observation, prev_action, prev_reward, init_rnn_state) -> (mu, log_std, value,
    next_rnn_state)``. The LSTM input at each step is the MLP features, the previous action
    [..., action_size] and the previous reward. Observation normalisation as in
    ``MujocoFfModel``.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: int | Sequence[int] | None = None,
        lstm_size: int = 256,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__()
        input_size = self._init_observation(
            observation_shape, action_size, normalize_observation, norm_obs_clip, norm_obs_var_clip
        )
        self._init_lstm(
            input_size,
            [256, 256] if hidden_sizes is None else hidden_sizes,
            lstm_size,
            nonlinearity,
        )
        self.head = torch.nn.Linear(lstm_size, 2 * action_size + 1)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        lead_dim, T, B, lstm_flat, rnn_state = self._lstm_outputs(
            observation, prev_action, prev_reward, init_rnn_state
        )
        out = self.head(lstm_flat)
        A = self._action_size
        mu, log_std, value = out[:, :A], out[:, A : 2 * A], out[:, -1]
        mu, log_std, value = restore_leading_dims((mu, log_std, value), lead_dim, T, B)
        return mu, log_std, value, rnn_state


class CategoricalFfModel(VectorObservationModel):
    """Separate MLPs for the action probabilities and the state value (evaluated together,
    as one batched MLP), for vector observations and discrete actions (classic control:
    CartPole, Acrobot ...).

    ``forward(observation, prev_action, prev_reward) -> (pi, value)``, pi [..., output_size]
    action probabilities, value [...]. Observation normalisation and ``orthogonal_init`` as
    in ``MujocoFfModel``.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        hidden_sizes: int | Sequence[int] | None = None,
        hidden_nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
        orthogonal_init: bool = False,
    ):
        super().__init__()
        input_size = self._init_observation(
            observation_shape, output_size, normalize_observation, norm_obs_clip, norm_obs_var_clip
        )
        hidden_sizes = [64, 64] if hidden_sizes is None else hidden_sizes
        self.mlps = _TwinMlp(input_size, hidden_sizes, (output_size, 1), hidden_nonlinearity)
        if orthogonal_init:
            self.mlps.orthogonal_((POLICY_GAIN, VALUE_GAIN))

    def forward(
        self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        dtype = self.mlps.weights[0].dtype
        logits, value = self.mlps(self._flat_observation(observation, T, B, dtype))
        pi = F.softmax(logits, dim=-1)
        return restore_leading_dims((pi, value.squeeze(-1)), lead_dim, T, B)

    def gradient_groups(self) -> list[list[torch.Tensor]]:
        """The policy's gradients and the value function's."""
        return [self.mlps.member_grads(0), self.mlps.member_grads(1)]


class CategoricalLstmModel(VectorObservationModel):
    """An MLP into an LSTM, then policy and value heads, for vector observations and
    discrete actions; for tasks that need memory (e.g. CartPole with the velocities hidden).

    ``forward(observation, prev_action, prev_reward, init_rnn_state) -> (pi, value,
    next_rnn_state)``. The LSTM input at each step is the MLP features, the previous action
    one-hot (integer indexes are encoded here) and the previous reward.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        hidden_sizes: int | Sequence[int] | None = None,
        lstm_size: int = 64,
        nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__()
        input_size = self._init_observation(
            observation_shape, output_size, normalize_observation, norm_obs_clip, norm_obs_var_clip
        )
        self._init_lstm(
            input_size, [64] if hidden_sizes is None else hidden_sizes, lstm_size, nonlinearity
        )
        self.pi = torch.nn.Linear(lstm_size, output_size)
        self.value = torch.nn.Linear(lstm_size, 1)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        if not prev_action.is_floating_point():
            prev_action = to_onehot(prev_action, self._action_size)
        lead_dim, T, B, lstm_flat, rnn_state = self._lstm_outputs(
            observation, prev_action, prev_reward, init_rnn_state
        )
        pi = F.softmax(self.pi(lstm_flat), dim=-1)
        value = self.value(lstm_flat).squeeze(-1)
        pi, value = restore_leading_dims((pi, value), lead_dim, T, B)
        return pi, value, rnn_state
