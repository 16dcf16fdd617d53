"""What the runners call on the sampler, the agent and the algorithm.

rl-runners imports none of rl-samplers, rl-agents or rl-algos: any object with these members
will do.  A protocol's members are what its runners need of every such object, which
``missing_methods`` checks at construction; what they use only sometimes is in its docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from rl_arrays import BatchSpec

__all__ = [
    "AgentProtocol",
    "AlgoProtocol",
    "AsyncAgentProtocol",
    "AsyncAlgoProtocol",
    "AsyncSamplerProtocol",
    "InferenceAgentProtocol",
    "SamplerProtocol",
    "SharedReplay",
    "missing_methods",
    "protocol_members",
]


@runtime_checkable
class AgentProtocol(Protocol):
    """The learning agent (the sampler initializes it).  With an evaluator
    (``MinibatchRlEval``, ...) also ``eval_mode(itr)``."""

    def to_device(self, cuda_idx: int | None = None) -> None: ...

    def sample_mode(self, itr: int) -> None: ...

    def train_mode(self, itr: int) -> None: ...

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> object: ...


@runtime_checkable
class SamplerProtocol(Protocol):
    """Collects ``[T, B]`` batches.  With an evaluator (``MinibatchRlEval``, ...) also
    ``evaluate_agent(itr)``, returning the trajectory infos of an evaluation.  It may also
    have ``state_dict()`` and ``load_state_dict(state)`` (an opaque picklable object: the
    environments' state), which checkpoints save and a resumed run restores; and
    ``mid_batch_reset`` (or a ``CollectorCls`` with it), told to the algorithm (default
    True)."""

    batch_spec: BatchSpec  # (or anything with .T, .B and .size)

    def initialize(
        self,
        agent: AgentProtocol,
        affinity: Mapping[str, Any] | None = None,
        seed: int | None = None,
        bootstrap_value: bool = False,
        traj_info_kwargs: Mapping[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> Any: ...

    def obtain_samples(self, itr: int) -> tuple[Any, Sequence[Any]]: ...

    def shutdown(self) -> None: ...


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
    numbers (one per gradient step), or 1-D tensors of them left on the device (read when
    the log row is written), named in ``opt_info_fields``.  Optional attributes the
    runners read: ``discount`` (given to the trajectory infos), ``bootstrap_value``,
    ``update_counter`` (else updates are counted from the OptInfo), ``batch_size`` (samples
    per update, for the replay ratio) and ``min_itr_learn``; with ``checkpoint_replay``,
    ``save_replay(path)`` and ``load_replay(path)``."""

    opt_info_fields: Sequence[str]

    def initialize(
        self,
        agent: AgentProtocol,
        n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None: ...

    def optimize_agent(self, itr: int, samples: Any) -> Any: ...

    def optim_state_dict(self) -> Mapping[str, Any]: ...

    def load_optim_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class AsyncAgentProtocol(Protocol):
    """The agent in ``AsyncRl``, trained in this process: ``send_shared_memory()`` publishes
    the trained parameters to the sampler's process after each ``optimize_agent`` (where
    the sampler switches its modes).  With an evaluator (``AsyncRlEval``) also
    ``eval_mode(itr)``."""

    def to_device(self, cuda_idx: int | None = None) -> None: ...

    def train_mode(self, itr: int) -> None: ...

    def state_dict(self) -> Mapping[str, Any]: ...

    def send_shared_memory(self) -> None: ...


@runtime_checkable
class AsyncSamplerProtocol(Protocol):
    """What ``AsyncRl`` calls on an asynchronous sampler: ``async_initialize`` in the training
    process (initializes the agent on shared memory; returns the two halves of the double
    buffer and the examples), then, in the sampler's own process (the object is passed to
    it, so it must pickle under spawn), ``initialize(affinity)``, ``obtain_samples(itr,
    db_idx)`` (refreshes the agent's parameters, fills half ``db_idx``, returns the
    trajectory infos completed) and ``shutdown``; with an evaluator (``AsyncRlEval``) also
    ``evaluate_agent(itr)``."""

    batch_spec: BatchSpec

    def async_initialize(
        self,
        agent: AsyncAgentProtocol,
        bootstrap_value: bool = False,
        traj_info_kwargs: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> tuple[tuple[Any, Any], Any]: ...

    def initialize(self, affinity: Mapping[str, Any] | None = None) -> None: ...

    def obtain_samples(self, itr: int, db_idx: int = 0) -> Sequence[Any]: ...

    def shutdown(self) -> None: ...


class SharedReplay(Protocol):
    """The replay buffer of an ``AsyncAlgoProtocol`` (on shared memory), as the memory
    copier's process appends to it."""

    def append_samples(self, samples: Any) -> object: ...


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
        agent: AsyncAgentProtocol,
        sampler_n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int = 1,
    ) -> SharedReplay: ...

    def optim_initialize(self, rank: int = 0) -> None: ...

    def samples_to_buffer(self, samples: Any) -> Any: ...

    def optimize_agent(
        self, itr: int, samples: Any = None, sampler_itr: int | None = None
    ) -> Any: ...

    def optim_state_dict(self) -> Mapping[str, Any]: ...


def protocol_members(protocol: type) -> list[str]:
    """The public members ``protocol`` declares (methods, properties and annotated
    attributes), through its protocol bases, in declaration order, bases' first: what
    ``typing.get_protocol_members`` (Python 3.13) gives, less private and dunder names."""
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if Protocol in cls.__bases__:  # (a protocol class names Protocol among its bases)
            for name in (*inspect.get_annotations(cls), *vars(cls)):
                if not name.startswith("_"):
                    names[name] = None
    return list(names)


def missing_methods(protocol: type, obj: object, extra: Sequence[type] = ()) -> list[str]:
    """The members of ``protocol`` (and of the ``extra`` protocols) that ``obj`` lacks."""
    names = [name for p in (protocol, *extra) for name in protocol_members(p)]
    return [name for name in dict.fromkeys(names) if not hasattr(obj, name)]
