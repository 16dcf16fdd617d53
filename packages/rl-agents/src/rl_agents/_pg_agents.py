"""Policy-gradient agents: a model with a policy head (categorical or Gaussian) and a value
head, feed-forward or recurrent.

The classes combine three independent choices, as rlpyt does:

* the action distribution (``_CategoricalPolicy``: probabilities, ``Categorical``;
  ``_GaussianPolicy``: mean and log_std, ``Gaussian``);
* feed-forward or recurrent acting (``_FeedForwardPg``, ``_RecurrentPg``; recurrent agents
  also take ``RecurrentAgentMixin`` or ``AlternatingRecurrentAgentMixin`` for the state);
* which model and environment kwargs (``AtariMixin``, ``MujocoMixin``,
  ``VectorCategoricalMixin``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rl_arrays import AgentStep, buffer_func, buffer_method, buffer_to, namedarraytuple

from ._base_agent import AlternatingRecurrentAgentMixin, BaseAgent, RecurrentAgentMixin
from ._distributions import Categorical, DistInfo, DistInfoStd, Gaussian
from ._inference import agent_inference_policy
from ._pg_models import (
    AtariFfModel,
    AtariLstmModel,
    CategoricalFfModel,
    CategoricalLstmModel,
    MujocoFfModel,
    MujocoLstmModel,
)

__all__ = [
    "AgentInfo",
    "AgentInfoRnn",
    "AlternatingAtariLstmAgent",
    "AlternatingMujocoLstmAgent",
    "AlternatingRecurrentCategoricalPgAgent",
    "AlternatingRecurrentGaussianPgAgent",
    "AtariFfAgent",
    "AtariLstmAgent",
    "AtariMixin",
    "CategoricalFfAgent",
    "CategoricalLstmAgent",
    "CategoricalPgAgent",
    "GaussianPgAgent",
    "MujocoFfAgent",
    "MujocoLstmAgent",
    "MujocoMixin",
    "RecurrentCategoricalPgAgent",
    "RecurrentCategoricalPgAgentBase",
    "RecurrentGaussianPgAgent",
    "RecurrentGaussianPgAgentBase",
    "VectorCategoricalMixin",
]

AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])
AgentInfo.__doc__ = "What a feed-forward PG agent reports per step: dist_info and value."

AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["dist_info", "value", "prev_rnn_state"])
AgentInfoRnn.__doc__ = (
    "AgentInfo plus prev_rnn_state, the recurrent state the step started from, stored "
    "batch-first ([B, num_layers, H] per step)."
)


def _shape(space: Any, name: str) -> tuple[int, ...]:
    shape = getattr(space, "shape", None)
    if shape is None:
        raise ValueError(f"env_spaces.{name} must have a shape, got {space!r}")
    return tuple(int(s) for s in shape)


def n_actions(env_spaces: Any) -> int:
    n = getattr(env_spaces.action, "n", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            "a categorical agent needs a discrete action space with an int attribute n >= 1, "
            f"got env_spaces.action={env_spaces.action!r}"
        )
    return n


def action_size_of(env_spaces: Any) -> int:
    shape = getattr(env_spaces.action, "shape", None)
    if shape is None or len(shape) != 1:
        raise ValueError(
            "a Gaussian agent needs a continuous action space with a 1-D shape, got "
            f"env_spaces.action={env_spaces.action!r} with shape {shape}"
        )
    return int(shape[0])


# ------------------------------------------------------------------ distributions


class _CategoricalPolicy(BaseAgent):
    """Discrete actions: the model outputs ``(pi, value[, rnn_state])`` with ``pi`` the
    action probabilities, and takes the previous action one-hot encoded."""

    def initialize(
        self, env_spaces: Any, share_memory: bool = False, global_B: int = 1, env_ranks: Any = None
    ) -> None:
        n = n_actions(env_spaces)
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        self.distribution = Categorical(dim=n)

    def _model_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        return self.distribution.to_onehot(prev_action)

    def _dist_info_value(self, outputs: Any) -> tuple[Any, torch.Tensor]:
        pi, value = outputs
        return DistInfo(prob=pi), value

    def _greedy_action(self, dist_info: Any) -> torch.Tensor:
        return torch.argmax(dist_info.prob, dim=-1)

    def _inference_rule(self) -> str:
        """How ``inference_policy`` turns the model's first output into the action."""
        return "argmax"


class _GaussianPolicy(BaseAgent):
    """Continuous actions: the model outputs ``(mu, log_std, value[, rnn_state])`` and takes
    the previous action as is.

    Actions are sampled in the model's units, ``mean + std * noise``: they are neither
    clipped nor rescaled to the action space's ``low`` / ``high`` here (as in rlpyt,
    clipping is left to the environment).
    """

    def initialize(
        self, env_spaces: Any, share_memory: bool = False, global_B: int = 1, env_ranks: Any = None
    ) -> None:
        action_size = action_size_of(env_spaces)
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        self.distribution = Gaussian(dim=action_size)

    def _model_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        return prev_action

    def _dist_info_value(self, outputs: Any) -> tuple[Any, torch.Tensor]:
        mu, log_std, value = outputs
        return DistInfoStd(mean=mu, log_std=log_std), value

    def _greedy_action(self, dist_info: Any) -> torch.Tensor:
        return dist_info.mean

    def _inference_rule(self) -> str:
        """How ``inference_policy`` turns the model's first output into the action."""
        return "mean"


# ----------------------------------------------------------------------- acting


class _PgActing(BaseAgent):
    """Inputs moved to the agent's device, with the previous action as the model takes it.

    Agents sample their actions in every mode by default, as rlpyt's do; made with
    ``deterministic_eval=True`` they act greedily in eval mode (the most probable action,
    or the Gaussian mean).
    """

    def __init__(
        self,
        ModelCls: Any = None,
        model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
        deterministic_eval: bool = False,
    ):
        super().__init__(ModelCls, model_kwargs, initial_model_state_dict)
        self.deterministic_eval = bool(deterministic_eval)

    def _select_action(self, dist_info: Any) -> torch.Tensor:
        if self.deterministic_eval and self._mode == "eval":
            return self._greedy_action(dist_info)  # type: ignore[attr-defined]
        return self.distribution.sample(dist_info)

    def _model_inputs(self, observation: Any, prev_action: Any, prev_reward: Any) -> tuple:
        self._require_model()
        observation, prev_action, prev_reward = buffer_to(
            (observation, prev_action, prev_reward), device=self.device
        )
        return observation, self._model_prev_action(prev_action), prev_reward  # type: ignore[attr-defined]

    def inference_policy(self, device: Any = "cpu") -> torch.nn.Module:
        """A frozen copy of the policy on ``device`` that acts as ``deterministic_eval``
        does: the most probable action, or the Gaussian mean (an ``InferencePolicy``, or a
        ``RecurrentInferencePolicy`` keeping the recurrent state; see ``export_policy``)."""
        return agent_inference_policy(self, self._inference_rule(), device)  # type: ignore[attr-defined]


class _FeedForwardPg(_PgActing):
    """``__call__`` / ``step`` / ``value`` of feed-forward policy-gradient agents."""

    def __call__(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """``(dist_info, value)`` for training data ([T, B], [B] or no leading dims), with
        grad, on the agent's device."""
        outputs = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        return self._dist_info_value(outputs)  # type: ignore[attr-defined]

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Sample actions: ``AgentStep(action, AgentInfo(dist_info, value))`` on
        ``output_device``."""
        outputs = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        dist_info, value = self._dist_info_value(outputs)  # type: ignore[attr-defined]
        action = self._select_action(dist_info)
        agent_step = AgentStep(action=action, agent_info=AgentInfo(dist_info, value))
        return buffer_to(agent_step, device=self.output_device)

    @torch.no_grad()
    def value(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """State values (e.g. the bootstrap value after a batch), on ``output_device``."""
        outputs = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        _, value = self._dist_info_value(outputs)  # type: ignore[attr-defined]
        return value.to(self.output_device)


class _RecurrentPg(_PgActing):
    """``__call__`` / ``step`` / ``value`` of recurrent policy-gradient agents; the state
    kept between steps comes from a recurrent mixin."""

    recurrent = True

    def __call__(
        self, observation: Any, prev_action: Any, prev_reward: Any, init_rnn_state: Any
    ) -> Any:
        """``(dist_info, value, next_rnn_state)`` for training data, with grad, on the
        agent's device; ``init_rnn_state`` in [N, B, H] layout (None: zeros)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        if init_rnn_state is not None:
            init_rnn_state = buffer_to(init_rnn_state, device=self.device)
        *outputs, next_rnn_state = self.model(*inputs, init_rnn_state)
        dist_info, value = self._dist_info_value(outputs)  # type: ignore[attr-defined]
        return dist_info, value, next_rnn_state

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Sample actions and advance the state: ``AgentStep(action, AgentInfoRnn(dist_info,
        value, prev_rnn_state))`` on ``output_device``, prev_rnn_state batch-first [B, N, H]
        (zeros after a reset; [N, H] for inputs without leading dims)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        prev_rnn_state = self.prev_rnn_state  # type: ignore[attr-defined]
        *outputs, rnn_state = self.model(*inputs, prev_rnn_state)
        dist_info, value = self._dist_info_value(outputs)  # type: ignore[attr-defined]
        action = self._select_action(dist_info)
        if prev_rnn_state is None:
            prev_rnn_state = buffer_func(rnn_state, torch.zeros_like)
        stored = buffer_method(prev_rnn_state, "transpose", 0, 1)
        if inputs[2].ndim == 0:  # no leading dims: one environment's [N, H]
            stored = buffer_method(stored, "squeeze", 0)
        agent_info = AgentInfoRnn(dist_info, value, stored)
        agent_step = buffer_to(
            AgentStep(action=action, agent_info=agent_info), device=self.output_device
        )
        self.advance_rnn_state(rnn_state)  # type: ignore[attr-defined]
        return agent_step

    @torch.no_grad()
    def value(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """State values from the current recurrent state, which is not advanced; on
        ``output_device``."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        batch_size = int(inputs[2].shape[-1]) if inputs[2].ndim else 1
        rnn_state = self._rnn_state_for_value(batch_size)  # type: ignore[attr-defined]
        *outputs, _ = self.model(*inputs, rnn_state)
        _, value = self._dist_info_value(outputs)  # type: ignore[attr-defined]
        return value.to(self.output_device)


# ------------------------------------------------------------------ the agents


class CategoricalPgAgent(_FeedForwardPg, _CategoricalPolicy):
    """Feed-forward agent with a categorical policy over ``env_spaces.action.n`` actions;
    the model maps ``(observation, prev_action one-hot, prev_reward)`` to ``(pi, value)``."""


class RecurrentCategoricalPgAgentBase(_RecurrentPg, _CategoricalPolicy):
    """Recurrent categorical agent without the state keeping (add a recurrent mixin); the
    model maps ``(..., init_rnn_state)`` to ``(pi, value, next_rnn_state)``."""


class RecurrentCategoricalPgAgent(RecurrentAgentMixin, RecurrentCategoricalPgAgentBase):
    """Recurrent categorical agent (one recurrent state for all sampler environments)."""


class AlternatingRecurrentCategoricalPgAgent(
    AlternatingRecurrentAgentMixin, RecurrentCategoricalPgAgentBase
):
    """Recurrent categorical agent for the alternating samplers (a state per group)."""


class GaussianPgAgent(_FeedForwardPg, _GaussianPolicy):
    """Feed-forward agent with a diagonal Gaussian policy over a 1-D Box action space; the
    model maps ``(observation, prev_action, prev_reward)`` to ``(mu, log_std, value)``.

    Actions are sampled in the model's units and are not clipped or rescaled to the Box's
    ``low`` / ``high`` (as in rlpyt, clipping is left to the environment). In eval mode the
    agent still samples, unless made with ``deterministic_eval=True``: then it acts with
    the mean.
    """


class RecurrentGaussianPgAgentBase(_RecurrentPg, _GaussianPolicy):
    """Recurrent Gaussian agent without the state keeping (add a recurrent mixin); the
    model maps ``(..., init_rnn_state)`` to ``(mu, log_std, value, next_rnn_state)``."""


class RecurrentGaussianPgAgent(RecurrentAgentMixin, RecurrentGaussianPgAgentBase):
    """Recurrent Gaussian agent (one recurrent state for all sampler environments)."""


class AlternatingRecurrentGaussianPgAgent(
    AlternatingRecurrentAgentMixin, RecurrentGaussianPgAgentBase
):
    """Recurrent Gaussian agent for the alternating samplers (a state per group)."""


class AtariMixin:
    """Model kwargs from the spaces: ``image_shape`` (C, H, W) and ``output_size`` (the
    number of actions)."""

    def make_env_to_model_kwargs(self, env_spaces: Any) -> dict[str, Any]:
        image_shape = _shape(env_spaces.observation, "observation")
        if len(image_shape) != 3:
            raise ValueError(
                f"Atari agents need image observations (C, H, W), got shape {image_shape}"
            )
        return dict(image_shape=image_shape, output_size=n_actions(env_spaces))


class MujocoMixin:
    """Model kwargs from the spaces: ``observation_shape`` and ``action_size``."""

    def make_env_to_model_kwargs(self, env_spaces: Any) -> dict[str, Any]:
        return dict(
            observation_shape=_shape(env_spaces.observation, "observation"),
            action_size=action_size_of(env_spaces),
        )


class VectorCategoricalMixin:
    """Model kwargs from the spaces: ``observation_shape`` and ``output_size`` (the number
    of actions); the previous action goes to the model as integer indexes."""

    def make_env_to_model_kwargs(self, env_spaces: Any) -> dict[str, Any]:
        return dict(
            observation_shape=_shape(env_spaces.observation, "observation"),
            output_size=n_actions(env_spaces),
        )

    def _model_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        """As it is: ``CategoricalFfModel`` ignores it and ``CategoricalLstmModel`` one-hot
        encodes integer actions itself (no encoding for every forward pass here)."""
        return prev_action


class AtariFfAgent(AtariMixin, CategoricalPgAgent):
    """``CategoricalPgAgent`` with an ``AtariFfModel``."""

    def __init__(self, ModelCls: Any = AtariFfModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariLstmAgent(AtariMixin, RecurrentCategoricalPgAgent):
    """``RecurrentCategoricalPgAgent`` with an ``AtariLstmModel``."""

    def __init__(self, ModelCls: Any = AtariLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingAtariLstmAgent(AtariMixin, AlternatingRecurrentCategoricalPgAgent):
    """``AlternatingRecurrentCategoricalPgAgent`` with an ``AtariLstmModel``."""

    def __init__(self, ModelCls: Any = AtariLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class MujocoFfAgent(MujocoMixin, GaussianPgAgent):
    """``GaussianPgAgent`` with a ``MujocoFfModel``; has ``update_obs_rms`` when the model
    normalises observations (``model_kwargs=dict(normalize_observation=True)``)."""

    def __init__(self, ModelCls: Any = MujocoFfModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class MujocoLstmAgent(MujocoMixin, RecurrentGaussianPgAgent):
    """``RecurrentGaussianPgAgent`` with a ``MujocoLstmModel`` (``update_obs_rms`` as in
    ``MujocoFfAgent``)."""

    def __init__(self, ModelCls: Any = MujocoLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingMujocoLstmAgent(MujocoMixin, AlternatingRecurrentGaussianPgAgent):
    """``AlternatingRecurrentGaussianPgAgent`` with a ``MujocoLstmModel``."""

    def __init__(self, ModelCls: Any = MujocoLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class CategoricalFfAgent(VectorCategoricalMixin, CategoricalPgAgent):
    """``CategoricalPgAgent`` with a ``CategoricalFfModel``: vector observations, discrete
    actions; has ``update_obs_rms`` when the model normalises observations."""

    def __init__(self, ModelCls: Any = CategoricalFfModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class CategoricalLstmAgent(VectorCategoricalMixin, RecurrentCategoricalPgAgent):
    """``RecurrentCategoricalPgAgent`` with a ``CategoricalLstmModel``."""

    def __init__(self, ModelCls: Any = CategoricalLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)
