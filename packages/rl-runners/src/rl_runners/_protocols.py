"""What the runners call on the sampler, the agent and the algorithm.

rl-runners imports none of rl-samplers, rl-agents or rl-algos: any object with these methods
will do.  The protocols document the calls; ``missing_methods`` checks them at construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["AgentProtocol", "AlgoProtocol", "SamplerProtocol", "missing_methods"]


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
}


def missing_methods(role: str, obj: Any, extra: Sequence[str] = ()) -> list[str]:
    """The attributes that ``obj``, passed as ``role`` (sampler, agent, algo), lacks."""
    return [name for name in (*_REQUIRED[role], *extra) if not hasattr(obj, name)]
