"""What goes into the replay buffer of a replay-based algorithm: the buffer itself, of the
class the options choose, built for the sampler's examples; and each batch of samples
converted to what it stores. The conversions read only the samples and the settings: in
async mode the memory copier, which holds no optimizer, runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_arrays import BatchSpec, numpify_buffer
from rl_replay import (
    BaseNStepReturnBuffer,
    PrioritizedReplayBuffer,
    PrioritizedReplayFrameBuffer,
    PrioritizedSequenceReplayBuffer,
    PrioritizedSequenceReplayFrameBuffer,
    SamplesToBuffer,
    SamplesToBufferRnn,
    SamplesToBufferTl,
    TlPrioritizedReplayBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
    UniformSequenceReplayBuffer,
    UniformSequenceReplayFrameBuffer,
)

from ._pg import check_count

__all__ = [
    "check_q_replay_options",
    "check_replay_options",
    "check_sampler_batch",
    "check_sequence_sampling",
    "check_shareable",
    "example_field",
    "is_frame_stack",
    "make_replay_buffer",
    "observation_bytes",
    "q_replay_cls",
    "sequence_replay_cls",
    "stored_example",
    "stored_samples",
    "stored_sequence_example",
    "stored_sequence_samples",
]

_STORED_FIELDS = ("observation", "action", "reward", "done")


def check_replay_options(
    ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None,
    replay_device: torch.device | str | None,
) -> None:
    if ReplayBufferCls is not None and not callable(ReplayBufferCls):
        raise ValueError(f"ReplayBufferCls must be a replay buffer class, got {ReplayBufferCls!r}")
    if replay_device is not None:
        try:
            torch.device(replay_device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(
                f"replay_device must be None or a torch device, got {replay_device!r}: {e}"
            ) from None


def check_sampler_batch(batch_spec: BatchSpec, examples: Any) -> tuple[int, int]:
    """The sampler's batch shape ``T, B``, checked, and its examples, which the replay
    buffer is built from, required."""
    T = check_count("batch_spec.T", getattr(batch_spec, "T", None))
    B = check_count("batch_spec.B", getattr(batch_spec, "B", None))
    if examples is None:
        raise ValueError("examples is needed to build the replay buffer (the sampler returns it)")
    return T, B


def check_sequence_sampling(
    batch_spec: BatchSpec,
    examples: Any,
    rnn_state_interval: int,
    prioritized_replay: bool,
    input_priorities: bool,
    n_step_return: int,
) -> None:
    """Refuse sampler batches that a sequence replay cannot take: with prioritized replay,
    whole rnn-state intervals; with input priorities, more than ``n_step_return`` steps and
    ``agent_info.q`` in the examples."""
    sampler_T = getattr(batch_spec, "T", None)
    interval = rnn_state_interval
    if isinstance(sampler_T, int) and prioritized_replay and interval > 0 and sampler_T % interval:
        raise ValueError(
            f"store_rnn_state_interval={interval} must divide the sampler's "
            f"batch_T={sampler_T} with prioritized replay (its priorities are kept per "
            "stored rnn state)"
        )
    if input_priorities:
        if isinstance(sampler_T, int) and sampler_T <= n_step_return:
            raise ValueError(
                f"input_priorities needs sampler batches longer than n_step_return="
                f"{n_step_return}, got batch_T={sampler_T}"
            )
        if (
            examples is not None
            and getattr(example_field(examples, "agent_info"), "q", None) is None
        ):
            raise ValueError(
                "input_priorities needs the agent's Q-values in agent_info.q (or "
                "input_priorities=False)"
            )


def check_shareable(replay_device: torch.device | str | None) -> None:
    """Refuse a device replay to the asynchronous runner, whose processes share the buffer."""
    if replay_device is not None:
        raise ValueError(
            f"replay_device={replay_device!r} cannot be used with the asynchronous "
            "runner: its replay buffer is shared between processes on host memory "
            "(replay_device=None)"
        )


def check_q_replay_options(
    frame_buffer: bool | None,
    bootstrap_timelimit: bool,
    prioritized_replay: bool,
    pri_tree_on_device: bool,
    replay_device: torch.device | str | None,
    ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None,
) -> None:
    """Refuse the Q-learners' replay options that no rl-replay buffer serves together."""
    if frame_buffer and bootstrap_timelimit and ReplayBufferCls is None:
        raise ValueError(
            "frame_buffer and bootstrap_timelimit cannot be combined: rl-replay has no "
            "time-limit frame buffer (give ReplayBufferCls, or drop one of them)"
        )
    if pri_tree_on_device and not (prioritized_replay and replay_device is not None):
        raise ValueError(
            "pri_tree_on_device=True needs prioritized_replay=True and a replay_device "
            f"(got prioritized_replay={prioritized_replay}, replay_device={replay_device!r})"
        )
    if frame_buffer and replay_device is not None and ReplayBufferCls is None:
        raise ValueError(
            f"frame_buffer and replay_device={replay_device!r} cannot be combined: frame "
            "buffers stay on the host (frame_buffer=False stores whole observations)"
        )


def make_replay_buffer(
    ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None,
    default_cls: Callable[[Any], type[BaseNStepReturnBuffer]],
    async_: bool,
    device: torch.device | str | None,
    **kwargs: Any,
) -> BaseNStepReturnBuffer:
    """``ReplayBufferCls(**kwargs)``, or when it is None ``default_cls(example)``'s, on shared
    memory with ``async_`` (the memory copier process fills it: a given class must make a
    shared buffer then); on ``device`` when it is given."""
    if device is not None:
        kwargs["device"] = device
    ReplayCls = ReplayBufferCls
    if ReplayCls is None:
        ReplayCls = default_cls(kwargs["example"])
        if async_:
            kwargs["shared_memory"] = True
    try:
        buffer = ReplayCls(**kwargs)
    except MemoryError as e:
        raise MemoryError(f"replay_size={kwargs['size']} does not fit: {e}") from None
    if async_ and not getattr(buffer, "shared_memory", False):
        name = getattr(ReplayCls, "__name__", repr(ReplayCls))
        raise ValueError(
            f"async_initialize needs a replay buffer on shared memory, which the memory "
            f"copier process fills: ReplayBufferCls={name} does not make one (use an "
            "rl_replay Async* class, or a buffer class given shared_memory=True)"
        )
    return buffer


def is_frame_stack(observation: Any) -> bool:
    """uint8 ``[n_frames, H, W]`` with several frames (rlpyt's Atari observations), which a
    frame buffer stores once per frame; a Dict observation (a tuple) never is."""
    if isinstance(observation, tuple):
        return False
    obs = np.asarray(observation)
    return obs.dtype == np.uint8 and obs.ndim == 3 and obs.shape[0] > 1


def q_replay_cls(prioritized: bool, frames: bool, timelimit: bool) -> type[BaseNStepReturnBuffer]:
    """The transition buffer of DQN's options (no time-limit frame buffer exists)."""
    if prioritized:
        if frames:
            return PrioritizedReplayFrameBuffer
        return TlPrioritizedReplayBuffer if timelimit else PrioritizedReplayBuffer
    if frames:
        return UniformReplayFrameBuffer
    return TlUniformReplayBuffer if timelimit else UniformReplayBuffer


def sequence_replay_cls(prioritized: bool, frames: bool) -> type[BaseNStepReturnBuffer]:
    """The sequence buffer of R2D1's options."""
    if prioritized:
        if frames:
            return PrioritizedSequenceReplayFrameBuffer
        return PrioritizedSequenceReplayBuffer
    return UniformSequenceReplayFrameBuffer if frames else UniformSequenceReplayBuffer


def example_field(examples: Any, name: str) -> Any:
    """``examples[name]`` for the sampler's dict of examples, or the attribute of a namedtuple."""
    if isinstance(examples, dict):
        if name not in examples:
            raise ValueError(f"examples lacks {name!r}; it has {sorted(examples)}")
        return examples[name]
    if not hasattr(examples, name):
        raise ValueError(f"examples lacks {name!r}: expected the sampler's examples")
    return getattr(examples, name)


def stored_example(examples: Any, bootstrap_timelimit: bool) -> Any:
    """One stored transition step, from the sampler's examples."""
    fields = {name: example_field(examples, name) for name in _STORED_FIELDS}
    if not bootstrap_timelimit:
        return SamplesToBuffer(**fields)
    return SamplesToBufferTl(
        **fields, timeout=_timeout(example_field(examples, "env_info"), "examples")
    )


def stored_samples(samples: Any, bootstrap_timelimit: bool, host: bool) -> Any:
    """The transitions stored from a ``[T, B]`` batch: numpy with ``host``, else tensors
    left where they are."""
    fields = _sample_fields(samples)
    if bootstrap_timelimit:
        fields["timeout"] = _timeout(samples.env.env_info, "samples.env", host)
        stored = SamplesToBufferTl(**fields)
    else:
        stored = SamplesToBuffer(**fields)
    return numpify_buffer(stored) if host else stored


def stored_sequence_example(examples: Any, rnn_state: bool) -> Any:
    """One stored sequence step, from the sampler's examples; with ``rnn_state`` the
    agent's ``prev_rnn_state`` too (replayed sequences start from it)."""
    fields = {name: example_field(examples, name) for name in _STORED_FIELDS}
    if not rnn_state:
        return SamplesToBuffer(**fields)
    prev_rnn_state = getattr(example_field(examples, "agent_info"), "prev_rnn_state", None)
    if prev_rnn_state is None:
        raise ValueError(
            "store_rnn_state_interval > 0 needs the agent's agent_info.prev_rnn_state in "
            "the examples (a recurrent agent records it)"
        )
    return SamplesToBufferRnn(**fields, prev_rnn_state=prev_rnn_state)


def stored_sequence_samples(samples: Any, rnn_state: bool) -> Any:
    """The sequence steps stored from a ``[T, B]`` batch (numpy)."""
    fields = _sample_fields(samples)
    if not rnn_state:
        return numpify_buffer(SamplesToBuffer(**fields))
    prev_rnn_state = samples.agent.agent_info.prev_rnn_state
    return numpify_buffer(SamplesToBufferRnn(**fields, prev_rnn_state=prev_rnn_state))


def observation_bytes(buffer: BaseNStepReturnBuffer) -> int:
    """The bytes of one stored observation (all its arrays) of a replay buffer, at least 1."""
    leaves = _array_leaves(buffer.example.observation)
    return max(1, sum(np.asarray(leaf).nbytes for leaf in leaves))


def _sample_fields(samples: Any) -> dict[str, Any]:
    return dict(
        observation=samples.env.observation,
        action=samples.agent.action,
        reward=samples.env.reward,
        done=samples.env.done,
    )


def _array_leaves(buffer_: Any) -> list[Any]:
    """The arrays of a (possibly nested) namedtuple, or the array itself."""
    if buffer_ is None:
        return []
    if isinstance(buffer_, tuple):
        return [leaf for item in buffer_ for leaf in _array_leaves(item)]
    return [buffer_]


def _timeout(env_info: Any, where: str, host: bool = True) -> Any:
    """The truncation flags as bools: numpy, or (``host=False``) tensors left where they are."""
    timeout = getattr(env_info, "timeout", None)
    if timeout is None:
        raise ValueError(
            f"bootstrap_timelimit needs {where}.env_info.timeout (the environment's truncation "
            f"flag); env_info is {type(env_info).__name__}"
        )
    if not host and isinstance(timeout, torch.Tensor):
        return timeout.bool()
    return np.asarray(numpify_buffer(timeout), dtype=bool)
