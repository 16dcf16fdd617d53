"""Policy-gradient agents: ``PgAgent``, a model with a policy head (categorical or Gaussian)
and a value head, feed-forward or recurrent, and rlpyt's names for its usual settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rl_arrays import AgentStep, EnvSpaces, buffer_to, namedarraytuple

from ._base_agent import BaseAgent, ModelFactory
from ._dict_models import DictFfModel, dict_categorical_model_kwargs, dict_gaussian_model_kwargs
from ._distributions import Categorical, DistInfo, DistInfoStd, Gaussian
from ._model_kwargs import (
    action_size_of,
    atari_model_kwargs,
    mujoco_model_kwargs,
    n_actions,
    vector_model_kwargs,
)
from ._pg_models import (
    AtariFfModel,
    AtariLstmModel,
    CategoricalFfModel,
    CategoricalLstmModel,
    MujocoFfModel,
    MujocoLstmModel,
)
from ._policies import agent_inference_policy

__all__ = [
    "AgentInfo",
    "AgentInfoRnn",
    "AlternatingAtariLstmAgent",
    "AlternatingMujocoLstmAgent",
    "AlternatingRecurrentCategoricalPgAgent",
    "AlternatingRecurrentGaussianPgAgent",
    "AtariFfAgent",
    "AtariLstmAgent",
    "CategoricalFfAgent",
    "CategoricalLstmAgent",
    "CategoricalPgAgent",
    "DictCategoricalFfAgent",
    "DictGaussianFfAgent",
    "GaussianPgAgent",
    "MujocoFfAgent",
    "MujocoLstmAgent",
    "PgAgent",
    "RecurrentCategoricalPgAgent",
    "RecurrentCategoricalPgAgentBase",
    "RecurrentGaussianPgAgent",
    "RecurrentGaussianPgAgentBase",
]

AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])
AgentInfo.__doc__ = "What a feed-forward PG agent reports per step: dist_info and value."

AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["dist_info", "value", "prev_rnn_state"])
AgentInfoRnn.__doc__ = (
    "AgentInfo plus prev_rnn_state, the recurrent state the step started from, stored "
    "batch-first ([B, num_layers, H] per step)."
)

_POLICIES = ("categorical", "gaussian")


class PgAgent(BaseAgent):
    """A policy-gradient agent. ``policy="categorical"``: the model maps ``(observation,
    prev_action, prev_reward)`` to ``(pi, value)``, pi the probabilities of the
    ``env_spaces.action.n`` actions (prev_action one-hot unless ``onehot_prev_action=False``);
    ``"gaussian"``: to ``(mu, log_std, value)`` over a 1-D Box, actions sampled in the
    model's units, neither clipped nor rescaled (as in rlpyt).

    ``recurrent``: the model also takes and returns the rnn state, which the agent keeps for
    the sampler (``alternating``: one per group of an alternating sampler). The agent samples
    in eval mode too unless ``deterministic_eval`` (then: the most probable action, or the
    mean). ``env_to_model_kwargs`` as in ``BaseAgent``.
    """

    distribution: Categorical | Gaussian  # (None until initialize())

    def __init__(
        self,
        ModelCls: ModelFactory | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
        deterministic_eval: bool = False,
        *,
        policy: str = "categorical",
        recurrent: bool = False,
        alternating: bool = False,
        env_to_model_kwargs: Callable[[EnvSpaces], dict[str, Any]] | None = None,
        onehot_prev_action: bool = True,
    ):
        if policy not in _POLICIES:
            raise ValueError(f"policy must be one of {_POLICIES}, got {policy!r}")
        if alternating and not recurrent:
            raise ValueError(
                "alternating=True needs recurrent=True (a feed-forward agent keeps no state "
                "and needs nothing for an alternating sampler)"
            )
        super().__init__(ModelCls, model_kwargs, initial_model_state_dict, env_to_model_kwargs)
        self.policy = policy
        self.deterministic_eval = bool(deterministic_eval)
        self.onehot_prev_action = bool(onehot_prev_action) and policy == "categorical"
        self.mask_kind = "probs" if policy == "categorical" else None
        if recurrent:
            self.keep_rnn_state(alternating)

    def initialize(
        self,
        env_spaces: EnvSpaces,
        share_memory: bool = False,
        global_B: int = 1,
        env_ranks: Sequence[int] | None = None,
    ) -> None:
        """Build the model and the policy's distribution (the action space checked first)."""
        distribution: Categorical | Gaussian
        if self.policy == "categorical":
            distribution = Categorical(dim=n_actions(env_spaces))
        else:
            distribution = Gaussian(dim=action_size_of(env_spaces))
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        self.distribution = distribution

    def _forward(self, inputs: tuple, rnn_state: Any) -> tuple[Any, torch.Tensor, Any]:
        """``(dist_info, value, next_rnn_state)`` of the model (no rnn state: None)."""
        model = self._require_model()
        if self.recurrent:
            *outputs, next_rnn_state = model(*inputs, rnn_state)
        else:
            outputs, next_rnn_state = model(*inputs), None
        if self.policy == "categorical":
            pi, value = outputs
            return DistInfo(prob=pi), value, next_rnn_state
        mu, log_std, value = outputs
        return DistInfoStd(mean=mu, log_std=log_std), value, next_rnn_state

    def __call__(
        self, observation: Any, prev_action: Any, prev_reward: Any, init_rnn_state: Any = None
    ) -> tuple[Any, ...]:
        """``(dist_info, value)`` for training data ([T, B], [B] or no leading dims), with
        grad, on the agent's device; recurrent agents return ``next_rnn_state`` too and take
        ``init_rnn_state`` in [N, B, H] layout (None: zeros)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        if init_rnn_state is not None:
            init_rnn_state = buffer_to(init_rnn_state, device=self.device)
        dist_info, value, next_rnn_state = self._forward(inputs, init_rnn_state)
        return (dist_info, value, next_rnn_state) if self.recurrent else (dist_info, value)

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Sample actions: ``AgentStep(action, AgentInfo(dist_info, value))`` on
        ``output_device``; recurrent agents advance their state and report
        ``AgentInfoRnn(dist_info, value, prev_rnn_state)``, prev_rnn_state batch-first."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        prev_rnn_state = self.prev_rnn_state
        dist_info, value, rnn_state = self._forward(inputs, prev_rnn_state)
        if self.deterministic_eval and self._mode == "eval":
            categorical = self.policy == "categorical"
            action = torch.argmax(dist_info.prob, dim=-1) if categorical else dist_info.mean
        else:
            action = self.distribution.sample(dist_info)
        if self.recurrent:
            stored = self._step_rnn_state(prev_rnn_state, rnn_state, inputs[2].ndim == 0)
            agent_info: Any = AgentInfoRnn(dist_info, value, stored)
        else:
            agent_info = AgentInfo(dist_info, value)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), self.output_device)

    @torch.no_grad()
    def value(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """State values (e.g. the bootstrap value after a batch), on ``output_device``;
        recurrent agents use their current state without advancing it."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        batch_size = int(inputs[2].shape[-1]) if inputs[2].ndim else 1
        rnn_state = self.rnn_states.for_value(batch_size) if self.rnn_states else None
        return self._forward(inputs, rnn_state)[1].to(self.output_device)

    def inference_policy(self, device: torch.device | str | int = "cpu") -> torch.nn.Module:
        """A frozen copy of the policy on ``device`` that acts as ``deterministic_eval``
        does (an ``InferencePolicy``, or a ``RecurrentInferencePolicy`` keeping the
        recurrent state; see ``export_policy``)."""
        rule = "argmax" if self.policy == "categorical" else "mean"
        return agent_inference_policy(self, rule, device)


# ---------------------------------------------------------- rlpyt's names: settings


class CategoricalPgAgent(PgAgent):
    """``PgAgent(policy="categorical")``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, policy="categorical", **kwargs)


class RecurrentCategoricalPgAgent(PgAgent):
    """``PgAgent(policy="categorical", recurrent=True)``."""

    recurrent = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, policy="categorical", recurrent=True, **kwargs)


class AlternatingRecurrentCategoricalPgAgent(PgAgent):
    """``PgAgent(policy="categorical", recurrent=True, alternating=True)``."""

    recurrent = alternating = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, policy="categorical", recurrent=True, alternating=True, **kwargs)


class GaussianPgAgent(PgAgent):
    """``PgAgent(policy="gaussian")``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, policy="gaussian", **kwargs)


class RecurrentGaussianPgAgent(PgAgent):
    """``PgAgent(policy="gaussian", recurrent=True)``."""

    recurrent = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, policy="gaussian", recurrent=True, **kwargs)


class AlternatingRecurrentGaussianPgAgent(PgAgent):
    """``PgAgent(policy="gaussian", recurrent=True, alternating=True)``."""

    recurrent = alternating = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, policy="gaussian", recurrent=True, alternating=True, **kwargs)


# rlpyt's agents "without the state keeping": here the recurrent agents keep their state.
RecurrentCategoricalPgAgentBase = RecurrentCategoricalPgAgent
RecurrentGaussianPgAgentBase = RecurrentGaussianPgAgent


# ------------------------------------------------------ rlpyt's names: models


class AtariFfAgent(CategoricalPgAgent):
    """``CategoricalPgAgent`` with an ``AtariFfModel`` (kwargs: ``atari_model_kwargs``)."""

    def __init__(self, ModelCls: ModelFactory = AtariFfModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=atari_model_kwargs, **kwargs)


class AtariLstmAgent(RecurrentCategoricalPgAgent):
    """``RecurrentCategoricalPgAgent`` with an ``AtariLstmModel``."""

    def __init__(self, ModelCls: ModelFactory = AtariLstmModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=atari_model_kwargs, **kwargs)


class AlternatingAtariLstmAgent(AlternatingRecurrentCategoricalPgAgent):
    """``AlternatingRecurrentCategoricalPgAgent`` with an ``AtariLstmModel``."""

    def __init__(self, ModelCls: ModelFactory = AtariLstmModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=atari_model_kwargs, **kwargs)


class MujocoFfAgent(GaussianPgAgent):
    """``GaussianPgAgent`` with a ``MujocoFfModel`` (kwargs: ``mujoco_model_kwargs``)."""

    def __init__(self, ModelCls: ModelFactory = MujocoFfModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=mujoco_model_kwargs, **kwargs)


class MujocoLstmAgent(RecurrentGaussianPgAgent):
    """``RecurrentGaussianPgAgent`` with a ``MujocoLstmModel``."""

    def __init__(self, ModelCls: ModelFactory = MujocoLstmModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=mujoco_model_kwargs, **kwargs)


class AlternatingMujocoLstmAgent(AlternatingRecurrentGaussianPgAgent):
    """``AlternatingRecurrentGaussianPgAgent`` with a ``MujocoLstmModel``."""

    def __init__(self, ModelCls: ModelFactory = MujocoLstmModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=mujoco_model_kwargs, **kwargs)


class CategoricalFfAgent(CategoricalPgAgent):
    """``CategoricalPgAgent`` with a ``CategoricalFfModel`` (kwargs: ``vector_model_kwargs``;
    the previous action goes to the model as integer indexes)."""

    def __init__(self, ModelCls: ModelFactory = CategoricalFfModel, **kwargs: Any):
        super().__init__(
            ModelCls, env_to_model_kwargs=vector_model_kwargs, onehot_prev_action=False, **kwargs
        )


class CategoricalLstmAgent(RecurrentCategoricalPgAgent):
    """``RecurrentCategoricalPgAgent`` with a ``CategoricalLstmModel``, as ``CategoricalFfAgent``."""

    def __init__(self, ModelCls: ModelFactory = CategoricalLstmModel, **kwargs: Any):
        super().__init__(
            ModelCls, env_to_model_kwargs=vector_model_kwargs, onehot_prev_action=False, **kwargs
        )


class DictCategoricalFfAgent(CategoricalPgAgent):
    """``CategoricalPgAgent`` with a ``DictFfModel`` of composite (gymnasium ``Dict``)
    observations (kwargs: ``dict_categorical_model_kwargs``)."""

    def __init__(self, ModelCls: ModelFactory = DictFfModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=dict_categorical_model_kwargs, **kwargs)


class DictGaussianFfAgent(GaussianPgAgent):
    """``GaussianPgAgent`` with a ``DictFfModel`` (kwargs: ``dict_gaussian_model_kwargs``)."""

    def __init__(self, ModelCls: ModelFactory = DictFfModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=dict_gaussian_model_kwargs, **kwargs)
