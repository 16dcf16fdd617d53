"""What the runners call on the sampler, the agent and the algorithm.

rl-runners imports none of rl-samplers, rl-agents or rl-algos: any object with these methods
will do.  The protocols document the calls; ``missing_methods`` checks them at construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "AgentProtocol",
    "AlgoProtocol",
    "AsyncAgentProtocol",
    "AsyncAlgoProtocol",
    "AsyncSamplerProtocol",
    "InferenceAgentProtocol",
    "SamplerProtocol",
    "missing_methods",
]


@runtime_checkable
class SamplerProtocol(Protocol):
    """Collects ``[T, B]`` batches.  It may also have ``state_dict()`` and
    ``load_state_dict(state)`` (an opaque picklable object: the environments' state), which
    checkpoints save and a resumed run restores; and ``mid_batch_reset`` (or a
    ``CollectorCls`` with it), told to the algorithm (default True)."""

    batch_spec: Any  # with .T, .B and .size

    @property
    def batch_size(self) -> int: ...

    def initialize(
        self,
        agent: Any,
        affinity: Mapping[str, Any] | None = None,
        seed: int | None = None,
        bootstrap_value: bool = False,
        traj_info_kwargs: Mapping[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> Any: ...

    def obtain_samples(self, itr: int) -> tuple[Any, Sequence[Any]]: ...

    def evaluate_agent(self, itr: int) -> Sequence[Any]: ...

    def shutdown(self) -> None: ...


@runtime_checkable
class AgentProtocol(Protocol):
    """The learning agent (the sampler initializes it)."""

    def to_device(self, cuda_idx: int | None = None) -> None: ...

    def sample_mode(self, itr: int) -> None: ...

    def train_mode(self, itr: int) -> None: ...

    def eval_mode(self, itr: int) -> None: ...

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> Any: ...


@runtime_checkable
class InferenceAgentProtocol(AgentProtocol, Protocol):
    """An agent that can hand out its policy for deployment (optional: only
    ``OnPolicyRunner.get_inference_policy`` calls it).

    ``inference_policy()`` returns a ``torch.nn.Module`` mapping a batch of observations
    ``[B, ...]`` (as the sampler gives them) to actions ``[B, ...]`` deterministically: the
    mean of a Gaussian policy, the most likely action of a discrete one, with the agent's
    observation normalisation applied.  A recurrent agent's module keeps its own hidden
    state between calls (one per batch entry) and has ``reset()`` to start new episodes.
    The runner calls it without arguments (optional ones, such as rl_agents' ``device``, keep
    their defaults) and copies the module, so it may share its parameters with the agent's
    model.
    """

    def inference_policy(self) -> torch.nn.Module: ...


@runtime_checkable
class AlgoProtocol(Protocol):
    """The algorithm.  ``optimize_agent`` returns a namedtuple whose fields are lists of
    numbers (one per gradient step), named in ``opt_info_fields``.  Optional attributes the
    runners read: ``discount`` (given to the trajectory infos), ``bootstrap_value``,
    ``update_counter`` (else updates are counted from the OptInfo), ``batch_size`` (samples
    per update, for the replay ratio) and ``min_itr_learn``."""

    opt_info_fields: Sequence[str]

    def initialize(
        self,
        agent: Any,
        n_itr: int,
        batch_spec: Any,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None: ...

    def optimize_agent(self, itr: int, samples: Any) -> Any: ...

    def optim_state_dict(self) -> Mapping[str, Any]: ...

    def load_optim_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class AsyncSamplerProtocol(Protocol):
    """What ``AsyncRl`` calls on an asynchronous sampler: ``async_initialize`` in the training
    process (initializes the agent on shared memory; returns the two halves of the double
    buffer and the examples), then, in the sampler's own process (the object is passed to
    it, so it must pickle under spawn), ``initialize(affinity)``, ``obtain_samples(itr,
    db_idx)`` (refreshes the agent's parameters, fills half ``db_idx``, returns the
    trajectory infos completed), ``evaluate_agent(itr)`` (``AsyncRlEval``) and ``shutdown``."""

    batch_spec: Any

    def async_initialize(
        self,
        agent: Any,
        bootstrap_value: bool = False,
        traj_info_kwargs: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> tuple[tuple[Any, Any], Any]: ...

    def initialize(self, affinity: Mapping[str, Any] | None = None) -> None: ...

    def obtain_samples(self, itr: int, db_idx: int = 0) -> Sequence[Any]: ...

    def evaluate_agent(self, itr: int) -> Sequence[Any]: ...

    def shutdown(self) -> None: ...


@runtime_checkable
class AsyncAgentProtocol(AgentProtocol, Protocol):
    """The agent in ``AsyncRl``: also ``send_shared_memory()``, which publishes the trained
    parameters to the sampler's process after each ``optimize_agent``."""

    def send_shared_memory(self) -> None: ...


@runtime_checkable
class AsyncAlgoProtocol(Protocol):
    """The algorithm in ``AsyncRl``: ``async_initialize`` (returns the replay buffer, on shared
    memory: it is passed to the memory copier's process), ``optim_initialize`` once the
    other processes run, ``samples_to_buffer`` (called in the memory copier's process: no
    state may change in it), ``optimize_agent(itr, sampler_itr=...)`` training from the
    replay alone.  The runner reads ``replay_ratio`` and ``batch_size`` (samples per
    update) to pace the optimizer, ``updates_per_optimize`` (updates per call, default 1),
    and optionally ``min_itr_learn`` and ``update_counter``."""

    opt_info_fields: Sequence[str]
    replay_ratio: float

    def async_initialize(
        self,
        agent: Any,
        sampler_n_itr: int,
        batch_spec: Any,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int = 1,
    ) -> Any: ...

    def optim_initialize(self, rank: int = 0) -> None: ...

    def samples_to_buffer(self, samples: Any) -> Any: ...

    def optimize_agent(
        self, itr: int, samples: Any = None, sampler_itr: int | None = None
    ) -> Any: ...

    def optim_state_dict(self) -> Mapping[str, Any]: ...


_REQUIRED = {
    "sampler": ("initialize", "obtain_samples", "shutdown", "batch_spec"),
    "agent": ("to_device", "sample_mode", "train_mode", "state_dict", "load_state_dict"),
    "algo": (
        "initialize",
        "optimize_agent",
        "optim_state_dict",
        "load_optim_state_dict",
        "opt_info_fields",
    ),
    "async sampler": ("async_initialize", "initialize", "obtain_samples", "shutdown", "batch_spec"),
    "async agent": ("to_device", "train_mode", "state_dict", "send_shared_memory"),
    "async algo": (
        "async_initialize",
        "optim_initialize",
        "samples_to_buffer",
        "optimize_agent",
        "optim_state_dict",
        "opt_info_fields",
        "replay_ratio",
    ),
}


def missing_methods(role: str, obj: Any, extra: Sequence[str] = ()) -> list[str]:
    """The attributes that ``obj``, passed as ``role`` (sampler, agent, algo, or their async
    forms), lacks."""
    return [name for name in (*_REQUIRED[role], *extra) if not hasattr(obj, name)]
