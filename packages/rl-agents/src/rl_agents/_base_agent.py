"""The agent lifecycle shared by every agent (``BaseAgent``), and ``RnnStates``, the
recurrent state a recurrent agent keeps for the sampler's environments between steps.

Parameter sharing between processes (synchronous and asynchronous modes) is described in
the package README.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import torch
from torch.nn.parallel import DistributedDataParallel

from rl_arrays import EnvSpaces, buffer_func, buffer_method, buffer_to

from ._action_mask import MASK_FIELD, ActionMaskedModel, is_action_masked, model_env_spaces
from ._distributions import DiscreteMixin, Distribution
from ._model_sharing import PipeLock, publish, receive
from ._model_utils import set_training_mode, strip_ddp_state_dict, wrap_data_parallel

__all__ = ["AlternatingRecurrentAgentMixin", "BaseAgent", "RecurrentAgentMixin"]

# What an agent's ModelCls is: a model class, or any callable that builds a model from kwargs.
ModelFactory = Callable[..., torch.nn.Module]


class BaseAgent(abc.ABC):
    """One model, built in ``initialize`` as ``ModelCls(**env_model_kwargs, **model_kwargs)``
    where ``env_to_model_kwargs(env_spaces)`` (none: no such kwargs; a module-level function,
    so that the agent pickles for worker processes) supplies what depends on the environment;
    ``initial_model_state_dict`` is loaded into it.

    Subclasses define ``__call__`` (training forward pass, with grad, outputs on ``device``)
    and ``step`` (actions for the sampler, outputs on ``output_device``: the CPU unless a
    sampler sets it). A recurrent agent holds an ``RnnStates`` in ``rnn_states`` (see
    ``keep_rnn_state``); ``reset``, ``reset_one``, ``reset_done`` and the modes act on it.
    """

    recurrent = False
    alternating = False
    onehot_prev_action = False  # whether the model gets the previous action one-hot encoded
    # How an observation's action mask applies to the model's first output (see
    # ``ActionMaskedModel``); None: this agent cannot mask actions.
    mask_kind: str | None = None
    action_masked = False  # whether the observations carry an action mask (initialize)

    def __init__(
        self,
        ModelCls: ModelFactory | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
        env_to_model_kwargs: Callable[[EnvSpaces], dict[str, Any]] | None = None,
    ):
        self.ModelCls = ModelCls
        self.model_kwargs = dict(model_kwargs or {})
        self.initial_model_state_dict = initial_model_state_dict
        self.env_to_model_kwargs = env_to_model_kwargs
        self.rnn_states: RnnStates | None = None
        self.model: torch.nn.Module | None = None
        self.shared_model: torch.nn.Module | None = None
        self.distribution: Distribution | None = None
        self.device = torch.device("cpu")
        self.output_device = torch.device("cpu")
        self.env_spaces: EnvSpaces | None = None
        self.env_model_kwargs: dict[str, Any] = {}
        self.share_memory = False
        self.global_B = 1
        self.env_ranks: Sequence[int] | None = None
        self._mode: str | None = None
        self._send_count: torch.Tensor | None = None
        self._recv_count = 0
        self._rw_lock: PipeLock | None = None

    # -------------------------------------------------------------------- setup

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict[str, Any]:
        """Model keyword arguments that depend on the environment: ``env_to_model_kwargs``'s."""
        if self.env_to_model_kwargs is None:
            return {}
        return self.env_to_model_kwargs(env_spaces)

    def keep_rnn_state(self, alternating: bool = False) -> None:
        """Make the agent recurrent: it keeps the sampler environments' state between steps
        (``alternating``: one state per group of an alternating sampler)."""
        self.recurrent, self.alternating = True, bool(alternating)
        self.rnn_states = RnnStates(alternating)

    def initialize(
        self,
        env_spaces: EnvSpaces,
        share_memory: bool = False,
        global_B: int = 1,
        env_ranks: Sequence[int] | None = None,
    ) -> None:
        """Build the model for ``env_spaces`` (an object with ``observation`` and ``action``
        spaces). With ``share_memory`` the model lives on CPU shared memory (before worker
        processes start). ``global_B`` and ``env_ranks`` (the total number of sampler
        environments and this agent's indexes among them) are kept for agents whose
        exploration differs per environment."""
        if self.ModelCls is None:
            raise ValueError(f"{type(self).__name__} needs a ModelCls")
        self.env_spaces = env_spaces
        self.action_masked = is_action_masked(env_spaces)
        if self.action_masked and self.mask_kind is None:
            raise ValueError(
                f"{type(self).__name__} cannot mask actions, but the observation has an "
                f"{MASK_FIELD!r}: the categorical policy-gradient agents and DqnAgent can"
            )
        self.env_model_kwargs = self.make_env_to_model_kwargs(model_env_spaces(env_spaces))
        clash = sorted(self.env_model_kwargs.keys() & self.model_kwargs.keys())
        if clash:
            raise ValueError(
                f"model_kwargs must not set {clash}: {type(self).__name__} derives them from "
                "env_spaces"
            )
        model = self.model = self._make_model()
        if self.initial_model_state_dict is not None:
            model.load_state_dict(strip_ddp_state_dict(self.initial_model_state_dict))
        self.share_memory = bool(share_memory)
        self.global_B, self.env_ranks = global_B, env_ranks
        if share_memory:
            model.share_memory()
            self.shared_model = model
            self._send_count = torch.zeros((), dtype=torch.int64).share_memory_()
            self._rw_lock = PipeLock()

    def _make_model(self) -> torch.nn.Module:
        if self.ModelCls is None:
            raise ValueError(f"{type(self).__name__} needs a ModelCls")
        model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        if self.action_masked:
            assert self.mask_kind is not None  # (initialize checked it)
            return ActionMaskedModel(model, self.mask_kind)
        return model

    def _require_model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError(f"{type(self).__name__} has no model yet: call initialize() first")
        return self.model

    def _plain_model(self) -> torch.nn.Module:
        """The model without its DistributedDataParallel wrapper, if any."""
        model = self._require_model()
        return model.module if isinstance(model, DistributedDataParallel) else model

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Move the model to GPU ``cuda_idx`` (None: stay on the CPU). A shared model is
        left in place on CPU shared memory and the agent trains a GPU copy of it."""
        if cuda_idx is None:
            return
        model = self._require_model()
        device = torch.device("cuda", cuda_idx)
        if self.shared_model is not None and model is self.shared_model:
            model = self._make_model()
            model.load_state_dict(self.shared_model.state_dict())
        self.model = model.to(device)
        self.device = device

    def data_parallel(self) -> int | None:
        """Wrap the model in DistributedDataParallel (one process per GPU or per CPU group);
        torch.distributed must be initialised. Returns the GPU index (None on CPU).

        Buffers are not broadcast at each forward: only some processes run some forward
        passes (evaluation on rank 0), and a broadcast there would wait forever for the
        others; buffers that must agree (normalisation statistics) are all-reduced when
        they are updated."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "data_parallel() needs torch.distributed initialised "
                "(torch.distributed.init_process_group) in every training process"
            )
        model = self._require_model()
        if not isinstance(model, DistributedDataParallel):
            self.model = wrap_data_parallel(model, self.device)
        return self.device.index if self.device.type == "cuda" else None

    def leave_data_parallel(self) -> None:
        """Unwrap the model from DistributedDataParallel (nothing if it is not wrapped).
        The wrapper holds the process group: released before the group is destroyed, the
        group ends while the interpreter is whole, instead of in its exit, where gloo's
        teardown sometimes aborts the process (a torchrun job then fails at its end)."""
        if isinstance(self.model, DistributedDataParallel):
            self.model = self.model.module

    def async_cpu(self, share_memory: bool = True) -> None:
        """In an asynchronous sampler's process: give the sampler a CPU model of its own,
        separate from the model shared with the training process, so training never
        writes into it while it acts (``recv_shared_memory`` refreshes it). With
        ``share_memory`` the new model is itself shared, with the sampler's workers. Does
        nothing when the agent is already on a GPU (``to_device`` made a separate model)."""
        if self.device.type != "cpu":
            return
        shared, send_count, lock = self._require_shared("async_cpu")
        model = self._make_model()
        self._recv_count = receive(model, shared, send_count, lock)
        if share_memory:
            model.share_memory()
        self.model = model

    def _require_shared(self, what: str) -> tuple[torch.nn.Module, torch.Tensor, PipeLock]:
        """The shared model, the count of updates sent to it and the lock over both."""
        if self.shared_model is None or self._send_count is None or self._rw_lock is None:
            raise RuntimeError(f"{what}() needs the agent initialized with share_memory=True")
        return self.shared_model, self._send_count, self._rw_lock

    # ------------------------------------------------------- parameter sharing

    def sync_shared_memory(self) -> None:
        """Copy the trained parameters into the shared model, for parallel sampler
        workers; nothing to do when training uses the shared model itself (CPU) or when
        the agent shares no memory."""
        if self.shared_model is not None and self._plain_model() is not self.shared_model:
            self.shared_model.load_state_dict(self._plain_model().state_dict())

    def send_shared_memory(self) -> None:
        """In the training process (asynchronous mode): publish the current parameters to
        the shared model under the lock, and count the update so the sampler knows."""
        shared, send_count, lock = self._require_shared("send_shared_memory")
        publish(self._plain_model(), shared, send_count, lock)

    def recv_shared_memory(self) -> None:
        """In the sampler's process (asynchronous mode): if an update was sent since the
        last one received, copy the shared parameters into this process's model under
        the lock."""
        shared, send_count, lock = self._require_shared("recv_shared_memory")
        model = self._plain_model()
        if model is shared or int(send_count) == self._recv_count:
            return
        self._recv_count = receive(model, shared, send_count, lock)

    # ------------------------------------------------------------------- modes

    def train_mode(self, itr: int) -> None:
        """Training: the model's ``train()`` mode (e.g. dropout on)."""
        self._set_mode("train", training=True)

    def sample_mode(self, itr: int) -> None:
        """Collecting training samples."""
        self._set_mode("sample", training=False)

    def eval_mode(self, itr: int) -> None:
        """Evaluating the agent (agents may act differently, e.g. less exploration)."""
        self._set_mode("eval", training=False)

    def _set_mode(self, mode: str, training: bool) -> None:
        set_training_mode(self._require_model(), training)
        if self.rnn_states is not None:
            self.rnn_states.set_mode(mode)
        self._mode = mode

    # ------------------------------------------------------------------ acting

    @abc.abstractmethod
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model on training data, with grad (for the algorithm)."""

    @abc.abstractmethod
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Select actions for the sampler: an ``AgentStep(action, agent_info)`` on
        ``output_device``."""

    def _model_inputs(
        self, observation: Any, prev_action: Any, prev_reward: Any
    ) -> tuple[Any, Any, Any]:
        """The inputs on the agent's device, the previous action one-hot encoded when
        ``onehot_prev_action``."""
        self._require_model()
        observation, prev_action, prev_reward = buffer_to(
            (observation, prev_action, prev_reward), device=self.device
        )
        if self.onehot_prev_action:  # set by the agents of discrete actions only
            prev_action = cast(DiscreteMixin, self.distribution).to_onehot(prev_action)
        return observation, prev_action, prev_reward

    def reset(self) -> None:
        """Zero the recurrent state of every environment (feed-forward agents keep none)."""
        if self.rnn_states is not None:
            self.rnn_states.reset()

    def reset_one(self, idx: int) -> None:
        """Zero the recurrent state of environment ``idx`` (e.g. after its episode ended)."""
        if self.rnn_states is not None:
            self.rnn_states.reset_one(idx)

    def reset_done(self, done: torch.Tensor) -> None:
        """Zero the recurrent state of every environment where ``done`` [B] is True, on
        ``done``'s device, without reading it on the host."""
        if self.rnn_states is not None:
            self.rnn_states.reset_done(done)

    @property
    def prev_rnn_state(self) -> Any:
        """The recurrent state the next ``step`` starts from (None: zeros, or not recurrent)."""
        return None if self.rnn_states is None else self.rnn_states.current

    def advance_rnn_state(self, new_rnn_state: Any) -> None:
        """Take the state computed by this step as the start of the next one."""
        if self.rnn_states is None:
            raise RuntimeError(f"{type(self).__name__} is not recurrent: it keeps no rnn state")
        self.rnn_states.advance(new_rnn_state)

    def _step_rnn_state(self, prev_rnn_state: Any, rnn_state: Any, unbatched: bool) -> Any:
        """Advance to ``rnn_state``; returns ``prev_rnn_state`` as the sampler stores it:
        batch-first [B, N, H] (zeros for None; [N, H] for ``unbatched`` inputs)."""
        if prev_rnn_state is None:
            prev_rnn_state = buffer_func(rnn_state, torch.zeros_like)
        stored = buffer_method(prev_rnn_state, "transpose", 0, 1)
        if unbatched:
            stored = buffer_method(stored, "squeeze", 0)
        self.advance_rnn_state(rnn_state)
        return stored

    def inference_policy(self, device: torch.device | str | int = "cpu") -> torch.nn.Module:
        """A standalone copy of the deterministic policy, for deployment and
        ``export_policy`` (see ``rl_agents.InferencePolicy``); agents that support it
        override this."""
        raise NotImplementedError(
            f"{type(self).__name__} has no inference_policy(): only the policy-gradient, "
            "DQN-family and Q-policy-gradient agents of rl_agents make one"
        )

    # --------------------------------------------------------- state and params

    def state_dict(self) -> dict[str, Any]:
        """The model's state dict (without any DistributedDataParallel key prefix)."""
        return self._plain_model().state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a state dict from ``state_dict()`` (a ``module.`` prefix is accepted)."""
        self._plain_model().load_state_dict(strip_ddp_state_dict(state_dict))

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return self._require_model().parameters()

    def gradient_groups(self) -> list[list[torch.Tensor]]:
        """The gradients of each network the model holds (e.g. the policy's and the value
        function's), as views that clipping may scale in place: the model's
        ``gradient_groups()``. TypeError for a model without separate networks."""
        groups = getattr(self._plain_model(), "gradient_groups", None)
        if groups is None:
            raise TypeError(
                f"{type(self._plain_model()).__name__} has no gradient_groups(): its networks "
                "(if several) share parameters, so their gradients cannot be told apart"
            )
        return groups()

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self._plain_model().named_parameters()

    @property
    def update_obs_rms(self) -> Callable[[Any], None]:
        """``update_obs_rms(observation)``: fold a batch of observations into the model's
        normalisation statistics. Present only when the model normalises observations
        (``hasattr(agent, "update_obs_rms")`` tells an algorithm whether to call it)."""
        model = None if self.model is None else self._plain_model()
        if not (
            getattr(model, "normalize_observation", False) and hasattr(model, "update_obs_rms")
        ):
            raise AttributeError(
                f"{type(self).__name__} has no update_obs_rms: its model does not normalise "
                "observations"
            )
        return self._update_obs_rms

    def _update_obs_rms(self, observation: Any) -> None:
        self._plain_model().update_obs_rms(buffer_to(observation, self.device))  # type: ignore[operator]


def _batch_size(rnn_state: Any) -> int:
    """B of a recurrent state in [N, B, H] layout (read from its first field)."""
    return int(tuple.__getitem__(rnn_state, 0).shape[1])


class RnnStates:
    """The recurrent state of the sampler's environments, kept between ``step`` calls so the
    sampler need not know about it: [N, B, H] layout (B: environment), None meaning zeros.

    Leaving sample mode sets it aside and starts from None; coming back to sample mode
    restores it. With ``alternating`` (samplers whose two groups of environments take turns)
    it keeps one state per group and ``advance`` passes the turn to the other group, except
    in eval mode, where one state serves the batch given each step.
    """

    def __init__(self, alternating: bool = False):
        self.alternating = bool(alternating)
        self.turn = 0  # the group whose state the next step starts from
        self._states: list[Any] = [None, None]  # the second only used when alternating
        self._saved: tuple[list[Any], int] = ([None, None], 0)
        self._mode: str | None = None

    @property
    def _alternates(self) -> bool:
        return self.alternating and self._mode != "eval"

    @property
    def current(self) -> Any:
        return self._states[self.turn]

    def reset(self) -> None:
        self._states, self.turn = [None, None], 0

    def advance(self, new_rnn_state: Any) -> None:
        self._states[self.turn] = new_rnn_state
        if self._alternates:
            self.turn ^= 1

    def reset_one(self, idx: int) -> None:
        """``idx`` over all environments, the group that steps first numbered first."""
        first, second = self._states
        if first is None:
            return
        if not self._alternates or idx < _batch_size(first):
            first[:, idx] = 0
        elif second is not None:
            second[:, idx - _batch_size(first)] = 0

    def reset_done(self, done: torch.Tensor) -> None:
        if self.alternating:  # alternating samplers step on the CPU: one at a time is fine
            for idx in torch.nonzero(done).flatten().tolist():
                self.reset_one(idx)
        elif self._states[0] is not None:  # a masked fill: no host read
            keep = ~done.to(torch.bool).view(1, -1, 1)
            self._states[0] = buffer_func(self._states[0], lambda x: x * keep)

    def for_value(self, batch_size: int) -> Any:
        """The state for ``value`` on ``batch_size`` environments: both groups' side by side
        when they add up to it, else the current one."""
        first, second = self._states
        if (
            self._alternates
            and first is not None
            and second is not None
            and _batch_size(first) + _batch_size(second) == batch_size
        ):
            both = [torch.cat([a, b], dim=1) for a, b in zip(first, second, strict=True)]
            return first._make(both) if hasattr(first, "_make") else tuple(both)
        return self.current

    def set_mode(self, mode: str) -> None:
        if mode == "sample":
            if self._mode != "sample":
                states, self.turn = self._saved
                self._states = list(states)
        else:
            if self._mode == "sample":
                self._saved = (self._states, self.turn)
            self.reset()
        self._mode = mode


class RecurrentAgentMixin:
    """rlpyt's mixin, for agents of one's own: ``class MyAgent(RecurrentAgentMixin,
    MyAgentBase)`` keeps one recurrent state (``BaseAgent.keep_rnn_state``). The agents
    here take ``recurrent=True`` instead."""

    recurrent = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.keep_rnn_state()  # type: ignore[attr-defined]


class AlternatingRecurrentAgentMixin:
    """rlpyt's mixin for alternating samplers, used as ``RecurrentAgentMixin``: one state per
    group of environments. The agents here take ``alternating=True`` instead."""

    recurrent = True
    alternating = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.keep_rnn_state(alternating=True)  # type: ignore[attr-defined]
