"""Q-learning agents: DQN, categorical (distributional) DQN and recurrent R2D1, each with an
epsilon-greedy exploration schedule and a target network, and rlpyt's names for their Atari
and vector-observation settings. The interface the algorithms call is in the package README.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rl_arrays import AgentStep, EnvSpaces, as_count, buffer_to, namedarraytuple

from ._action_mask import action_mask_of
from ._base_agent import BaseAgent, ModelFactory
from ._dict_models import DictDqnModel, dict_categorical_model_kwargs
from ._distributions import CategoricalEpsilonGreedy, EpsilonGreedy
from ._dqn_models import (
    AtariCatDqnModel,
    AtariDqnModel,
    AtariR2d1Model,
    CatDqnMlpModel,
    DqnMlpModel,
    R2d1MlpModel,
)
from ._model_kwargs import atari_model_kwargs, vector_model_kwargs
from ._model_utils import polyak_update, strip_ddp_state_dict
from ._policies import agent_inference_policy

__all__ = [
    "AgentInfoCatDqn",
    "AgentInfoDqn",
    "AgentInfoR2d1",
    "AtariCatDqnAgent",
    "AtariDqnAgent",
    "AtariR2d1Agent",
    "CatDqnAgent",
    "DictDqnAgent",
    "DqnAgent",
    "EpsilonGreedyAgentMixin",
    "R2d1Agent",
    "R2d1AgentBase",
    "VectorCatDqnAgent",
    "VectorDqnAgent",
    "VectorR2d1Agent",
]

AgentInfoDqn = namedarraytuple("AgentInfoDqn", ["q"])
AgentInfoDqn.__doc__ = "What a DQN agent's step records: the Q-values ``q`` [..., A]."

AgentInfoCatDqn = namedarraytuple("AgentInfoCatDqn", ["p"])
AgentInfoCatDqn.__doc__ = (
    "What a categorical DQN agent's step records: the return distributions ``p`` [..., A, n_atoms]."
)

AgentInfoR2d1 = namedarraytuple("AgentInfoR2d1", ["q", "prev_rnn_state"])
AgentInfoR2d1.__doc__ = (
    "AgentInfoDqn plus prev_rnn_state, the recurrent state the step started from, stored "
    "batch-first ([B, num_layers, H] per step), as in AgentInfoRnn."
)


def _probability(name: str, value: Any) -> float:
    value = float(value)
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return value


def _check_itrs(itr_min: Any, itr_max: Any) -> tuple[int, int]:
    try:  # ints, or integral floats such as 5e3
        low, high = as_count("itr_min", itr_min), as_count("itr_max", itr_max)
    except ValueError:
        low, high = -1, -1
    if not 0 <= low <= high:
        raise ValueError(
            f"epsilon itr_min and itr_max must be ints with 0 <= itr_min <= itr_max, got "
            f"{itr_min!r} and {itr_max!r}"
        )
    return low, high


def _discrete_actions(agent: BaseAgent, env_spaces: EnvSpaces) -> int:
    action = getattr(env_spaces, "action", None)
    n = getattr(action, "n", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            f"{type(agent).__name__} chooses among discrete actions and needs an action space "
            f"with an int attribute n >= 1; got env_spaces.action={action!r} (a "
            f"{type(action).__name__}: continuous actions need a policy-gradient or "
            "Q-policy-gradient agent)"
        )
    return n


class DqnAgent(BaseAgent):
    """Q-values from ``ModelCls(observation, prev_action, prev_reward) -> q [..., A]``
    (prev_action one-hot unless ``onehot_prev_action=False``), a target network (a copy
    without grad, refreshed by ``update_target``) and epsilon-greedy actions.

    Sampling epsilon: ``eps_init`` until iteration ``eps_itr_min``, then linear to
    ``eps_final`` at ``eps_itr_max`` (``set_epsilon_itr_min_max``); ``eps_eval`` in eval
    mode. With ``eps_final_min`` each sampler environment gets its own final epsilon,
    log-spaced from ``eps_final_min`` to ``eps_final`` over all ``global_B`` of them.
    ``state_dict()`` is ``{"model", "target", "epsilon"}`` (the schedule's iterations);
    ``initial_model_state_dict`` is the model's own state dict (the target starts as a copy).
    """

    distribution: EpsilonGreedy  # (None until initialize())
    mask_kind: str | None = "q"

    def __init__(
        self,
        ModelCls: ModelFactory | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
        *,
        eps_init: float = 1,
        eps_final: float = 0.01,
        eps_final_min: float | None = None,
        eps_itr_min: int = 50,
        eps_itr_max: int = 1000,
        eps_eval: float = 0.001,
        env_to_model_kwargs: Callable[[EnvSpaces], dict[str, Any]] | None = None,
        onehot_prev_action: bool = True,
    ):
        super().__init__(ModelCls, model_kwargs, initial_model_state_dict, env_to_model_kwargs)
        self.onehot_prev_action = bool(onehot_prev_action)
        self.target_model: torch.nn.Module | None = None
        self.eps_init = _probability("eps_init", eps_init)
        self.eps_final = _probability("eps_final", eps_final)
        self.eps_eval = _probability("eps_eval", eps_eval)
        if eps_final_min is not None:
            eps_final_min = _probability("eps_final_min", eps_final_min)
            if eps_final_min <= 0:
                raise ValueError(f"eps_final_min must be > 0 (log-spaced), got {eps_final_min}")
        self.eps_final_min = eps_final_min
        # Shared by initialize(share_memory=True): workers see the algorithm's later setting.
        self._eps_itr_min_max = torch.tensor(_check_itrs(eps_itr_min, eps_itr_max))
        # Numbers, or per-environment vectors (make_vec_eps).
        self._eps_init_values: float | torch.Tensor = self.eps_init
        self._eps_final_values: float | torch.Tensor = self.eps_final
        self.eps_sample: float | torch.Tensor = self.eps_init

    def initialize(
        self,
        env_spaces: EnvSpaces,
        share_memory: bool = False,
        global_B: int = 1,
        env_ranks: Sequence[int] | None = None,
    ) -> None:
        """Build the model and its target; per-environment epsilons when configured."""
        n = _discrete_actions(self, env_spaces)
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        target_model = self.target_model = self._make_model()
        target_model.load_state_dict(self._require_model().state_dict())
        target_model.requires_grad_(False)
        if share_memory:
            self._eps_itr_min_max.share_memory_()
        self.distribution = self._make_distribution(n)
        self.make_vec_eps(global_B, env_ranks)

    def _make_distribution(self, n: int) -> EpsilonGreedy:
        return EpsilonGreedy(dim=n, epsilon=self.eps_init)

    # ---------------------------------------------------------------- epsilon

    @property
    def eps_itr_min(self) -> int:
        return int(self._eps_itr_min_max[0])

    @property
    def eps_itr_max(self) -> int:
        return int(self._eps_itr_min_max[1])

    def set_epsilon_itr_min_max(self, eps_itr_min: int, eps_itr_max: int) -> None:
        """Where the linear fall of the sampling epsilon starts and ends (iterations)."""
        itrs = _check_itrs(eps_itr_min, eps_itr_max)
        self._eps_itr_min_max.copy_(torch.tensor(itrs))

    def make_vec_eps(self, global_B: int, env_ranks: Sequence[int] | None) -> None:
        """Per-environment final epsilons when ``eps_final_min`` is set: log-spaced over
        ``global_B`` environments, taken at this agent's ``env_ranks`` (alternating agents:
        the two environments of a pair share one)."""
        if self.eps_final_min is None or self.eps_final_min == self.eps_final:
            self._eps_init_values, self._eps_final_values = self.eps_init, self.eps_final
            return
        ranks = list(range(global_B)) if env_ranks is None else [int(r) for r in env_ranks]
        if self.alternating:
            if global_B % 2:
                raise ValueError(f"alternating agents need an even global_B, got {global_B}")
            global_B, ranks = global_B // 2, ranks[: len(ranks) // 2]
        if not ranks or min(ranks) < 0 or max(ranks) >= global_B:
            raise ValueError(f"env_ranks must lie in range({global_B}), got {ranks}")
        all_eps = torch.logspace(
            math.log10(self.eps_final_min),
            math.log10(self.eps_final),
            global_B,
            dtype=torch.float64,
        ).to(torch.float32)
        self._eps_final_values = all_eps[ranks]
        self._eps_init_values = torch.full((len(ranks),), self.eps_init)

    def collector_initialize(
        self, global_B: int = 1, env_ranks: Sequence[int] | None = None
    ) -> None:
        """In a sampler worker that steps only some of the agent's environments: take the
        epsilons of those (``env_ranks`` among all ``global_B``)."""
        self.make_vec_eps(global_B, env_ranks)

    def set_sample_epsilon_greedy(self, epsilon: float | Sequence[float] | torch.Tensor) -> None:
        """Use ``epsilon`` (a number or per-environment vector) until the next mode change."""
        self.distribution.set_epsilon(epsilon)

    def sample_epsilon(self, itr: int) -> float | torch.Tensor:
        """The scheduled sampling epsilon at iteration ``itr``."""
        itr_min, itr_max = self.eps_itr_min, self.eps_itr_max
        if itr <= itr_min:
            progress = 0.0
        elif itr >= itr_max:
            progress = 1.0
        else:
            progress = (itr - itr_min) / (itr_max - itr_min)
        return progress * self._eps_final_values + (1 - progress) * self._eps_init_values

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        self.eps_sample = self.sample_epsilon(itr)
        self.distribution.set_epsilon(self.eps_sample)

    def eval_mode(self, itr: int) -> None:
        """Evaluation epsilon ``eps_eval`` (at every iteration, the first included)."""
        super().eval_mode(itr)
        self.distribution.set_epsilon(self.eps_eval)

    # ---------------------------------------------------------------- acting

    def _require_target(self) -> torch.nn.Module:
        if self.target_model is None:
            raise RuntimeError(f"{type(self).__name__} has no target yet: call initialize() first")
        return self.target_model

    def _q_output(self, output: torch.Tensor) -> torch.Tensor:
        """What ``__call__`` / ``target`` return of the model's output (Q-values as is)."""
        return output

    def __call__(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """Q-values [..., A] with grad, on the agent's device."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self._q_output(self._require_model()(*inputs))

    @torch.no_grad()
    def target(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """The target network's Q-values [..., A], no grad, on the agent's device."""
        target = self._require_target()
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self._q_output(target(*inputs))

    def _agent_info(self, q: torch.Tensor) -> Any:
        return AgentInfoDqn(q=q)

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Epsilon-greedy actions: ``AgentStep(action, AgentInfoDqn(q))`` on
        ``output_device``."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        q = self._q_output(self._require_model()(*inputs))
        valid = action_mask_of(inputs[0]) if self.action_masked else None
        action = self.distribution.sample(q, valid)
        return buffer_to(
            AgentStep(action=action, agent_info=self._agent_info(q)), device=self.output_device
        )

    def inference_policy(self, device: torch.device | str | int = "cpu") -> torch.nn.Module:
        """A frozen copy of the model on ``device`` acting greedily (epsilon 0): the action
        of highest Q-value (an ``InferencePolicy``, or for R2D1 a
        ``RecurrentInferencePolicy``; see ``export_policy``)."""
        return agent_inference_policy(self, "argmax", device)

    def update_target(self, tau: float = 1) -> None:
        """Copy the model into the target (``tau=1``) or move the target towards it,
        ``target = tau * model + (1 - tau) * target`` (Polyak averaging)."""
        polyak_update([(self._require_target(), self._plain_model())], tau)

    def to_device(self, cuda_idx: int | None = None) -> None:
        super().to_device(cuda_idx)
        if self.target_model is not None:
            self.target_model.to(self.device)

    def state_dict(self) -> dict[str, Any]:
        """``{"model": ..., "target": ..., "epsilon": {"itr_min", "itr_max"}}``."""
        return {
            "model": self._plain_model().state_dict(),
            "target": self._require_target().state_dict(),
            "epsilon": {"itr_min": self.eps_itr_min, "itr_max": self.eps_itr_max},
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load ``state_dict()``'s output. Without a ``"target"`` entry the target becomes a
        copy of the model; a bare model state dict (no ``"model"`` key) is accepted as such."""
        if "model" not in state_dict:
            state_dict = {"model": state_dict}
        model = strip_ddp_state_dict(state_dict["model"])
        self._plain_model().load_state_dict(model)
        target = state_dict.get("target")
        target = model if target is None else strip_ddp_state_dict(target)
        self._require_target().load_state_dict(target)
        if "epsilon" in state_dict:
            epsilon = state_dict["epsilon"]
            self.set_epsilon_itr_min_max(int(epsilon["itr_min"]), int(epsilon["itr_max"]))


class CatDqnAgent(DqnAgent):
    """Categorical DQN: the model returns logits ``[..., A, n_atoms]`` of each action's
    return distribution over the atoms ``z``; ``agent(...)`` and ``target(...)`` return
    their softmax ``p``. Actions are epsilon-greedy in the expected value ``sum(p * z)``.

    ``n_atoms`` (default 51) is passed to the model as ``model_kwargs["n_atoms"]``. The atoms
    span [-10, 10] until the algorithm calls ``give_V_min_max``.
    """

    distribution: CategoricalEpsilonGreedy  # (None until initialize())
    mask_kind = None  # (a mask over return distributions: not built)

    def __init__(self, *args: Any, n_atoms: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        given = self.model_kwargs.get("n_atoms")
        if n_atoms is not None and given is not None and n_atoms != given:
            raise ValueError(f"n_atoms={n_atoms} disagrees with model_kwargs n_atoms={given}")
        n_atoms = n_atoms if n_atoms is not None else given if given is not None else 51
        n_atoms = as_count("n_atoms", n_atoms, 2, expected="an int >= 2")  # 51.0 too
        self.n_atoms = self.model_kwargs["n_atoms"] = n_atoms
        self.V_min, self.V_max = -10.0, 10.0

    def _make_distribution(self, n: int) -> CategoricalEpsilonGreedy:
        return CategoricalEpsilonGreedy(dim=n, z=self.z, epsilon=self.eps_init)

    @property
    def z(self) -> torch.Tensor:
        """The atom values, [n_atoms] on CPU."""
        return torch.linspace(self.V_min, self.V_max, self.n_atoms)

    def give_V_min_max(self, V_min: float, V_max: float) -> None:
        """The support of the return distributions (the algorithm's V_min, V_max)."""
        if not V_min < V_max:
            raise ValueError(f"V_min must be below V_max, got {V_min!r} and {V_max!r}")
        self.V_min, self.V_max = float(V_min), float(V_max)
        if self.distribution is not None:
            self.distribution.set_z(self.z)

    def _q_output(self, output: torch.Tensor) -> torch.Tensor:
        return F.softmax(output, dim=-1)

    def inference_policy(self, device: torch.device | str | int = "cpu") -> torch.nn.Module:
        """As ``DqnAgent.inference_policy``, greedy in the expected value over the atoms
        ``z`` as they are now (after the algorithm's ``give_V_min_max``)."""
        return agent_inference_policy(self, "expected_argmax", device, atoms=self.z)

    def _agent_info(self, q: torch.Tensor) -> Any:
        return AgentInfoCatDqn(p=q)


class R2d1Agent(DqnAgent):
    """Recurrent DQN (R2D1): the model maps ``(observation, prev_action, prev_reward,
    init_rnn_state)`` to ``(q, next_rnn_state)``; the agent keeps the sampler environments'
    state between steps."""

    recurrent = True
    mask_kind = None  # (action masking is built for the feed-forward DQN agents)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.keep_rnn_state()

    def _recurrent_inputs(self, args: tuple, init_rnn_state: Any) -> tuple:
        inputs = self._model_inputs(*args)
        if init_rnn_state is not None:
            init_rnn_state = buffer_to(init_rnn_state, device=self.device)
        return (*inputs, init_rnn_state)

    def __call__(  # type: ignore[override]
        self, observation: Any, prev_action: Any, prev_reward: Any, init_rnn_state: Any
    ) -> tuple[torch.Tensor, Any]:
        """``(q [T, B, A], next_rnn_state)`` with grad, on the agent's device;
        ``init_rnn_state`` in [N, B, H] layout (None: zeros)."""
        inputs = self._recurrent_inputs((observation, prev_action, prev_reward), init_rnn_state)
        return self._require_model()(*inputs)

    @torch.no_grad()
    def target(  # type: ignore[override]
        self, observation: Any, prev_action: Any, prev_reward: Any, init_rnn_state: Any
    ) -> tuple[torch.Tensor, Any]:
        """The target network's ``(q, next_rnn_state)``, no grad, on the agent's device."""
        target = self._require_target()
        inputs = self._recurrent_inputs((observation, prev_action, prev_reward), init_rnn_state)
        return target(*inputs)

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Epsilon-greedy actions, advancing the state: ``AgentStep(action,
        AgentInfoR2d1(q, prev_rnn_state))`` on ``output_device``, prev_rnn_state batch-first
        [B, N, H] (zeros after a reset; [N, H] for inputs without leading dims)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        prev_rnn_state = self.prev_rnn_state
        q, rnn_state = self._require_model()(*inputs, prev_rnn_state)
        action = self.distribution.sample(q)
        stored = self._step_rnn_state(prev_rnn_state, rnn_state, inputs[2].ndim == 0)
        agent_info = AgentInfoR2d1(q=q, prev_rnn_state=stored)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), self.output_device)


class DictDqnAgent(DqnAgent):
    """``DqnAgent`` with a ``DictDqnModel`` of composite (gymnasium ``Dict``) observations
    (kwargs: ``dict_categorical_model_kwargs``)."""

    def __init__(self, ModelCls: ModelFactory = DictDqnModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=dict_categorical_model_kwargs, **kwargs)


# rlpyt's names: the epsilon-greedy mixin is part of DqnAgent, and rlpyt's R2D1 agent
# "without the state keeping" is R2d1Agent, which keeps its state.
EpsilonGreedyAgentMixin = DqnAgent
R2d1AgentBase = R2d1Agent


class AtariDqnAgent(DqnAgent):
    """``DqnAgent`` with an ``AtariDqnModel`` (kwargs: ``atari_model_kwargs``)."""

    def __init__(self, ModelCls: ModelFactory = AtariDqnModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=atari_model_kwargs, **kwargs)


class AtariCatDqnAgent(CatDqnAgent):
    """``CatDqnAgent`` with an ``AtariCatDqnModel``."""

    def __init__(self, ModelCls: ModelFactory = AtariCatDqnModel, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=atari_model_kwargs, **kwargs)


class AtariR2d1Agent(R2d1Agent):
    """``R2d1Agent`` with an ``AtariR2d1Model``."""

    def __init__(self, ModelCls: ModelFactory = AtariR2d1Model, **kwargs: Any):
        super().__init__(ModelCls, env_to_model_kwargs=atari_model_kwargs, **kwargs)


class VectorDqnAgent(DqnAgent):
    """``DqnAgent`` with a ``DqnMlpModel`` (kwargs: ``vector_model_kwargs``; the previous
    action goes to the model as integer indexes)."""

    def __init__(self, ModelCls: ModelFactory = DqnMlpModel, **kwargs: Any):
        super().__init__(
            ModelCls, env_to_model_kwargs=vector_model_kwargs, onehot_prev_action=False, **kwargs
        )


class VectorCatDqnAgent(CatDqnAgent):
    """``CatDqnAgent`` with a ``CatDqnMlpModel``, as ``VectorDqnAgent``."""

    def __init__(self, ModelCls: ModelFactory = CatDqnMlpModel, **kwargs: Any):
        super().__init__(
            ModelCls, env_to_model_kwargs=vector_model_kwargs, onehot_prev_action=False, **kwargs
        )


class VectorR2d1Agent(R2d1Agent):
    """``R2d1Agent`` with an ``R2d1MlpModel``, as ``VectorDqnAgent``."""

    def __init__(self, ModelCls: ModelFactory = R2d1MlpModel, **kwargs: Any):
        super().__init__(
            ModelCls, env_to_model_kwargs=vector_model_kwargs, onehot_prev_action=False, **kwargs
        )
