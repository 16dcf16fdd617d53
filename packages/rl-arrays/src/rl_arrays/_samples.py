"""The sample schemas every package exchanges; defined once here so all agree.

Environments produce ``EnvStep``; agents read ``AgentInputs`` and produce ``AgentStep``;
samplers fill ``Samples`` buffers with ``[T, B]`` leading dims (time, environment), shaped
by a ``BatchSpec``.  ``env_info`` and ``agent_info`` are themselves namedtuples whose
fields each environment or agent chooses.
"""

from __future__ import annotations

from collections import namedtuple

from ._collections import namedarraytuple
from ._counts import as_count

__all__ = [
    "AgentInputs",
    "AgentInputsRnn",
    "AgentSamples",
    "AgentSamplesBsv",
    "AgentStep",
    "BatchSpec",
    "EnvSamples",
    "EnvSpaces",
    "EnvStep",
    "Samples",
]

AgentInputs = namedarraytuple("AgentInputs", ["observation", "prev_action", "prev_reward"])
AgentInputs.__doc__ = (
    "What an agent reads each step: the observation, its previous action and reward."
)

AgentInputsRnn = namedarraytuple(
    "AgentInputsRnn", ["observation", "prev_action", "prev_reward", "init_rnn_state"]
)
AgentInputsRnn.__doc__ = "AgentInputs plus the recurrent state at the start of the sequence."

AgentStep = namedarraytuple("AgentStep", ["action", "agent_info"])
AgentStep.__doc__ = "What an agent returns each step: its action and diagnostics (agent_info)."

EnvStep = namedarraytuple("EnvStep", ["observation", "reward", "done", "env_info"])
EnvStep.__doc__ = (
    "What an environment returns from step(): done is terminated or truncated; "
    "env_info carries timeout (truncated) and any other per-step information."
)

EnvSpaces = namedtuple("EnvSpaces", ["observation", "action"])
EnvSpaces.__doc__ = "An environment's observation and action spaces, as agents receive them."

AgentSamples = namedarraytuple("AgentSamples", ["action", "prev_action", "agent_info"])
AgentSamples.__doc__ = "The agent half of a [T, B] sample batch."

AgentSamplesBsv = namedarraytuple(
    "AgentSamplesBsv", ["action", "prev_action", "agent_info", "bootstrap_value"]
)
AgentSamplesBsv.__doc__ = "AgentSamples plus the value estimate after the last step, [B]."

EnvSamples = namedarraytuple(
    "EnvSamples", ["observation", "reward", "prev_reward", "done", "env_info"]
)
EnvSamples.__doc__ = "The environment half of a [T, B] sample batch."

Samples = namedarraytuple("Samples", ["agent", "env"])
Samples.__doc__ = "A [T, B] batch of samples: Samples(agent=AgentSamples, env=EnvSamples)."


class BatchSpec(namedtuple("BatchSpec", ["T", "B"])):
    """Sampler batch shape: ``T`` time steps by ``B`` environments."""

    __slots__ = ()

    def __new__(cls, T: int, B: int) -> BatchSpec:
        counts = [
            as_count(f"BatchSpec: {n}", v, 1, expected="a positive integer")
            for n, v in (("T", T), ("B", B))
        ]
        return super().__new__(cls, *counts)

    @property
    def size(self) -> int:
        """Samples per batch, ``T * B``."""
        return self.T * self.B
