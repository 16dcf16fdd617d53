"""rlpyt's replay class names, kept so rlpyt-style code runs unchanged.

Each is ``ReplayBuffer`` or ``SequenceReplayBuffer`` with some options' defaults set by class
attributes (a caller may still pass any option); the ``Async...`` forms default to
``shared_memory=True`` as well (rlpyt derived them from their plain form; here each is one
class deep, so that no chain of presets grows past four classes).
"""

from __future__ import annotations

from ._sequence import SequenceReplayBuffer
from ._transitions import ReplayBuffer

__all__ = [
    "AsyncPrioritizedReplayBuffer",
    "AsyncPrioritizedReplayFrameBuffer",
    "AsyncPrioritizedSequenceReplayBuffer",
    "AsyncPrioritizedSequenceReplayFrameBuffer",
    "AsyncReplayBufferMixin",
    "AsyncTlPrioritizedReplayBuffer",
    "AsyncTlUniformReplayBuffer",
    "AsyncUniformReplayBuffer",
    "AsyncUniformReplayFrameBuffer",
    "AsyncUniformSequenceReplayBuffer",
    "AsyncUniformSequenceReplayFrameBuffer",
    "NStepReturnBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayFrameBuffer",
    "PrioritizedSequenceReplayBuffer",
    "PrioritizedSequenceReplayFrameBuffer",
    "SequenceNStepReturnBuffer",
    "TlPrioritizedReplayBuffer",
    "TlUniformReplayBuffer",
    "UniformReplayBuffer",
    "UniformReplayFrameBuffer",
    "UniformSequenceReplayBuffer",
    "UniformSequenceReplayFrameBuffer",
]

# rlpyt's bases of every transition (sequence) buffer.
NStepReturnBuffer = ReplayBuffer
SequenceNStepReturnBuffer = SequenceReplayBuffer


class AsyncReplayBufferMixin:
    """rlpyt's mixin: first in a buffer class's bases, it defaults ``shared_memory=True``."""

    shared_memory = True


class UniformReplayBuffer(ReplayBuffer):
    """``ReplayBuffer()``."""


class PrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(prioritized=True)``."""

    prioritized = True


class UniformReplayFrameBuffer(ReplayBuffer):
    """``ReplayBuffer(frame_based=True)``."""

    frame_based = True


class PrioritizedReplayFrameBuffer(ReplayBuffer):
    """``ReplayBuffer(prioritized=True, frame_based=True)``."""

    prioritized = frame_based = True


class TlUniformReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(time_limit=True)``."""

    time_limit = True


class TlPrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(prioritized=True, time_limit=True)``."""

    prioritized = time_limit = True


class UniformSequenceReplayBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer()``."""


class PrioritizedSequenceReplayBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(prioritized=True)``."""

    prioritized = True


class UniformSequenceReplayFrameBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(frame_based=True)``."""

    frame_based = True


class PrioritizedSequenceReplayFrameBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(prioritized=True, frame_based=True)``."""

    prioritized = frame_based = True


class AsyncUniformReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(shared_memory=True)``."""

    shared_memory = True


class AsyncPrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(prioritized=True, shared_memory=True)``."""

    prioritized = shared_memory = True


class AsyncUniformReplayFrameBuffer(ReplayBuffer):
    """``ReplayBuffer(frame_based=True, shared_memory=True)``."""

    frame_based = shared_memory = True


class AsyncPrioritizedReplayFrameBuffer(ReplayBuffer):
    """``ReplayBuffer(prioritized=True, frame_based=True, shared_memory=True)``."""

    prioritized = frame_based = shared_memory = True


class AsyncTlUniformReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(time_limit=True, shared_memory=True)``."""

    time_limit = shared_memory = True


class AsyncTlPrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer(prioritized=True, time_limit=True, shared_memory=True)``."""

    prioritized = time_limit = shared_memory = True


class AsyncUniformSequenceReplayBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(shared_memory=True)``."""

    shared_memory = True


class AsyncPrioritizedSequenceReplayBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(prioritized=True, shared_memory=True)``."""

    prioritized = shared_memory = True


class AsyncUniformSequenceReplayFrameBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(frame_based=True, shared_memory=True)``."""

    frame_based = shared_memory = True


class AsyncPrioritizedSequenceReplayFrameBuffer(SequenceReplayBuffer):
    """``SequenceReplayBuffer(prioritized=True, frame_based=True, shared_memory=True)``."""

    prioritized = frame_based = shared_memory = True
