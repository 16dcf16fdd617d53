"""The agent lifecycle shared by every agent, and the recurrent-state mixins.

An agent sits between the sampler and the algorithm: it builds its model from the
environment's spaces, selects actions in the sampler (``step``), runs the model on training
data for the algorithm (``__call__``), keeps recurrent state between sampler steps, owns the
model's device, and moves parameters between processes:

* synchronous parallel samplers: ``initialize(share_memory=True)`` puts the model on CPU
  shared memory before the workers start, so workers always read the current parameters;
  when training happens on a GPU, ``sync_shared_memory()`` copies them back into it;
* asynchronous runners: the training process keeps the shared model (or a GPU copy of it,
  ``to_device``) and publishes each update with ``send_shared_memory()``; the sampler's
  process takes a model of its own (``async_cpu``) and copies in the newest parameters with
  ``recv_shared_memory()``, both under a lock, with a shared counter of updates sent.
"""

from __future__ import annotations

import abc
import inspect
import multiprocessing as mp
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from rl_arrays import buffer_func, buffer_to

from ._model_utils import set_training_mode, strip_ddp_state_dict

__all__ = ["AlternatingRecurrentAgentMixin", "BaseAgent", "RecurrentAgentMixin"]

# DistributedDataParallel's option not to broadcast buffers at every forward pass, as named
# since torch 2.13 (before: broadcast_buffers, now deprecated).
_NO_FORWARD_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


class BaseAgent(abc.ABC):
    """One model, built in ``initialize`` as ``ModelCls(**env_model_kwargs, **model_kwargs)``
    where ``make_env_to_model_kwargs(env_spaces)`` supplies what depends on the environment
    (image shape, number of actions ...); ``initial_model_state_dict`` is loaded into it.

    Subclasses define ``__call__`` (training forward pass, with grad, outputs on
    ``device``) and ``step`` (action selection for the sampler, outputs on
    ``output_device``: the CPU, where most samplers write them, unless a sampler sets it;
    ``BatchedSampler`` sets its environment's device, so a GPU batch never visits the host).
    """

    recurrent = False
    alternating = False

    def __init__(
        self,
        ModelCls: Any = None,
        model_kwargs: Mapping[str, Any] | None = None,
        initial_model_state_dict: Mapping[str, Any] | None = None,
    ):
        self.ModelCls = ModelCls
        self.model_kwargs = dict(model_kwargs or {})
        self.initial_model_state_dict = initial_model_state_dict
        self.model: Any = None
        self.shared_model: torch.nn.Module | None = None
        self.distribution: Any = None
        self.device = torch.device("cpu")
        self.output_device = torch.device("cpu")
        self.env_spaces: Any = None
        self.env_model_kwargs: dict[str, Any] = {}
        self.share_memory = False
        self.global_B = 1
        self.env_ranks: Any = None
        self._mode: str | None = None
        self._send_count: torch.Tensor | None = None
        self._recv_count = 0
        self._rw_lock: Any = None

    # -------------------------------------------------------------------- setup

    def make_env_to_model_kwargs(self, env_spaces: Any) -> dict[str, Any]:
        """Model keyword arguments that depend on the environment (none here)."""
        return {}

    def initialize(
        self,
        env_spaces: Any,
        share_memory: bool = False,
        global_B: int = 1,
        env_ranks: Any = None,
    ) -> None:
        """Build the model for ``env_spaces`` (an object with ``observation`` and ``action``
        spaces). With ``share_memory`` the model lives on CPU shared memory (before worker
        processes start). ``global_B`` and ``env_ranks`` (the total number of sampler
        environments and this agent's indexes among them) are kept for agents whose
        exploration differs per environment."""
        if self.ModelCls is None:
            raise ValueError(f"{type(self).__name__} needs a ModelCls")
        self.env_spaces = env_spaces
        self.env_model_kwargs = self.make_env_to_model_kwargs(env_spaces)
        clash = sorted(self.env_model_kwargs.keys() & self.model_kwargs.keys())
        if clash:
            raise ValueError(
                f"model_kwargs must not set {clash}: {type(self).__name__} derives them from "
                "env_spaces"
            )
        self.model = self._make_model()
        if self.initial_model_state_dict is not None:
            self.model.load_state_dict(strip_ddp_state_dict(self.initial_model_state_dict))
        self.share_memory = bool(share_memory)
        self.global_B, self.env_ranks = global_B, env_ranks
        if share_memory:
            self.model.share_memory()
            self.shared_model = self.model
            self._send_count = torch.zeros((), dtype=torch.int64).share_memory_()
            # A spawn-context lock can be handed to children under every start method.
            self._rw_lock = mp.get_context("spawn").Lock()

    def _make_model(self) -> torch.nn.Module:
        return self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)

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
        if model is self.shared_model:
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
            if self.device.type == "cuda":
                index = self.device.index
                self.model = DistributedDataParallel(
                    model, device_ids=[index], output_device=index, **_NO_FORWARD_BUFFER_SYNC
                )
            else:
                self.model = DistributedDataParallel(model, **_NO_FORWARD_BUFFER_SYNC)
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
        shared = self._require_shared("async_cpu")
        model = self._make_model()
        with self._rw_lock:
            model.load_state_dict(shared.state_dict())
            self._recv_count = int(self._send_count)  # type: ignore[arg-type]
        if share_memory:
            model.share_memory()
        self.model = model

    def _require_shared(self, what: str) -> torch.nn.Module:
        if self.shared_model is None:
            raise RuntimeError(f"{what}() needs the agent initialized with share_memory=True")
        return self.shared_model

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
        shared = self._require_shared("send_shared_memory")
        model = self._plain_model()
        with self._rw_lock:
            if model is not shared:
                shared.load_state_dict(model.state_dict())
            self._send_count += 1  # type: ignore[operator]

    def recv_shared_memory(self) -> None:
        """In the sampler's process (asynchronous mode): if an update was sent since the
        last one received, copy the shared parameters into this process's model under
        the lock."""
        shared = self._require_shared("recv_shared_memory")
        model = self._plain_model()
        if model is shared or int(self._send_count) == self._recv_count:  # type: ignore[arg-type]
            return
        with self._rw_lock:
            model.load_state_dict(shared.state_dict())
            self._recv_count = int(self._send_count)  # type: ignore[arg-type]

    # ------------------------------------------------------------------- modes

    def train_mode(self, itr: int) -> None:
        """Training: the model's ``train()`` mode (e.g. dropout on)."""
        set_training_mode(self._require_model(), True)
        self._mode = "train"

    def sample_mode(self, itr: int) -> None:
        """Collecting training samples."""
        set_training_mode(self._require_model(), False)
        self._mode = "sample"

    def eval_mode(self, itr: int) -> None:
        """Evaluating the agent (agents may act differently, e.g. less exploration)."""
        set_training_mode(self._require_model(), False)
        self._mode = "eval"

    # ------------------------------------------------------------------ acting

    @abc.abstractmethod
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model on training data, with grad (for the algorithm)."""

    @abc.abstractmethod
    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any:
        """Select actions for the sampler: an ``AgentStep(action, agent_info)`` on
        ``output_device``."""

    def reset(self) -> None:  # noqa: B027 (a real no-op: feed-forward agents keep no state)
        """Forget any per-episode state (feed-forward agents have none)."""

    def reset_one(self, idx: int) -> None:  # noqa: B027 (a real no-op, as reset)
        """Forget the per-episode state of environment ``idx`` (none here)."""

    def reset_done(self, done: torch.Tensor) -> None:  # noqa: B027 (a real no-op, as reset)
        """Forget the per-episode state of every environment where ``done`` [B] is True, on
        ``done``'s device, without reading it on the host (none here)."""

    def inference_policy(self, device: Any = "cpu") -> torch.nn.Module:
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

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self._plain_model().named_parameters()

    @property
    def update_obs_rms(self) -> Any:
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


class RecurrentAgentMixin:
    """Keeps the recurrent state of the sampler's environments between ``step`` calls, so
    the sampler need not know about it. Use as ``class MyAgent(RecurrentAgentMixin,
    MyAgentBase)``.

    The state is in torch's [N, B, H] layout (B = environment index); None means zeros.
    Leaving sample mode (for training or evaluation) sets it aside and starts from None;
    coming back to sample mode restores it, so the sampler's environments continue
    where they were.
    """

    recurrent = True
    _mode: str | None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._prev_rnn_state: Any = None
        self._sample_rnn_state: Any = None

    @property
    def prev_rnn_state(self) -> Any:
        """The state the next ``step`` starts from (None: zeros)."""
        return self._prev_rnn_state

    def reset(self) -> None:
        """Zero the state of every environment."""
        self._prev_rnn_state = None

    def reset_one(self, idx: int) -> None:
        """Zero the state of environment ``idx`` (e.g. after its episode ended)."""
        if self._prev_rnn_state is not None:
            self._prev_rnn_state[:, idx] = 0

    def reset_done(self, done: torch.Tensor) -> None:
        """Zero the state of the environments where ``done`` [B] is True: a masked fill on
        the state's device, so a batched sampler on a GPU never waits for the host."""
        if self._prev_rnn_state is not None:
            keep = ~done.to(torch.bool).view(1, -1, 1)
            self._prev_rnn_state = buffer_func(self._prev_rnn_state, lambda x: x * keep)

    def advance_rnn_state(self, new_rnn_state: Any) -> None:
        """Take the state computed by this step as the start of the next one."""
        self._prev_rnn_state = new_rnn_state

    def _rnn_state_for_value(self, batch_size: int) -> Any:
        return self._prev_rnn_state

    def train_mode(self, itr: int) -> None:
        self._leave_sample_mode()
        super().train_mode(itr)  # type: ignore[misc]

    def sample_mode(self, itr: int) -> None:
        if self._mode != "sample":
            self._prev_rnn_state = self._sample_rnn_state
        super().sample_mode(itr)  # type: ignore[misc]

    def eval_mode(self, itr: int) -> None:
        self._leave_sample_mode()
        super().eval_mode(itr)  # type: ignore[misc]

    def _leave_sample_mode(self) -> None:
        if self._mode == "sample":
            self._sample_rnn_state = self._prev_rnn_state
        self._prev_rnn_state = None


class AlternatingRecurrentAgentMixin:
    """For alternating samplers, where the environments are split in two groups that take
    turns stepping: keeps one recurrent state per group and switches to the other group's
    state after each ``step`` (``advance_rnn_state``). Otherwise like
    ``RecurrentAgentMixin``; use in its place.

    * ``reset_one(idx)`` takes ``idx`` over all the sampler's environments, the group that
      steps first (after ``reset``) numbered first.
    * ``value`` on all environments at once (e.g. the bootstrap value after a batch) uses
      both groups' states side by side; on one group's environments, that group's state.
    * In eval mode the agent does not alternate: it keeps one state for the batch it is
      given each step (the samplers evaluate all their evaluation environments together).
    """

    recurrent = True
    alternating = True
    _mode: str | None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._rnn_pair: list[Any] = [None, None]
        self._alt = 0
        self._sample_rnn_pair: tuple[list[Any], int] = ([None, None], 0)

    @property
    def _alternates(self) -> bool:
        return self._mode != "eval"

    @property
    def prev_rnn_state(self) -> Any:
        """The state the next ``step`` starts from: that of the group whose turn it is."""
        return self._rnn_pair[self._alt]

    def reset(self) -> None:
        self._rnn_pair = [None, None]
        self._alt = 0

    def reset_done(self, done: torch.Tensor) -> None:
        """(Alternating samplers step on the CPU: one environment at a time is fine.)"""
        for idx in torch.nonzero(done).flatten().tolist():
            self.reset_one(idx)

    def reset_one(self, idx: int) -> None:
        first, second = self._rnn_pair
        if first is None:
            return
        if not self._alternates:
            first[:, idx] = 0
            return
        first_B = _batch_size(first)
        if idx < first_B:
            first[:, idx] = 0
        elif second is not None:
            second[:, idx - first_B] = 0

    def advance_rnn_state(self, new_rnn_state: Any) -> None:
        self._rnn_pair[self._alt] = new_rnn_state
        if self._alternates:
            self._alt ^= 1

    def _rnn_state_for_value(self, batch_size: int) -> Any:
        first, second = self._rnn_pair
        if (
            self._alternates
            and first is not None
            and second is not None
            and _batch_size(first) + _batch_size(second) == batch_size
        ):
            both = [torch.cat([a, b], dim=1) for a, b in zip(first, second, strict=True)]
            return first._make(both) if hasattr(first, "_make") else tuple(both)
        return self.prev_rnn_state

    def train_mode(self, itr: int) -> None:
        self._leave_sample_mode()
        super().train_mode(itr)  # type: ignore[misc]

    def sample_mode(self, itr: int) -> None:
        if self._mode != "sample":
            pair, self._alt = self._sample_rnn_pair
            self._rnn_pair = list(pair)
        super().sample_mode(itr)  # type: ignore[misc]

    def eval_mode(self, itr: int) -> None:
        self._leave_sample_mode()
        super().eval_mode(itr)  # type: ignore[misc]

    def _leave_sample_mode(self) -> None:
        if self._mode == "sample":
            self._sample_rnn_pair = (self._rnn_pair, self._alt)
        self._rnn_pair = [None, None]
        self._alt = 0
