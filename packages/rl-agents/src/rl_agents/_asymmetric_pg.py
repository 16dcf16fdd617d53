"""Asymmetric actor-critic: the policy and the value function read different observations.

The critic may see privileged information (a simulator's full state, say) that the deployed
policy will not have, as rsl_rl's ``critic_observations``; it only shapes the training signal.
An observation is any object with fields ``actor`` and ``critic`` (the same leading dims), e.g.
rl-samplers' ``ActorCriticObservation``; nothing here imports rl-samplers. The actor and the
critic share no weights or statistics. Details: the package README, "Asymmetric models".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rl_arrays import (
    EnvSpaces,
    as_count,
    infer_leading_dims,
    namedarraytuple,
    restore_leading_dims,
    to_onehot,
)

from ._base_agent import ModelFactory
from ._model_components import MlpModel, RunningMeanStdModel
from ._model_kwargs import action_size_of, n_actions
from ._pg_agents import (
    CategoricalPgAgent,
    GaussianPgAgent,
    PgAgent,
    RecurrentCategoricalPgAgent,
    RecurrentGaussianPgAgent,
)
from ._policies import agent_inference_policy

__all__ = [
    "ActorCriticRnnState",
    "AsymmetricCategoricalPgAgent",
    "AsymmetricFfModel",
    "AsymmetricGaussianPgAgent",
    "AsymmetricLstmModel",
    "AsymmetricRecurrentCategoricalPgAgent",
    "AsymmetricRecurrentGaussianPgAgent",
]

ActorCriticRnnState = namedarraytuple(
    "ActorCriticRnnState", ["actor_h", "actor_c", "critic_h", "critic_c"]
)
ActorCriticRnnState.__doc__ = (
    "The recurrent state of an asymmetric LSTM model: the actor's LSTM hidden and cell "
    "state and the critic's, each [num_layers, B, H] (H may differ between the two)."
)

_POLICIES = ("categorical", "gaussian")


def _observation_parts(observation: Any, model: str) -> tuple[torch.Tensor, torch.Tensor]:
    actor = getattr(observation, "actor", None)
    critic = getattr(observation, "critic", None)
    if actor is None or critic is None:
        raise TypeError(
            f"{model} needs observations with fields actor and critic (e.g. rl_samplers' "
            f"ActorCriticObservation), got {type(observation).__name__}"
        )
    return actor, critic


class AsymmetricBranch(torch.nn.Module):
    """One side of an asymmetric model (the actor or the critic): optional normalisation of
    its observation, an MLP torso (none without hidden sizes), an optional LSTM that also
    reads the previous action and reward, and a linear head."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        nonlinearity: type[torch.nn.Module],
        output_size: int,
        normalize: bool,
        norm_obs_clip: float,
        norm_obs_var_clip: float | None,
        lstm_size: int | None = None,
        lstm_extra_inputs: int = 0,
    ):
        super().__init__()
        shape = tuple(int(s) for s in observation_shape)
        self.obs_ndim = len(shape)
        self.normalize = bool(normalize)
        if self.normalize:
            self.obs_rms = RunningMeanStdModel(shape)
            self.norm_obs_clip, self.norm_obs_var_clip = norm_obs_clip, norm_obs_var_clip
        input_size = math.prod(shape)
        if hidden_sizes:
            self.mlp: torch.nn.Module = MlpModel(input_size, hidden_sizes, None, nonlinearity)
            features = self.mlp.output_size
        else:
            self.mlp = torch.nn.Identity()
            features = input_size
        self.lstm = None
        if lstm_size is not None:
            self.lstm = torch.nn.LSTM(features + lstm_extra_inputs, lstm_size)
            features = lstm_size
        self.head = torch.nn.Linear(features, output_size)

    def features(self, observation: torch.Tensor, T: int, B: int) -> torch.Tensor:
        """The torso's output ``[T * B, features]`` (observation standardised first when
        normalising: variance floored at ``norm_obs_var_clip``, result clipped)."""
        observation = observation.to(self.head.weight.dtype)
        if self.normalize:
            var = self.obs_rms.var
            if self.norm_obs_var_clip is not None:
                var = torch.clamp(var, min=self.norm_obs_var_clip)
            observation = (observation - self.obs_rms.mean) * torch.rsqrt(var)
            observation = torch.clamp(observation, -self.norm_obs_clip, self.norm_obs_clip)
        return self.mlp(observation.reshape(T * B, -1))

    def recurrent(
        self,
        features: torch.Tensor,
        extra: torch.Tensor,
        T: int,
        B: int,
        state: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The LSTM over ``[features, extra]`` (``extra [T, B, n]``) from ``state`` ((h, c)
        or None: zeros): ``(outputs [T * B, lstm_size], (h, c))``."""
        assert self.lstm is not None
        lstm_input = torch.cat([features.reshape(T, B, -1), extra], dim=2)
        out, (h, c) = self.lstm(lstm_input, state)
        return out.reshape(T * B, -1), (h, c)


def _check_policy(policy: str, action_size: int) -> None:
    if policy not in _POLICIES:
        raise ValueError(f"policy must be one of {_POLICIES}, got {policy!r}")
    if isinstance(action_size, bool) or not isinstance(action_size, int) or action_size < 1:
        raise ValueError(f"action_size must be a positive int, got {action_size!r}")


class _AsymmetricModel(torch.nn.Module):
    """What the feed-forward and LSTM forms share: the two branches, the policy outputs and
    the normalisation statistics."""

    def _init_branches(
        self,
        actor_observation_shape: Sequence[int],
        critic_observation_shape: Sequence[int],
        action_size: int,
        policy: str,
        hidden_sizes: int | Sequence[int] | None,
        critic_hidden_sizes: int | Sequence[int] | None,
        nonlinearity: type[torch.nn.Module],
        init_log_std: float,
        normalize_observation: bool,
        normalize_critic_observation: bool | None,
        norm_obs_clip: float,
        norm_obs_var_clip: float | None,
        lstm_sizes: tuple[int | None, int | None] = (None, None),
    ) -> None:
        _check_policy(policy, action_size)
        if not norm_obs_clip > 0:
            raise ValueError(f"norm_obs_clip must be positive, got {norm_obs_clip!r}")
        actor_lstm, critic_lstm = (  # 64.0 too
            None if size is None else as_count(name, size, 1, expected="a positive int")
            for name, size in zip(("lstm_size", "critic_lstm_size"), lstm_sizes, strict=True)
        )
        self.policy, self.action_size = policy, action_size
        if normalize_critic_observation is None:
            normalize_critic_observation = normalize_observation
        self.normalize_actor_observation = bool(normalize_observation)
        self.normalize_critic_observation = bool(normalize_critic_observation)
        # Whether any part is normalised: what agents check before offering update_obs_rms.
        self.normalize_observation = (
            self.normalize_actor_observation or self.normalize_critic_observation
        )
        critic_hidden_sizes = hidden_sizes if critic_hidden_sizes is None else critic_hidden_sizes
        extra = action_size + 1 if actor_lstm is not None else 0
        self.actor = AsymmetricBranch(
            actor_observation_shape,
            hidden_sizes,
            nonlinearity,
            action_size,
            self.normalize_actor_observation,
            norm_obs_clip,
            norm_obs_var_clip,
            lstm_size=actor_lstm,
            lstm_extra_inputs=extra,
        )
        self.critic = AsymmetricBranch(
            critic_observation_shape,
            critic_hidden_sizes,
            nonlinearity,
            1,
            self.normalize_critic_observation,
            norm_obs_clip,
            norm_obs_var_clip,
            lstm_size=critic_lstm,
            lstm_extra_inputs=extra,
        )
        if policy == "gaussian":
            self.log_std = torch.nn.Parameter(torch.full((action_size,), float(init_log_std)))

    def _leading_dims(self, observation: Any) -> tuple[torch.Tensor, torch.Tensor, int, int, int]:
        """``(actor part, critic part, lead_dim, T, B)``; both parts must agree."""
        actor, critic = _observation_parts(observation, type(self).__name__)
        lead_dim, T, B, _ = infer_leading_dims(actor, self.actor.obs_ndim)
        critic_dims = infer_leading_dims(critic, self.critic.obs_ndim)[:3]
        if critic_dims != (lead_dim, T, B):
            raise ValueError(
                "the actor and critic observations must have the same leading dims, got "
                f"shapes {tuple(actor.shape)} and {tuple(critic.shape)}"
            )
        return actor, critic, lead_dim, T, B

    def _policy_outputs(self, head: torch.Tensor, value: torch.Tensor) -> tuple:
        """``(pi, value)`` or ``(mu, log_std, value)``, flat ``[T * B, ...]``."""
        value = value.squeeze(-1)
        if self.policy == "categorical":
            return F.softmax(head, dim=-1), value
        return head, self.log_std.expand(head.shape[0], -1), value

    def update_obs_rms(self, observation: Any) -> None:
        """Fold a batch of observations (any leading dims) into the normalisation statistics
        of each part that is normalised (the only thing that changes them)."""
        actor, critic = _observation_parts(observation, type(self).__name__)
        if self.normalize_actor_observation:
            self.actor.obs_rms.update(actor)
        if self.normalize_critic_observation:
            self.critic.obs_rms.update(critic)


class AsymmetricFfModel(_AsymmetricModel):
    """Feed-forward asymmetric actor-critic: an MLP on ``observation.actor`` for the policy,
    a separate MLP on ``observation.critic`` for the state value.

    ``forward(observation, prev_action, prev_reward)`` returns ``(pi, value)`` for
    ``policy="categorical"`` and ``(mu, log_std, value)`` for ``policy="gaussian"``, with the
    observation's leading dims; prev_action and prev_reward are unused. Observation
    normalisation (``normalize_observation``, ``normalize_critic_observation``) changes its
    statistics only in ``update_obs_rms``. Defaults and details: the package README,
    "Asymmetric models".
    """

    def __init__(
        self,
        actor_observation_shape: Sequence[int],
        critic_observation_shape: Sequence[int],
        action_size: int,
        policy: str = "categorical",
        hidden_sizes: int | Sequence[int] | None = None,
        critic_hidden_sizes: int | Sequence[int] | None = None,
        hidden_nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        init_log_std: float = 0.0,
        normalize_observation: bool = False,
        normalize_critic_observation: bool | None = None,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float | None = 1e-6,
    ):
        super().__init__()
        self._init_branches(
            actor_observation_shape,
            critic_observation_shape,
            action_size,
            policy,
            [64, 64] if hidden_sizes is None else hidden_sizes,
            critic_hidden_sizes,
            hidden_nonlinearity,
            init_log_std,
            normalize_observation,
            normalize_critic_observation,
            norm_obs_clip,
            norm_obs_var_clip,
        )

    def forward(self, observation: Any, prev_action: Any, prev_reward: Any) -> tuple:
        actor, critic, lead_dim, T, B = self._leading_dims(observation)
        head = self.actor.head(self.actor.features(actor, T, B))
        value = self.critic.head(self.critic.features(critic, T, B))
        return restore_leading_dims(self._policy_outputs(head, value), lead_dim, T, B)


class AsymmetricLstmModel(_AsymmetricModel):
    """Recurrent asymmetric actor-critic: the actor's MLP into the actor's LSTM, then the
    policy head; the critic's MLP into the critic's own LSTM, then the value head. Each LSTM
    also reads the previous action (integer actions one-hot encoded here) and reward.

    ``forward(observation, prev_action, prev_reward, init_rnn_state)`` returns the outputs
    of ``AsymmetricFfModel`` followed by the next ``ActorCriticRnnState`` (each field
    [num_layers, B, H]); ``init_rnn_state=None`` means zeros for both LSTMs.

    ``hidden_sizes`` defaults to (64,), ``lstm_size`` to 64; ``critic_hidden_sizes`` and
    ``critic_lstm_size`` default to the actor's. Normalisation as in ``AsymmetricFfModel``.
    """

    def __init__(
        self,
        actor_observation_shape: Sequence[int],
        critic_observation_shape: Sequence[int],
        action_size: int,
        policy: str = "categorical",
        hidden_sizes: int | Sequence[int] | None = None,
        critic_hidden_sizes: int | Sequence[int] | None = None,
        lstm_size: int = 64,
        critic_lstm_size: int | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        init_log_std: float = 0.0,
        normalize_observation: bool = False,
        normalize_critic_observation: bool | None = None,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float | None = 1e-6,
    ):
        super().__init__()
        self._init_branches(
            actor_observation_shape,
            critic_observation_shape,
            action_size,
            policy,
            [64] if hidden_sizes is None else hidden_sizes,
            critic_hidden_sizes,
            nonlinearity,
            init_log_std,
            normalize_observation,
            normalize_critic_observation,
            norm_obs_clip,
            norm_obs_var_clip,
            lstm_sizes=(lstm_size, lstm_size if critic_lstm_size is None else critic_lstm_size),
        )

    def forward(
        self,
        observation: Any,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
    ) -> tuple:
        actor, critic, lead_dim, T, B = self._leading_dims(observation)
        dtype = self.actor.head.weight.dtype
        if self.policy == "categorical" and not prev_action.is_floating_point():
            prev_action = to_onehot(prev_action, self.action_size)
        extra = torch.cat(
            [
                prev_action.to(dtype).reshape(T, B, self.action_size),
                prev_reward.to(dtype).reshape(T, B, 1),
            ],
            dim=2,
        )
        actor_state = critic_state = None
        if init_rnn_state is not None:
            actor_h, actor_c, critic_h, critic_c = init_rnn_state
            actor_state, critic_state = (actor_h, actor_c), (critic_h, critic_c)
        actor_out, (actor_h, actor_c) = self.actor.recurrent(
            self.actor.features(actor, T, B), extra, T, B, actor_state
        )
        critic_out, (critic_h, critic_c) = self.critic.recurrent(
            self.critic.features(critic, T, B), extra, T, B, critic_state
        )
        outputs = self._policy_outputs(self.actor.head(actor_out), self.critic.head(critic_out))
        outputs = restore_leading_dims(outputs, lead_dim, T, B)
        return (*outputs, ActorCriticRnnState(actor_h, actor_c, critic_h, critic_c))


# ------------------------------------------------------------------------ agents


def asymmetric_model_kwargs(env_spaces: EnvSpaces) -> dict[str, Any]:
    """Both observation shapes, from an observation space whose ``shape`` has fields
    ``actor`` and ``critic``; ``action_size`` and ``policy``: categorical for a discrete
    action space (with ``n``), else Gaussian."""
    space = env_spaces.observation
    shape = getattr(space, "shape", None)
    actor, critic = getattr(shape, "actor", None), getattr(shape, "critic", None)
    if actor is None or critic is None:
        raise ValueError(
            "an asymmetric agent needs env_spaces.observation in two parts, a space whose shape "
            "has fields actor and critic (rl_samplers' Composite of an ActorCriticObservation: "
            f"a BatchEnv with a critic_observation_space), got {space!r}"
        )
    categorical = hasattr(env_spaces.action, "n")
    return dict(
        actor_observation_shape=tuple(int(s) for s in actor),
        critic_observation_shape=tuple(int(s) for s in critic),
        action_size=n_actions(env_spaces) if categorical else action_size_of(env_spaces),
        policy="categorical" if categorical else "gaussian",
    )


def actor_inference_policy(
    agent: PgAgent, device: torch.device | str | int = "cpu"
) -> torch.nn.Module:
    """The actor alone, on the actor's observation ``[B, ...]``: a frozen copy of its
    normalisation statistics, torso (and LSTM) and head, acting as ``deterministic_eval``
    does (the critic is left out; see ``export_policy``). The asymmetric agents'
    ``inference_policy``."""
    rule = "softmax_argmax" if agent.policy == "categorical" else "mean"
    return agent_inference_policy(agent, rule, device, actor_only=True)


class AsymmetricCategoricalPgAgent(CategoricalPgAgent):
    """``CategoricalPgAgent`` with an ``AsymmetricFfModel``: discrete actions chosen from
    ``observation.actor``, values from ``observation.critic``; has ``update_obs_rms`` when
    the model normalises observations. The previous action goes to the model as integer
    indexes (the LSTM model encodes them itself)."""

    inference_policy = actor_inference_policy

    def __init__(self, ModelCls: ModelFactory = AsymmetricFfModel, **kwargs: Any):
        super().__init__(
            ModelCls,
            env_to_model_kwargs=asymmetric_model_kwargs,
            onehot_prev_action=False,
            **kwargs,
        )


class AsymmetricRecurrentCategoricalPgAgent(RecurrentCategoricalPgAgent):
    """``RecurrentCategoricalPgAgent`` with an ``AsymmetricLstmModel`` (separate actor and
    critic LSTMs; the recurrent state is an ``ActorCriticRnnState``)."""

    inference_policy = actor_inference_policy

    def __init__(self, ModelCls: ModelFactory = AsymmetricLstmModel, **kwargs: Any):
        super().__init__(
            ModelCls,
            env_to_model_kwargs=asymmetric_model_kwargs,
            onehot_prev_action=False,
            **kwargs,
        )


class AsymmetricGaussianPgAgent(GaussianPgAgent):
    """``GaussianPgAgent`` with an ``AsymmetricFfModel``: continuous actions (a 1-D Box)
    from ``observation.actor``, values from ``observation.critic``."""

    inference_policy = actor_inference_policy

    def __init__(self, ModelCls: ModelFactory = AsymmetricFfModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=asymmetric_model_kwargs, **kwargs)


class AsymmetricRecurrentGaussianPgAgent(RecurrentGaussianPgAgent):
    """``RecurrentGaussianPgAgent`` with an ``AsymmetricLstmModel``."""

    inference_policy = actor_inference_policy

    def __init__(self, ModelCls: ModelFactory = AsymmetricLstmModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=asymmetric_model_kwargs, **kwargs)
