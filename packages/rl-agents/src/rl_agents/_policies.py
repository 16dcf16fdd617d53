"""Deployable policies: the acting part of a trained agent as a standalone module.

``agent.inference_policy()`` returns an ``InferencePolicy`` (or, for recurrent agents, a
``RecurrentInferencePolicy``): a frozen copy of the agent's acting weights, normalisation
statistics included, that maps observations ``[B, ...]`` to the actions of the agent's
deterministic evaluation. A recurrent one keeps its state inside: ``policy(observation,
prev_reward=None)``, ``reset(env_mask=None)``. ``export_policy`` (``_inference``) writes
either kind to a file. What each agent's policy returns, the recurrent state and the exported
interfaces: the package README, "Deploying policies and reusing weights".
"""

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
import torch.nn.functional as F

from ._base_agent import BaseAgent
from ._dqn_models import DistributionalDuelingHeadModel, DuelingHeadModel
from ._model_utils import lstm_dtype
from ._policy_specs import (
    action_spec_of,
    model_and_spaces,
    observation_spec_of,
    recurrent_state_spec,
)

if TYPE_CHECKING:  # (it imports this module)
    from ._asymmetric_pg import AsymmetricBranch

__all__ = ["InferencePolicy", "RecurrentInferencePolicy", "agent_inference_policy"]

# How the first model output becomes the action (see _ActionSelector).
_RULES = ("argmax", "softmax_argmax", "mean", "expected_argmax", "scaled", "tanh_scaled")


# ----------------------------------------------------------------- building blocks


class _ActionSelector(torch.nn.Module):
    """The deterministic action from a model's first output:

    * ``argmax``: of probabilities or Q-values ``[B, A]``;
    * ``softmax_argmax``: of the softmax of logits (the agent takes the argmax of the
      probabilities, so the same ops are applied here, ties included);
    * ``mean``: the output as it is;
    * ``expected_argmax``: of ``softmax(logits [B, A, n_atoms]) . atoms``;
    * ``scaled`` / ``tanh_scaled``: [-1, 1] actions (after a tanh) mapped onto ``[low,
      high]``, clamped, as the Q-policy-gradient agents' ``step`` does.
    """

    atoms: torch.Tensor  # buffers, registered for the rules that use them
    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        rule: str,
        atoms: torch.Tensor | None = None,
        low: torch.Tensor | None = None,
        high: torch.Tensor | None = None,
    ):
        super().__init__()
        if rule not in _RULES:
            raise ValueError(f"rule must be one of {_RULES}, got {rule!r}")
        self.rule = rule
        if rule == "expected_argmax":
            if atoms is None:
                raise ValueError("rule 'expected_argmax' needs the atom values")
            self.register_buffer("atoms", atoms.detach().clone())
        if rule in ("scaled", "tanh_scaled"):
            if low is None or high is None:
                raise ValueError(f"rule {rule!r} needs the action bounds low and high")
            self.register_buffer("low", low.detach().clone())
            self.register_buffer("high", high.detach().clone())

    def forward(self, output: torch.Tensor) -> torch.Tensor:
        if self.rule == "argmax":
            return torch.argmax(output, dim=-1)
        if self.rule == "softmax_argmax":
            return torch.argmax(F.softmax(output, dim=-1), dim=-1)
        if self.rule == "mean":
            return output
        if self.rule == "expected_argmax":
            p = F.softmax(output, dim=-1)
            q = torch.tensordot(p, self.atoms.to(dtype=p.dtype), dims=1)
            return torch.argmax(q, dim=-1)
        if self.rule == "tanh_scaled":
            output = torch.tanh(output)
        low, high = self.low.to(output.dtype), self.high.to(output.dtype)
        return torch.clamp(low + (output + 1) * ((high - low) / 2), low, high)


class _PrevActionEncoder(torch.nn.Module):
    """The previous action as the model takes it: integer actions one-hot encoded (float)
    when ``onehot`` (the number of actions) is set, anything else as it is."""

    def __init__(self, onehot: int):
        super().__init__()
        self.onehot = int(onehot)

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        if self.onehot:
            classes = torch.arange(self.onehot, device=action.device)
            return (action.unsqueeze(-1) == classes).to(torch.float32)
        return action


def _first(outputs: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """A model's first output (its only one when it returns a tensor)."""
    return outputs if isinstance(outputs, torch.Tensor) else outputs[0]


def _first_leaf(observation: Any) -> torch.Tensor:
    """The observation, or the first tensor of a namedarraytuple of them (Dict observations)."""
    while not isinstance(observation, torch.Tensor):
        observation = getattr(observation, observation._fields[0])
    return observation


class _ModelCore(torch.nn.Module):
    """A feed-forward agent model as ``observation [B, ...] -> action [B, ...]``. The
    model also takes the previous action and reward, which feed-forward models do not read:
    they get zeros (the null action, encoded as the agent encodes it)."""

    def __init__(
        self,
        model: torch.nn.Module,
        select: _ActionSelector,
        encoder: _PrevActionEncoder,
        action_shape: Sequence[int],
        action_dtype: torch.dtype,
    ):
        super().__init__()
        self.model, self.select, self.encoder = model, select, encoder
        self.action_shape = [int(s) for s in action_shape]
        self.action_dtype = action_dtype

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        leaf = _first_leaf(observation)  # (a Dict observation: its first field)
        batch, device = leaf.shape[0], leaf.device
        prev_action = torch.zeros(
            [batch, *self.action_shape], dtype=self.action_dtype, device=device
        )
        prev_reward = torch.zeros([batch], device=device)
        outputs = self.model(observation, self.encoder(prev_action), prev_reward)
        return self.select(_first(outputs))


class _RecurrentModelCore(torch.nn.Module):
    """A recurrent agent model with its state explicit: ``(observation, h, c, prev_action,
    prev_reward) -> (action, h, c)``; the model's state is an ``(h, c)`` pair (as
    ``RnnState``) in ``[num_layers, B, hidden_size]`` layout."""

    def __init__(
        self, model: torch.nn.Module, select: _ActionSelector, encoder: _PrevActionEncoder
    ):
        super().__init__()
        self.model, self.select, self.encoder = model, select, encoder

    def forward(
        self,
        observation: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        *outputs, state = self.model(observation, self.encoder(prev_action), prev_reward, (h, c))
        next_h, next_c = state
        return self.select(outputs[0]), next_h, next_c


class _ActorCore(torch.nn.Module):
    """The actor branch of an asymmetric model (normalisation, MLP torso, head) as
    ``actor observation [B, ...] -> action``."""

    def __init__(self, branch: "AsymmetricBranch", select: _ActionSelector):
        super().__init__()
        self.branch, self.select = branch, select

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        features = self.branch.features(observation, 1, observation.shape[0])
        return self.select(self.branch.head(features))


class _RecurrentActorCore(torch.nn.Module):
    """The actor branch of an asymmetric LSTM model with its state explicit, as
    ``_RecurrentModelCore``; the LSTM reads the previous action and reward too."""

    def __init__(
        self, branch: "AsymmetricBranch", select: _ActionSelector, encoder: _PrevActionEncoder
    ):
        super().__init__()
        self.branch, self.select, self.encoder = branch, select, encoder

    def forward(
        self,
        observation: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = observation.shape[0]
        dtype = self.branch.head.weight.dtype
        extra = torch.cat(
            [
                self.encoder(prev_action).to(dtype).reshape(1, batch, -1),
                prev_reward.to(dtype).reshape(1, batch, 1),
            ],
            dim=2,
        )
        features = self.branch.features(observation, 1, batch)
        out, (next_h, next_c) = self.branch.recurrent(features, extra, 1, batch, (h, c))
        return self.select(self.branch.head(out)), next_h, next_c


# ------------------------------------------------------------------ the policies


class InferencePolicy(torch.nn.Module):
    """A feed-forward deployable policy: ``forward(observation [B, ...]) -> action [B, ...]``,
    deterministic; ``reset(env_mask=None)`` does nothing (there is no state) and is there so
    deployment code can treat every policy alike.

    ``observation_shape`` and ``observation_dtype`` describe one environment's observation
    (the default example for ``export_policy``); ``batch_size`` is -1 (any) except in an
    exported module, which serves one batch size.
    """

    __jit_ignored_attributes__ = ["observation_dtype"]  # noqa: RUF012 (TorchScript reads a list)
    observation_shape: list[int]
    dict_observation = False  # (True: it takes Dict observations, and cannot be exported)

    def __init__(
        self,
        core: torch.nn.Module,
        observation_shape: Sequence[int],
        observation_dtype: torch.dtype = torch.float32,
        batch_size: int = -1,
    ):
        super().__init__()
        self.core = core
        self.observation_shape = [int(s) for s in observation_shape]
        self.observation_dtype = observation_dtype
        self.batch_size = int(batch_size)
        self.eval()

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if self.batch_size >= 0 and observation.shape[0] != self.batch_size:
            raise RuntimeError(
                "this exported policy serves batches of "
                + str(self.batch_size)
                + " observations, got "
                + str(observation.shape[0])
            )
        return self.core(observation)

    def reset(self, env_mask: torch.Tensor | None = None) -> None:
        """Nothing to forget (feed-forward)."""


class RecurrentInferencePolicy(torch.nn.Module):
    """A recurrent deployable policy: ``forward(observation [B, ...], prev_reward [B] =
    None) -> action [B, ...]``, deterministic, advancing the state it keeps (buffers ``h``
    and ``c`` ``[num_layers, B, hidden_size]`` and ``prev_action`` ``[B, ...]``).

    ``prev_reward`` is the reward the environments gave for the previous action (zeros
    when not given). ``reset()`` zeroes the whole state, ``reset(env_mask)`` the state of
    the environments where the ``[B]`` mask is true or non-zero (the caller gives zero
    ``prev_reward`` there at the next step, as the sampler does after an environment
    reset). The state is sized to the batch at the first call; a call with another batch
    size starts from zeros. ``batch_size`` is -1 (any) except in an exported module.
    """

    __jit_ignored_attributes__ = ["observation_dtype"]  # noqa: RUF012 (TorchScript reads a list)
    action_shape: list[int]
    observation_shape: list[int]
    h: torch.Tensor  # buffers
    c: torch.Tensor
    prev_action: torch.Tensor

    def __init__(
        self,
        core: torch.nn.Module,
        num_layers: int,
        hidden_size: int,
        action_shape: Sequence[int],
        action_dtype: torch.dtype,
        observation_shape: Sequence[int],
        observation_dtype: torch.dtype = torch.float32,
        batch_size: int = -1,
        state_dtype: torch.dtype = torch.float32,
        device: torch.device | str | int | None = None,
    ):
        super().__init__()
        self.core = core
        self.num_layers, self.hidden_size = int(num_layers), int(hidden_size)
        self.action_shape = [int(s) for s in action_shape]
        self.observation_shape = [int(s) for s in observation_shape]
        self.observation_dtype = observation_dtype
        self.batch_size = int(batch_size)
        batch = max(self.batch_size, 0)
        state = (self.num_layers, batch, self.hidden_size)
        self.register_buffer("h", torch.zeros(state, dtype=state_dtype, device=device), False)
        self.register_buffer("c", torch.zeros(state, dtype=state_dtype, device=device), False)
        prev_action = torch.zeros([batch, *self.action_shape], dtype=action_dtype, device=device)
        self.register_buffer("prev_action", prev_action, False)
        self.eval()

    def _zero_state(self, batch: int) -> None:
        shape = [self.num_layers, batch, self.hidden_size]
        self.h = torch.zeros(shape, dtype=self.h.dtype, device=self.h.device)
        self.c = torch.zeros(shape, dtype=self.c.dtype, device=self.c.device)
        self.prev_action = torch.zeros(
            [batch] + self.action_shape,  # noqa: RUF005 (TorchScript has no unpacking)
            dtype=self.prev_action.dtype,
            device=self.prev_action.device,
        )

    def forward(
        self,
        observation: torch.Tensor,
        prev_reward: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch = observation.shape[0]
        if self.batch_size >= 0 and batch != self.batch_size:
            raise RuntimeError(
                "this exported policy serves batches of "
                + str(self.batch_size)
                + " observations, got "
                + str(batch)
            )
        if self.h.shape[1] != batch:
            self._zero_state(batch)
        if prev_reward is None:
            reward = torch.zeros([batch], dtype=self.h.dtype, device=self.h.device)
        else:
            reward = prev_reward.to(dtype=self.h.dtype, device=self.h.device).reshape([batch])
        action, h, c = self.core(observation, self.h, self.c, self.prev_action, reward)
        self.h = h
        self.c = c
        self.prev_action = action.clone()
        return action

    def reset(self, env_mask: torch.Tensor | None = None) -> None:
        """Zero the state of every environment, or of those where ``env_mask`` ([B], bool
        or numbers) is true / non-zero."""
        self._reset(env_mask)

    def _reset(self, env_mask: torch.Tensor | None) -> None:
        if env_mask is None:
            self._zero_state(self.h.shape[1])
            return
        mask = (env_mask != 0).reshape([-1]).to(self.h.device)
        if self.h.shape[1] == 0:
            return  # no state yet: the first call starts from zeros anyway
        if mask.shape[0] != self.h.shape[1]:
            raise RuntimeError(
                "env_mask has "
                + str(mask.shape[0])
                + " entries for a state of "
                + str(self.h.shape[1])
                + " environments"
            )
        state_mask = mask.reshape([1, -1, 1])
        self.h = torch.where(state_mask, torch.zeros_like(self.h), self.h)
        self.c = torch.where(state_mask, torch.zeros_like(self.c), self.c)
        action_mask = mask.reshape([-1] + [1] * len(self.action_shape))
        self.prev_action = torch.where(
            action_mask, torch.zeros_like(self.prev_action), self.prev_action
        )


# ------------------------------------------------------------- made from agents


class _DuelingHead(DuelingHeadModel):
    """``DuelingHeadModel`` without the gradient scaling into its input: ``ScaleGrad`` is
    the identity in the forward pass and, a Python autograd function, cannot be held by
    TorchScript."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(input)
        return self.value(input) + (advantage - advantage.mean(dim=-1, keepdim=True))


class _DistributionalDuelingHead(DistributionalDuelingHeadModel):
    """``DistributionalDuelingHeadModel`` without the gradient scaling (as ``_DuelingHead``)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(input)
        value = self.value(input).unsqueeze(-2)
        return value + (advantage - advantage.mean(dim=-2, keepdim=True))


_FORWARD_ONLY = {
    DuelingHeadModel: _DuelingHead,
    DistributionalDuelingHeadModel: _DistributionalDuelingHead,
}


_ModuleT = TypeVar("_ModuleT", bound=torch.nn.Module)


def _frozen_copy(module: _ModuleT, device: torch.device) -> _ModuleT:
    """A copy of ``module`` on ``device``, in eval mode, without gradients; its dueling
    heads compute the same forward pass without the gradient scaling."""
    module = copy.deepcopy(module).to(device)
    for sub in module.modules():
        forward_only = _FORWARD_ONLY.get(type(sub))
        if forward_only is not None:
            sub.__class__ = forward_only
    return module.eval().requires_grad_(False)


def agent_inference_policy(
    agent: BaseAgent,
    rule: str,
    device: torch.device | str | int = "cpu",
    atoms: torch.Tensor | None = None,
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    actor_only: bool = False,
) -> InferencePolicy | RecurrentInferencePolicy:
    """The deployable policy of ``agent`` (what its ``inference_policy`` returns): a frozen
    copy of its model (``actor_only``: of the asymmetric model's actor branch) whose first
    output becomes the action by ``rule`` (see ``_ActionSelector``)."""
    model, env_spaces = model_and_spaces(agent)
    device = torch.device(device)
    low, high = (None, None) if bounds is None else bounds
    select = _ActionSelector(rule, atoms=atoms, low=low, high=high).to(device)
    action_spec = action_spec_of(agent, env_spaces)
    action_shape, action_dtype, onehot = action_spec
    encoder = _PrevActionEncoder(onehot)
    recurrent = bool(getattr(agent, "recurrent", False))
    composite = hasattr(env_spaces.observation, "names") and not actor_only
    if composite:  # (Dict observations, or an action mask: a Python policy, not exportable)
        if recurrent:
            raise ValueError(
                f"{type(agent).__name__}: no inference policy for a recurrent agent of Dict "
                "observations (or of an action mask); act with agent.step in eval mode"
            )
        observation_shape: tuple[int, ...] = ()
        observation_dtype = torch.float32
    else:
        observation_shape, observation_dtype = observation_spec_of(
            env_spaces.observation, actor_only
        )
    if actor_only:
        # The asymmetric model one-hot encodes integer actions itself: so does its actor here.
        if onehot == 0 and not action_dtype.is_floating_point:
            encoder = _PrevActionEncoder(int(env_spaces.action.n))
        # An asymmetric model (the agents that ask for actor_only have one): its actor branch.
        branch = _frozen_copy(cast("AsymmetricBranch", model.actor), device)
        if not recurrent:
            return InferencePolicy(_ActorCore(branch, select), observation_shape, observation_dtype)
        lstm = branch.lstm
        assert lstm is not None  # a recurrent agent's asymmetric model is an LSTM one
        core: torch.nn.Module = _RecurrentActorCore(branch, select, encoder)
        num_layers, hidden_size, state_dtype = lstm.num_layers, lstm.hidden_size, lstm_dtype(lstm)
    else:
        model = _frozen_copy(model, device)
        if not recurrent:
            core = _ModelCore(model, select, encoder, action_shape, action_dtype)
            policy = InferencePolicy(core, observation_shape, observation_dtype)
            policy.dict_observation = composite
            return policy
        core = _RecurrentModelCore(model, select, encoder)
        num_layers, hidden_size, state_dtype = recurrent_state_spec(
            model, encoder, observation_shape, action_spec, device
        )
    if action_dtype.is_floating_point:
        action_dtype = state_dtype
    return RecurrentInferencePolicy(
        core,
        num_layers,
        hidden_size,
        action_shape,
        action_dtype,
        observation_shape,
        observation_dtype,
        state_dtype=state_dtype,
        device=device,
    )
