"""What the samplers need from an agent; declared here so rl-samplers never imports
rl-agents (any object with these methods will do)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from rl_arrays import EnvSpaces

__all__ = ["AsyncSamplerAgent", "SamplerAgent"]


@runtime_checkable
class SamplerAgent(Protocol):
    """The agent methods a sampler calls.  Inputs and outputs of ``step`` and ``value`` are
    torch tensors with a leading ``[B]`` dim; ``step`` returns ``AgentStep(action,
    agent_info)``. An agent may also have ``collector_initialize(global_B, env_ranks)``: a
    parallel sampler's worker calls it on its copy of the agent with the ranks of the
    environments that worker steps (e.g. to take their per-environment epsilons)."""

    def initialize(
        self,
        env_spaces: EnvSpaces,
        share_memory: bool = False,
        global_B: int = 1,
        env_ranks: Sequence[int] | None = None,
    ) -> None: ...

    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> Any: ...

    def value(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor: ...

    def reset(self) -> None: ...

    def reset_one(self, idx: int) -> None: ...

    def sample_mode(self, itr: int) -> None: ...

    def eval_mode(self, itr: int) -> None: ...

    def sync_shared_memory(self) -> None: ...


@runtime_checkable
class AsyncSamplerAgent(SamplerAgent, Protocol):
    """What the asynchronous samplers also call: the agent is initialized (on shared memory)
    in the training process; in the sampler's process it moves to its device, takes a model
    of its own (``async_cpu``), and copies the trained parameters into it before each batch
    (``recv_shared_memory``)."""

    def to_device(self, cuda_idx: int | None = None) -> None: ...

    def async_cpu(self, share_memory: bool = True) -> None: ...

    def recv_shared_memory(self) -> None: ...
