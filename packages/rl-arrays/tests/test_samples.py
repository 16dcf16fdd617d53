import pickle

import numpy as np
import pytest

from rl_arrays import (
    AgentInputs,
    AgentSamples,
    BatchSpec,
    EnvSamples,
    EnvStep,
    Samples,
    buffer_from_example,
    is_namedarraytuple,
)


def test_batch_spec():
    spec = BatchSpec(T=5, B=4)
    assert spec.size == 20 and spec == (5, 4)
    assert pickle.loads(pickle.dumps(spec)) == spec and BatchSpec(np.int64(2), 3).T == 2
    for bad in [(0, 4), (5, -1), (2.5, 1), (True, 2)]:
        with pytest.raises(ValueError, match="positive integer"):
            BatchSpec(*bad)


def test_samples_buffer_from_examples():
    """The way a sampler builds its [T, B] batch from one step of an env and an agent."""
    env_step = EnvStep(np.zeros(3, np.float32), np.float32(0), False, None)
    spec = BatchSpec(T=6, B=2)
    example = Samples(
        agent=AgentSamples(action=np.int64(0), prev_action=np.int64(0), agent_info=None),
        env=EnvSamples(env_step.observation, env_step.reward, env_step.reward, False, None),
    )
    samples = buffer_from_example(example, (spec.T, spec.B))
    assert samples.env.observation.shape == (6, 2, 3)
    samples.env[3, 1] = EnvSamples(np.ones(3), 1.0, 0.5, True, None)
    inputs = AgentInputs(
        samples.env.observation, samples.agent.prev_action, samples.env.prev_reward
    )
    assert is_namedarraytuple(inputs) and inputs[3, 1].prev_reward == 0.5
    assert samples.env.done[3, 1] and samples.env.done.sum() == 1
