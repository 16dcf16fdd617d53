"""``replay_device``: the replay algorithms keep their buffer as tensors on a device. With the
same seed a run trains exactly as with the host buffer (tested with ``replay_device="cpu"``),
its batches reach the update without another copy, its replay checkpoints are the host
buffer's, and what cannot work is refused before anything starts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_dqn import QAgent, indexed_samples
from test_dqn import examples as dqn_examples
from test_qpg_algos import SMALL, FakeDdpgAgent, FakeSacAgent, examples, params, random_samples

import rl_algos._replay_updates as replay_updates
from rl_algos import DDPG, DQN, SAC, TD3, CategoricalDQN
from rl_arrays import BatchSpec
from rl_replay import DeviceSumTree

QPG = {
    "DDPG": (DDPG, lambda: FakeDdpgAgent(seed=0)),
    "TD3": (TD3, lambda: FakeDdpgAgent(twin=True, seed=0)),
    "SAC": (SAC, lambda: FakeSacAgent(seed=0)),
}


def qpg_run(name, replay_device, n_step_return=1, itrs=4):
    """A seeded run of a few iterations: the diagnostics, the parameters, the algorithm."""
    cls, make_agent = QPG[name]
    torch.manual_seed(0)
    algo = cls(
        min_steps_learn=0,
        batch_size=8,
        n_step_return=n_step_return,
        replay_device=replay_device,
        **SMALL,
    )
    agent = make_agent()
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(8, 2), examples=examples())
    infos = [algo.optimize_agent(itr, random_samples(8, 2, seed=itr)) for itr in range(itrs)]
    return infos, params(*agent._all()), algo


def dqn_run(replay_device, prioritized, cls=DQN, itrs=5, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    agent = QAgent(model)
    algo = cls(
        min_steps_learn=0,
        batch_size=8,
        replay_size=400,
        replay_ratio=4,
        n_step_return=2,
        target_update_interval=3,
        prioritized_replay=prioritized,
        bootstrap_timelimit=True,
        replay_device=replay_device,
        **options,
    )
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(8, 2), examples=dqn_examples())
    infos = [algo.optimize_agent(itr, indexed_samples(8, 2, 3, seed=itr)) for itr in range(itrs)]
    return infos, [p.detach().clone() for p in agent.parameters()], algo


def assert_same_training(host, on_device):
    assert on_device[0] == host[0]  # every diagnostic of every update
    for a, b in zip(host[1], on_device[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("n_step_return", [1, 3])
@pytest.mark.parametrize("name", QPG)
def test_qpg_trains_with_the_replay_on_the_device_as_with_the_host_replay(name, n_step_return):
    host, on_device = (qpg_run(name, d, n_step_return) for d in (None, "cpu"))
    assert_same_training(host, on_device)
    buffer = on_device[2].replay_buffer
    assert buffer.device == torch.device("cpu")
    assert isinstance(buffer.samples.observation, torch.Tensor)
    assert host[2].replay_buffer.device is None


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_dqn_trains_with_the_replay_on_the_device_as_with_the_host_replay(prioritized):
    assert_same_training(dqn_run(None, prioritized), dqn_run("cpu", prioritized))


def host_reads_per_call(monkeypatch, prioritized, **options):
    """Tensors read on the host (``cpu``, ``numpy``, ``tolist``, ``item``) in one
    ``optimize_agent`` of a DQN with its replay on the CPU as a device, and its updates."""
    _, _, algo = dqn_run("cpu", prioritized, itrs=2, **options)
    reads = []

    def counted(name):
        method = getattr(torch.Tensor, name)
        return lambda tensor, *args, **kwargs: reads.append(name) or method(tensor, *args, **kwargs)

    with monkeypatch.context() as patch:
        for name in ("cpu", "numpy", "tolist", "item"):
            patch.setattr(torch.Tensor, name, counted(name))
        algo.optimize_agent(2, indexed_samples(8, 2, 3, seed=2))
    return len(reads), algo.updates_per_optimize


def test_with_the_sum_tree_on_the_device_new_priorities_are_not_read_back(monkeypatch):
    """``pri_tree_on_device``: each update writes its priorities on the device, so a call
    reads the host as often as a uniform replay's (its diagnostics, together); with the tree
    on the host, every update reads its priorities back (``cpu().numpy()``)."""
    uniform, updates = host_reads_per_call(monkeypatch, False)
    assert updates == 8
    assert host_reads_per_call(monkeypatch, True, pri_tree_on_device=True)[0] == uniform
    assert host_reads_per_call(monkeypatch, True)[0] == uniform + 2 * updates


def test_dqn_with_the_sum_tree_on_the_device_reprioritizes_and_saves_the_host_file(tmp_path):
    """New priorities reach the device tree; its replay file loads into a run whose tree is
    on the host, with the same state."""
    infos, _, algo = dqn_run("cpu", True, pri_tree_on_device=True)
    tree = algo.replay_buffer.priorities.tree
    assert isinstance(tree, DeviceSumTree)
    valid = tree.leaf_priorities()[tree.leaf_priorities() > 0]
    assert len(valid.unique()) > 10  # (new entries get the default priority, 1 ** alpha)
    assert all(np.isfinite(info.loss).all() for info in infos)
    algo.save_replay(tmp_path / "replay.npz")
    _, _, host_tree = dqn_run("cpu", True)
    host_tree.load_replay(tmp_path / "replay.npz")
    expected = algo.replay_buffer.state_dict()
    for key, value in host_tree.replay_buffer.state_dict().items():
        assert np.array_equal(value, expected[key]), key
    with pytest.raises(ValueError, match="pri_tree_on_device"):
        DQN(prioritized_replay=True, pri_tree_on_device=True)
    with pytest.raises(ValueError, match="pri_tree_on_device"):
        DQN(replay_device="cpu", pri_tree_on_device=True)


def test_categorical_dqn_takes_replay_device():
    algo = CategoricalDQN(replay_device="cpu")
    assert algo.replay_device == "cpu"


def test_replayed_batches_are_not_converted_or_copied_again(monkeypatch):
    """The buffer gathers on the agent's device: the algorithm uses its tensors as they are."""

    def refuse(*args, **kwargs):
        raise AssertionError("a batch gathered on the agent's device was converted again")

    monkeypatch.setattr(replay_updates, "buffer_to", refuse)
    monkeypatch.setattr(replay_updates, "torchify_buffer", refuse)
    qpg_run("SAC", "cpu", itrs=2)
    dqn_run("cpu", prioritized=True, itrs=2)


def test_a_device_replay_saves_the_host_replays_file_and_loads_into_either(tmp_path):
    """The file equals the host run's; loaded into a device run or a host run, the buffer's
    whole state (its random generator included) is the original's, so both replay on as it
    does."""
    _, _, algo = dqn_run("cpu", prioritized=True, itrs=3)
    algo.save_replay(tmp_path / "replay.npz")
    _, _, host_algo = dqn_run(None, prioritized=True, itrs=3)
    host_algo.save_replay(tmp_path / "host.npz")
    with np.load(tmp_path / "replay.npz") as saved, np.load(tmp_path / "host.npz") as expected:
        assert saved.files == expected.files
        for key in expected.files:
            assert np.array_equal(saved[key], expected[key]), key

    for replay_device in ("cpu", None):
        _, _, resumed = dqn_run(replay_device, prioritized=True, itrs=3)
        resumed.load_replay(tmp_path / "replay.npz")
        for a, b in zip(
            resumed.replay_buffer.state_dict().values(),
            algo.replay_buffer.state_dict().values(),
            strict=True,
        ):
            assert np.array_equal(a, b)


def test_stacked_frames_are_stored_whole_on_the_device():
    """DQN's default frame buffer stays on the host: with replay_device the observations are
    stored whole; asking for both is refused."""
    agent = QAgent(torch.nn.Sequential(torch.nn.Flatten(-3), torch.nn.Linear(4 * 3 * 3, 2)))
    algo = DQN(min_steps_learn=8, batch_size=4, replay_device="cpu")
    algo.initialize(
        agent, n_itr=10, batch_spec=BatchSpec(4, 2), examples=dqn_examples((4, 3, 3), np.uint8)
    )
    assert algo.frame_buffer is False and not algo.replay_buffer.frame_based
    with pytest.raises(ValueError, match="frame_buffer and replay_device"):
        DQN(frame_buffer=True, replay_device="cpu")


@pytest.mark.parametrize("cls", [DQN, SAC, DDPG])
def test_a_bad_replay_device_is_named(cls):
    with pytest.raises(ValueError, match="replay_device"):
        cls(replay_device="gpu")
    with pytest.raises(ValueError, match="replay_device"):
        cls(replay_device=3.5)


def test_the_asynchronous_runner_is_refused_a_replay_on_the_device():
    algo = SAC(replay_device="cpu", **SMALL)
    with pytest.raises(ValueError, match=r"replay_device.*asynchronous"):
        algo.async_initialize(FakeSacAgent(), 10, BatchSpec(4, 2), True, examples())
    assert algo.replay_buffer is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_sac_on_the_gpu_trains_as_with_the_host_replay():
    """The agent and the replay on the GPU ("cuda", normalised to the current one): the same
    updates as with the host buffer, up to the GPU's arithmetic."""

    def run(replay_device):
        torch.manual_seed(0)
        agent = FakeSacAgent(seed=0)
        agent.device = torch.device("cuda")
        for module in agent._all():
            module.cuda()
        agent.low, agent.high = agent.low.cuda(), agent.high.cuda()
        algo = SAC(min_steps_learn=0, batch_size=8, replay_device=replay_device, **SMALL)
        algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(8, 2), examples=examples())
        for itr in range(3):
            algo.optimize_agent(itr, random_samples(8, 2, seed=itr))
        return params(*agent._all()), algo.replay_buffer

    host, (on_gpu, buffer) = run(None)[0], run("cuda")
    assert buffer.samples.observation.is_cuda
    for a, b in zip(host, on_gpu, strict=True):
        torch.testing.assert_close(a, b)
