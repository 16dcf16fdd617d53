"""What goes into a replay buffer and what comes out of it.

Buffers accept any namedtuple of ``[T, B]`` arrays with at least the fields of
``SamplesToBuffer`` (plus ``timeout`` for time-limit buffers and ``prev_rnn_state`` for
sequence buffers); extra fields are stored too.  Prioritized buffers also accept a
``PrioritiesSamplesToBuffer(priorities, samples)`` to set the new samples' priorities.
"""

from __future__ import annotations

from rl_arrays import namedarraytuple

__all__ = [
    "PrioritiesSamplesToBuffer",
    "SamplesFromReplay",
    "SamplesFromReplayPri",
    "SamplesFromReplayTL",
    "SamplesFromReplayTLPri",
    "SamplesToBuffer",
    "SamplesToBufferRnn",
    "SamplesToBufferTl",
    "SequenceSamplesFromReplay",
    "SequenceSamplesFromReplayPri",
]

SamplesToBuffer = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
SamplesToBufferTl = namedarraytuple(
    "SamplesToBufferTl", ["observation", "action", "reward", "done", "timeout"]
)
SamplesToBufferRnn = namedarraytuple(
    "SamplesToBufferRnn", ["observation", "action", "reward", "done", "prev_rnn_state"]
)
PrioritiesSamplesToBuffer = namedarraytuple("PrioritiesSamplesToBuffer", ["priorities", "samples"])

_ONE_STEP = ["agent_inputs", "action", "return_", "done", "done_n", "target_inputs"]
SamplesFromReplay = namedarraytuple("SamplesFromReplay", _ONE_STEP)
SamplesFromReplay.__doc__ = (
    "A batch of single transitions, leading dim [batch_B]: agent_inputs at t, the action, "
    "the n-step return_ and done_n, and target_inputs at t + n_step_return."
)
SamplesFromReplayPri = namedarraytuple("SamplesFromReplayPri", [*_ONE_STEP, "is_weights"])
SamplesFromReplayTL = namedarraytuple("SamplesFromReplayTL", [*_ONE_STEP, "timeout", "timeout_n"])
SamplesFromReplayTLPri = namedarraytuple(
    "SamplesFromReplayTLPri", [*_ONE_STEP, "timeout", "timeout_n", "is_weights"]
)

_SEQUENCE = [
    "all_observation",
    "all_action",
    "all_reward",
    "return_",
    "done",
    "done_n",
    "init_rnn_state",
    "action",
]
SequenceSamplesFromReplay = namedarraytuple("SequenceSamplesFromReplay", _SEQUENCE)
SequenceSamplesFromReplay.__doc__ = (
    "A batch of sequences, leading dims [T, batch_B]. all_observation holds batch_T + "
    "n_step_return steps from the start; all_action and all_reward the same count from one "
    "step earlier (the previous action and reward of each observation, zero at an episode's "
    "first step); return_, done, done_n and action (the action taken at each step, also at "
    "an episode's last) batch_T steps; init_rnn_state [batch_B, ...] the stored state at "
    "the start."
)
SequenceSamplesFromReplayPri = namedarraytuple(
    "SequenceSamplesFromReplayPri", [*_SEQUENCE, "is_weights"]
)
