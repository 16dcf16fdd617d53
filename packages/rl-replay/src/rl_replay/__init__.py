"""rl-replay: replay buffers with ``[T, B]`` storage and n-step returns.  Two classes,
``ReplayBuffer`` (transitions) and ``SequenceReplayBuffer`` (sequences for recurrent
agents), take the variants as options: uniform or ``prioritized`` (sum tree) sampling,
``frame_based`` storage, ``time_limit`` bootstrapping, ``shared_memory`` for asynchronous
training, ``device`` for storage as torch tensors on the training device.  rlpyt's class
names remain, as those classes with some options' defaults set.

Depends on numpy and rl-arrays (torch for ``device``).  Batches come out as namedarraytuples
of numpy arrays; ``rl_arrays.torchify_buffer`` turns them into torch tensors without copying.
"""

from importlib.metadata import version as _version

from ._base import BaseNStepReturnBuffer, BaseReplayBuffer
from ._device_tree import DeviceSumTree
from ._n_step import discount_return_n_step
from ._presets import (
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
    NStepReturnBuffer,
    PrioritizedReplayBuffer,
    PrioritizedReplayFrameBuffer,
    PrioritizedSequenceReplayBuffer,
    PrioritizedSequenceReplayFrameBuffer,
    SequenceNStepReturnBuffer,
    TlPrioritizedReplayBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
    UniformSequenceReplayBuffer,
    UniformSequenceReplayFrameBuffer,
)
from ._rw_lock import RWLock
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
from ._sequence import SequenceReplayBuffer
from ._sum_tree import AsyncSumTree, SumTree
from ._transitions import ReplayBuffer

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
    "DeviceSumTree",
    "NStepReturnBuffer",
    "PrioritiesSamplesToBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayFrameBuffer",
    "PrioritizedSequenceReplayBuffer",
    "PrioritizedSequenceReplayFrameBuffer",
    "RWLock",
    "ReplayBuffer",
    "SamplesFromReplay",
    "SamplesFromReplayPri",
    "SamplesFromReplayTL",
    "SamplesFromReplayTLPri",
    "SamplesToBuffer",
    "SamplesToBufferRnn",
    "SamplesToBufferTl",
    "SequenceNStepReturnBuffer",
    "SequenceReplayBuffer",
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
