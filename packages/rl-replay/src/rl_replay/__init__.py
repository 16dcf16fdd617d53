"""rl-replay: replay buffers with ``[T, B]`` storage, n-step returns, frame-wise storage,
time-limit bootstrapping, uniform and prioritized (sum tree) sampling of transitions or
sequences, and shared-memory forms for asynchronous training.

Depends on numpy and rl-arrays.  Batches come out as namedarraytuples of numpy arrays;
``rl_arrays.torchify_buffer`` turns them into torch tensors without copying.
"""

from importlib.metadata import version as _version

from ._async import (
    AsyncPrioritizedReplayBuffer,
    AsyncPrioritizedReplayFrameBuffer,
    AsyncPrioritizedSequenceReplayBuffer,
    AsyncPrioritizedSequenceReplayFrameBuffer,
    AsyncReplayBufferMixin,
    AsyncTlPrioritizedReplayBuffer,
    AsyncTlUniformReplayBuffer,
    AsyncUniformReplayBuffer,
    AsyncUniformReplayFrameBuffer,
    AsyncUniformSequenceReplayBuffer,
    AsyncUniformSequenceReplayFrameBuffer,
    RWLock,
)
from ._base import BaseNStepReturnBuffer, BaseReplayBuffer
from ._n_step import discount_return_n_step
from ._non_sequence import (
    NStepReturnBuffer,
    PrioritizedReplayBuffer,
    PrioritizedReplayFrameBuffer,
    TlPrioritizedReplayBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
)
from ._schemas import (
    PrioritiesSamplesToBuffer,
    SamplesFromReplay,
    SamplesFromReplayPri,
    SamplesFromReplayTL,
    SamplesFromReplayTLPri,
    SamplesToBuffer,
    SamplesToBufferRnn,
    SamplesToBufferTl,
    SequenceSamplesFromReplay,
    SequenceSamplesFromReplayPri,
)
from ._sequence import (
    PrioritizedSequenceReplayBuffer,
    PrioritizedSequenceReplayFrameBuffer,
    SequenceNStepReturnBuffer,
    UniformSequenceReplayBuffer,
    UniformSequenceReplayFrameBuffer,
)
from ._sum_tree import AsyncSumTree, SumTree

__version__ = _version("rl-replay")

__all__ = [
    "AsyncPrioritizedReplayBuffer",
    "AsyncPrioritizedReplayFrameBuffer",
    "AsyncPrioritizedSequenceReplayBuffer",
    "AsyncPrioritizedSequenceReplayFrameBuffer",
    "AsyncReplayBufferMixin",
    "AsyncSumTree",
    "AsyncTlPrioritizedReplayBuffer",
    "AsyncTlUniformReplayBuffer",
    "AsyncUniformReplayBuffer",
    "AsyncUniformReplayFrameBuffer",
    "AsyncUniformSequenceReplayBuffer",
    "AsyncUniformSequenceReplayFrameBuffer",
    "BaseNStepReturnBuffer",
    "BaseReplayBuffer",
    "NStepReturnBuffer",
    "PrioritiesSamplesToBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayFrameBuffer",
    "PrioritizedSequenceReplayBuffer",
    "PrioritizedSequenceReplayFrameBuffer",
    "RWLock",
    "SamplesFromReplay",
    "SamplesFromReplayPri",
    "SamplesFromReplayTL",
    "SamplesFromReplayTLPri",
    "SamplesToBuffer",
    "SamplesToBufferRnn",
    "SamplesToBufferTl",
    "SequenceNStepReturnBuffer",
    "SequenceSamplesFromReplay",
    "SequenceSamplesFromReplayPri",
    "SumTree",
    "TlPrioritizedReplayBuffer",
    "TlUniformReplayBuffer",
    "UniformReplayBuffer",
    "UniformReplayFrameBuffer",
    "UniformSequenceReplayBuffer",
    "UniformSequenceReplayFrameBuffer",
    "discount_return_n_step",
]
