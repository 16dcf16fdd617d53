"""Q-value policy-gradient agents: DDPG, TD3 and SAC, for continuous (Box) action spaces.

The models act in [-1, 1] per action dim and ``step`` maps that onto the action space's
[low, high], so samples and replay hold environment actions; the algorithm maps replayed
actions back with ``normalize_action``, and every other method speaks [-1, 1] units. The
interface the algorithms call is in the package README.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import torch

from rl_arrays import AgentStep, EnvSpaces, buffer_to, namedarraytuple

from ._base_agent import BaseAgent, ModelFactory
from ._distributions import DistInfoStd, Gaussian
from ._model_kwargs import mujoco_model_kwargs
from ._model_utils import polyak_update, set_training_mode, strip_ddp_state_dict
from ._policies import agent_inference_policy
from ._qpg_models import LOG_STD_MAX, LOG_STD_MIN, MuMlpModel, PiMlpModel, QofMuMlpModel

__all__ = ["AgentInfoDdpg", "AgentInfoSac", "DdpgAgent", "SacAgent", "Td3Agent"]

AgentInfoDdpg = namedarraytuple("AgentInfoDdpg", ["mu"])
AgentInfoDdpg.__doc__ = (
    "What a DDPG or TD3 agent's step records: ``mu`` [..., action_size], the policy's "
    "deterministic action (before exploration noise), in the environment's units."
)

AgentInfoSac = namedarraytuple("AgentInfoSac", ["dist_info"])
AgentInfoSac.__doc__ = (
    "What a SAC agent's step records: ``dist_info`` (DistInfoStd mean and log_std, "
    "[..., action_size]) of the Gaussian before the tanh squash."
)


def _box_bounds(agent: BaseAgent, env_spaces: EnvSpaces) -> tuple[torch.Tensor, torch.Tensor]:
    """The action space's (low, high) as float tensors, after checking it is a bounded Box."""
    action = getattr(env_spaces, "action", None)
    shape = getattr(action, "shape", None)
    low, high = getattr(action, "low", None), getattr(action, "high", None)
    if hasattr(action, "n") or shape is None or len(shape) != 1 or low is None or high is None:
        raise ValueError(
            f"{type(agent).__name__} acts in continuous actions and needs a Box action space "
            f"with a 1-D shape and low / high bounds; got env_spaces.action={action!r} (a "
            f"{type(action).__name__}: discrete actions need a DQN-family or categorical "
            "policy-gradient agent)"
        )
    low, high = (
        torch.as_tensor(bound, dtype=torch.float32).broadcast_to(tuple(shape)).clone()
        for bound in (low, high)
    )
    if not (bool(torch.isfinite(low).all()) and bool(torch.isfinite(high).all())):
        raise ValueError(
            f"{type(agent).__name__} scales its [-1, 1] actions to the action space's bounds, "
            f"which must be finite; got low={low.tolist()}, high={high.tolist()}"
        )
    if not bool((low < high).all()):
        raise ValueError(
            f"{type(agent).__name__} needs low < high in every action dim, got "
            f"low={low.tolist()}, high={high.tolist()}"
        )
    return low, high


# How an agent acts before learning starts: Gaussian noise of this std around its policy
# (rlpyt's way), or uniformly at random over the action box (SB3's).
UNIFORM = "uniform"
PretrainStd = float | Literal["uniform"] | None


def _check_number(
    name: str, value: Any, positive: bool = False, allow_none: bool = True
) -> float | None:
    """``value`` as a float after checking it is a number >= 0 (> 0 when ``positive``), or
    None when allowed."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not (value > 0 if positive else value >= 0)
    ):
        expected = "a number > 0" if positive else "a number >= 0"
        raise ValueError(
            f"{name} must be {expected}{' or None' if allow_none else ''}, got {value!r}"
        )
    return float(value)


def _with_default_sizes(kwargs: Mapping[str, Any] | None, sizes: list[int]) -> dict[str, Any]:
    return {"hidden_sizes": sizes, **(kwargs or {})}


class _QpgAgent(BaseAgent):
    """What the three agents share: the Box action space mapped to [-1, 1], critics and
    target networks beside the policy ``model`` (subclasses build them in
    ``_build_networks``), the pretraining iteration and the state dict of every network."""

    distribution: Gaussian  # (None until initialize())

    def __init__(
        self,
        ModelCls: ModelFactory,
        QModelCls: ModelFactory,
        model_kwargs: Mapping[str, Any],
        q_model_kwargs: Mapping[str, Any],
        initial_model_state_dict: Mapping[str, Any] | None,
        pretrain_std: PretrainStd,
    ):
        super().__init__(ModelCls, model_kwargs, initial_model_state_dict, mujoco_model_kwargs)
        if QModelCls is None:
            raise ValueError(f"{type(self).__name__} needs a QModelCls")
        self.QModelCls = QModelCls
        self.q_model_kwargs = dict(q_model_kwargs)
        self.pretrain_std: float | str | None = (
            UNIFORM if pretrain_std == UNIFORM else _check_number("pretrain_std", pretrain_std)
        )
        # The algorithm's first learning iteration, in a tensor that initialize(share_memory=
        # True) shares, so sampler workers started before the algorithm set it still see it.
        self._min_itr_learn = torch.zeros((), dtype=torch.int64)
        self._pretraining = False
        self._action_low: torch.Tensor | None = None
        self._action_high: torch.Tensor | None = None

    # ------------------------------------------------------------------ set-up

    def initialize(
        self,
        env_spaces: EnvSpaces,
        share_memory: bool = False,
        global_B: int = 1,
        env_ranks: Sequence[int] | None = None,
    ) -> None:
        """Build the policy, the critics and the target networks (targets start as copies);
        refuses action spaces other than a bounded 1-D Box."""
        self._action_low, self._action_high = _box_bounds(self, env_spaces)
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        self._build_networks()
        if share_memory:
            self._min_itr_learn.share_memory_()

    def _build_networks(self) -> None:
        raise NotImplementedError

    def _make_q_model(self, state_dict: Mapping[str, Any] | None = None) -> torch.nn.Module:
        q_model = self.QModelCls(**self.env_model_kwargs, **self.q_model_kwargs)
        if state_dict is not None:
            q_model.load_state_dict(strip_ddp_state_dict(state_dict))
        return q_model.to(self.device)

    @staticmethod
    def _target_of(network: torch.nn.Module, blank: torch.nn.Module) -> torch.nn.Module:
        """``blank`` made a copy of ``network`` that takes no gradient."""
        blank.load_state_dict(network.state_dict())
        return blank.requires_grad_(False)

    def _networks(self) -> dict[str, torch.nn.Module]:
        """Every network besides the policy, by its name in ``state_dict``."""
        raise NotImplementedError

    def _target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """(target, online network) pairs that ``update_target`` moves."""
        raise NotImplementedError

    def data_parallel(self) -> int | None:
        """Not supported: the Q networks, trained by an optimizer of their own, would need
        their gradients all-reduced too, and the policy loss runs them without training them.
        Several processes of DDPG, TD3 or SAC would drift apart silently, so they are refused."""
        raise NotImplementedError(
            f"{type(self).__name__} does not train across processes (DistributedDataParallel): "
            "run DDPG, TD3 and SAC in one process, or asynchronously (AsyncRl)"
        )

    def give_min_itr_learn(self, min_itr_learn: int) -> None:
        """The algorithm's first learning iteration: sampling before it uses ``pretrain_std``."""
        self._min_itr_learn.fill_(int(min_itr_learn))

    @property
    def min_itr_learn(self) -> int:
        return int(self._min_itr_learn)

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Move every network to GPU ``cuda_idx`` (a shared policy stays in shared memory and
        the agent trains a GPU copy of it, as ``BaseAgent.to_device`` does)."""
        super().to_device(cuda_idx)
        if cuda_idx is None:
            return
        for network in self._networks().values():
            network.to(self.device)
        for distribution in self._distributions():
            distribution.to(self.device)
        low, high = self._bounds()
        self._action_low, self._action_high = low.to(self.device), high.to(self.device)

    def _distributions(self) -> list[Gaussian]:
        """The distributions whose fixed stds follow the networks' device."""
        return [self.distribution]

    # ------------------------------------------------------------------ modes

    def _uniform_pretraining(self, like: torch.Tensor) -> torch.Tensor | None:
        """Before learning starts with ``pretrain_std="uniform"``: actions drawn uniformly
        in [-1, 1] (the whole action box), shaped ``like``; else None."""
        if self._pretraining and self.pretrain_std == UNIFORM:
            return torch.rand_like(like).mul_(2).sub_(1)
        return None

    def _pretraining_std(self) -> float | None:
        """The Gaussian noise before learning starts (None: the agent's own)."""
        return self.pretrain_std if isinstance(self.pretrain_std, float) else None

    def _networks_train(self, mode: bool) -> None:
        """Every network besides the policy in train (``mode``) or eval mode."""
        for network in self._networks().values():
            set_training_mode(network, mode)

    def train_mode(self, itr: int) -> None:
        super().train_mode(itr)
        self._networks_train(True)

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        self._networks_train(False)
        self._pretraining = self.pretrain_std is not None and itr < self.min_itr_learn

    def eval_mode(self, itr: int) -> None:
        super().eval_mode(itr)
        self._networks_train(False)

    # ------------------------------------------------------------------ actions

    def _bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._action_low is None or self._action_high is None:
            raise RuntimeError(f"{type(self).__name__} has no model yet: call initialize() first")
        return self._action_low, self._action_high

    def normalize_action(self, action: Any) -> torch.Tensor:
        """Environment actions in [low, high] mapped to the model's [-1, 1], on the device."""
        low, high = (x.to(self.device) for x in self._bounds())
        action = torch.as_tensor(action, device=self.device).to(low.dtype)
        return (2 * action - (high + low)) / (high - low)

    def _env_action(self, action: torch.Tensor) -> torch.Tensor:
        """[-1, 1] actions mapped onto [low, high] (clamped against rounding)."""
        low, high = (x.to(action.device) for x in self._bounds())
        scaled = low + (action + 1) * ((high - low) / 2)
        return torch.clamp(scaled, low, high)

    def q_parameters(self) -> Iterator[torch.nn.Parameter]:
        """The parameters of the critic(s), for the Q optimizer."""
        raise NotImplementedError

    # ------------------------------------------------------------------ targets and state

    def update_target(self, tau: float = 1) -> None:
        """Move every target network towards its online network: ``target = tau * online +
        (1 - tau) * target`` (Polyak averaging; ``tau=1`` copies)."""
        polyak_update(self._target_pairs(), tau)

    def state_dict(self) -> dict[str, Any]:
        """``{"model": policy, <critic and target names>: ...}``, every network's state dict."""
        state = {"model": self._plain_model().state_dict()}
        state.update({name: net.state_dict() for name, net in self._networks().items()})
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load ``state_dict()``'s output (``module.`` prefixes accepted)."""
        networks = {"model": self._plain_model(), **self._networks()}
        missing = sorted(networks.keys() - state_dict.keys())
        if missing:
            raise KeyError(
                f"{type(self).__name__}.load_state_dict: the state dict lacks {missing}; it "
                f"needs {sorted(networks)} (what state_dict() returns)"
            )
        for name, network in networks.items():
            network.load_state_dict(strip_ddp_state_dict(state_dict[name]))


class DdpgAgent(_QpgAgent):
    """DDPG: a deterministic policy ``mu`` (``ModelCls``, default ``MuMlpModel``, tanh
    output) and a critic Q(s, a) (``QModelCls``, default ``QofMuMlpModel``), each with a
    target network; hidden sizes default to [400, 300] (rlpyt's).

    Exploration: ``mu + N(0, action_std)`` in [-1, 1] units, the noise clipped to
    ``action_noise_clip`` when given, the action to [-1, 1]; ``pretrain_std`` (when given)
    replaces ``action_std`` before the algorithm's ``min_itr_learn`` (``"uniform"``: actions
    uniform over the action box then, as SB3 and the zoo warm up). Eval mode acts with
    ``mu`` itself.

    ``state_dict()`` holds ``model``, ``q_model``, ``target_model`` and ``target_q_model``.
    """

    def __init__(
        self,
        ModelCls: ModelFactory = MuMlpModel,
        QModelCls: ModelFactory = QofMuMlpModel,
        model_kwargs: Mapping[str, Any] | None = None,
        q_model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
        initial_q_model_state_dict: Mapping[str, Any] | None = None,
        action_std: float = 0.1,
        action_noise_clip: float | None = None,
        pretrain_std: PretrainStd = None,
    ):
        super().__init__(
            ModelCls,
            QModelCls,
            _with_default_sizes(model_kwargs, [400, 300]),
            _with_default_sizes(q_model_kwargs, [400, 300]),
            initial_model_state_dict,
            pretrain_std,
        )
        self.initial_q_model_state_dict = initial_q_model_state_dict
        self.action_std = _check_number("action_std", action_std, allow_none=False)
        self.action_noise_clip = _check_number("action_noise_clip", action_noise_clip, True)

    def _build_networks(self) -> None:
        self.q_model = self._make_q_model(self.initial_q_model_state_dict)
        self.target_model = self._target_of(self._plain_model(), self._make_model())
        self.target_q_model = self._target_of(self.q_model, self._make_q_model())
        self.distribution = Gaussian(
            dim=self.env_model_kwargs["action_size"],
            std=self.action_std,
            noise_clip=self.action_noise_clip,
            clip=1.0,
        )

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {
            "q_model": self.q_model,
            "target_model": self.target_model,
            "target_q_model": self.target_q_model,
        }

    def _target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [(self.target_model, self._plain_model()), (self.target_q_model, self.q_model)]

    def inference_policy(self, device: torch.device | str | int = "cpu") -> torch.nn.Module:
        """A frozen copy of the policy on ``device`` acting as in eval mode: ``mu`` mapped
        onto the action space's [low, high] (an ``InferencePolicy``; see ``export_policy``)."""
        return agent_inference_policy(self, "scaled", device, bounds=self._bounds())

    def mu_parameters(self) -> Iterator[torch.nn.Parameter]:
        """The policy's parameters, for the mu optimizer."""
        return self.parameters()

    def q_parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.q_model.parameters()

    def __call__(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """The policy's action ``mu`` in [-1, 1], with grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self._require_model()(*inputs)

    def q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> torch.Tensor:
        """Q(s, a) for ``action`` in [-1, 1], with grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self.q_model(*inputs, action.to(self.device))

    def q_at_mu(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        """Q(s, mu(s)), with grad into the policy (and the critic)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self.q_model(*inputs, self._require_model()(*inputs))

    @torch.no_grad()
    def target_q_at_mu(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Q_target(s, mu_target(s)), no grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self.target_q_model(*inputs, self.target_model(*inputs))

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Noisy actions in the environment's units: ``AgentStep(action, AgentInfoDdpg(mu))``."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        mu = self._require_model()(*inputs)
        action = self._uniform_pretraining(mu)
        if action is None:
            action = self.distribution.sample(DistInfoStd(mean=mu, log_std=None))
        agent_info = AgentInfoDdpg(mu=self._env_action(mu))
        return buffer_to(AgentStep(self._env_action(action), agent_info), device=self.output_device)

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        pretrain_std = self._pretraining_std() if self._pretraining else None
        self.distribution.set_std(self.action_std if pretrain_std is None else pretrain_std)

    def eval_mode(self, itr: int) -> None:
        super().eval_mode(itr)
        self.distribution.set_std(0.0)


class Td3Agent(DdpgAgent):
    """TD3: ``DdpgAgent`` with twin critics (``q_model``, ``q2_model`` and their targets) and
    target policy smoothing: ``target_q_at_mu`` evaluates the target critics at
    ``clip(mu_target(s') + clip(N(0, target_noise_std), +-target_noise_clip), -1, 1)``
    (noise in [-1, 1] units). Sampling uses ``pretrain_std`` before ``min_itr_learn``.

    ``state_dict()`` adds ``q2_model`` and ``target_q2_model`` to DdpgAgent's.
    """

    def __init__(
        self,
        pretrain_std: PretrainStd = 0.5,
        target_noise_std: float = 0.2,
        target_noise_clip: float | None = 0.5,
        initial_q2_model_state_dict: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(pretrain_std=pretrain_std, **kwargs)
        self.target_noise_std = _check_number(
            "target_noise_std", target_noise_std, allow_none=False
        )
        self.target_noise_clip = _check_number("target_noise_clip", target_noise_clip, True)
        self.initial_q2_model_state_dict = initial_q2_model_state_dict

    def _build_networks(self) -> None:
        super()._build_networks()
        self.q2_model = self._make_q_model(self.initial_q2_model_state_dict)
        self.target_q2_model = self._target_of(self.q2_model, self._make_q_model())
        self.target_distribution = Gaussian(
            dim=self.env_model_kwargs["action_size"],
            std=self.target_noise_std,
            noise_clip=self.target_noise_clip,
            clip=1.0,
        )

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {
            **super()._networks(),
            "q2_model": self.q2_model,
            "target_q2_model": self.target_q2_model,
        }

    def _target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [*super()._target_pairs(), (self.target_q2_model, self.q2_model)]

    def _distributions(self) -> list[Gaussian]:
        return [*super()._distributions(), self.target_distribution]

    def q_parameters(self) -> Iterator[torch.nn.Parameter]:
        """Both critics' parameters."""
        return itertools.chain(self.q_model.parameters(), self.q2_model.parameters())

    def q(  # type: ignore[override]
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q1, q2)`` of the twin critics for ``action`` in [-1, 1], with grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        action = action.to(self.device)
        return self.q_model(*inputs, action), self.q2_model(*inputs, action)

    @torch.no_grad()
    def target_q_at_mu(
        self, observation: Any, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The twin target critics at the smoothed target action, no grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        mu = self.target_model(*inputs)
        action = self.target_distribution.sample(DistInfoStd(mean=mu, log_std=None))
        return self.target_q_model(*inputs, action), self.target_q2_model(*inputs, action)


class SacAgent(_QpgAgent):
    """SAC: a tanh-squashed Gaussian policy (``ModelCls``, default ``PiMlpModel``, gives the
    mean and log_std before the squash) and twin critics with target networks (no policy
    target); hidden sizes default to [256, 256].

    ``pi`` returns a reparameterised sample ``tanh(u)`` with its log-likelihood, the tanh
    correction included. Sample mode uses ``pretrain_std`` around the mean before
    ``min_itr_learn`` (``"uniform"``: uniform actions in the box); eval mode acts with ``tanh(mean)``. The temperature belongs to the
    algorithm. ``state_dict()`` holds ``model``, ``q1_model``, ``q2_model``,
    ``target_q1_model`` and ``target_q2_model``.
    """

    def __init__(
        self,
        ModelCls: ModelFactory = PiMlpModel,
        QModelCls: ModelFactory = QofMuMlpModel,
        model_kwargs: Mapping[str, Any] | None = None,
        q_model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
        pretrain_std: PretrainStd = 0.75,
    ):
        super().__init__(
            ModelCls,
            QModelCls,
            _with_default_sizes(model_kwargs, [256, 256]),
            _with_default_sizes(q_model_kwargs, [256, 256]),
            initial_model_state_dict,
            pretrain_std,
        )

    def _build_networks(self) -> None:
        self.q1_model = self._make_q_model()
        self.q2_model = self._make_q_model()
        self.target_q1_model = self._target_of(self.q1_model, self._make_q_model())
        self.target_q2_model = self._target_of(self.q2_model, self._make_q_model())
        self.distribution = Gaussian(
            dim=self.env_model_kwargs["action_size"],
            squash=1.0,
            min_std=math.exp(LOG_STD_MIN),
            max_std=math.exp(LOG_STD_MAX),
        )

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {
            "q1_model": self.q1_model,
            "q2_model": self.q2_model,
            "target_q1_model": self.target_q1_model,
            "target_q2_model": self.target_q2_model,
        }

    def _target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [(self.target_q1_model, self.q1_model), (self.target_q2_model, self.q2_model)]

    def inference_policy(self, device: torch.device | str | int = "cpu") -> torch.nn.Module:
        """A frozen copy of the policy on ``device`` acting as in eval mode: ``tanh(mean)``
        mapped onto the action space's [low, high] (an ``InferencePolicy``; see
        ``export_policy``)."""
        return agent_inference_policy(self, "tanh_scaled", device, bounds=self._bounds())

    def pi_parameters(self) -> Iterator[torch.nn.Parameter]:
        """The policy's parameters, for the pi optimizer."""
        return self.parameters()

    def q_parameters(self) -> Iterator[torch.nn.Parameter]:
        """Both critics' parameters."""
        return itertools.chain(self.q1_model.parameters(), self.q2_model.parameters())

    def _dist_info(self, inputs: tuple) -> Any:
        mean, log_std = self._require_model()(*inputs)
        return DistInfoStd(mean=mean, log_std=log_std)

    def pi(
        self, observation: Any, prev_action: Any, prev_reward: Any
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``(action in [-1, 1], log_pi [...], dist_info)``: a new reparameterised sample
        and its log-likelihood, with grad."""
        dist_info = self._dist_info(self._model_inputs(observation, prev_action, prev_reward))
        action, log_pi = self.distribution.sample_loglikelihood(dist_info)
        return action, log_pi, dist_info

    __call__ = pi

    def q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q1, q2)`` for ``action`` in [-1, 1], with grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        action = action.to(self.device)
        return self.q1_model(*inputs, action), self.q2_model(*inputs, action)

    @torch.no_grad()
    def target_q(
        self, observation: Any, prev_action: Any, prev_reward: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The target critics' ``(q1, q2)`` for ``action`` in [-1, 1], no grad."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        action = action.to(self.device)
        return self.target_q1_model(*inputs, action), self.target_q2_model(*inputs, action)

    @torch.no_grad()
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Actions in the environment's units: ``AgentStep(action, AgentInfoSac(dist_info))``."""
        dist_info = self._dist_info(self._model_inputs(observation, prev_action, prev_reward))
        uniform = self._uniform_pretraining(dist_info.mean)
        if self._mode == "eval":
            action = torch.tanh(dist_info.mean)
        elif uniform is not None:
            action = uniform
        elif self._pretraining and (std := self._pretraining_std()) is not None:
            action = torch.tanh(dist_info.mean + torch.randn_like(dist_info.mean) * std)
        else:
            action = self.distribution.sample(dist_info)
        agent_info = AgentInfoSac(dist_info=dist_info)
        return buffer_to(AgentStep(self._env_action(action), agent_info), device=self.output_device)
