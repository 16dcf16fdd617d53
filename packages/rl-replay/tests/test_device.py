"""``ReplayBuffer(device=...)``: storage as torch tensors on a device. For the same data and
seed it replays exactly what the host buffer does (tested here with ``device="cpu"``), its
sampling never reads the device, its state saves and loads as the host buffer's, and the
combinations that stay on the host are refused."""

import numpy as np
import pytest
from replay_world import World

from rl_arrays import torchify_buffer
from rl_replay import (
    DeviceSumTree,
    PrioritiesSamplesToBuffer,
    ReplayBuffer,
    SamplesFromReplayTL,
    SamplesFromReplayTLPri,
    SequenceReplayBuffer,
    SumTree,
)

torch = pytest.importorskip("torch")  # (the numpy-only install skips these)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

OPTIONS = {
    "uniform": {},
    "prioritized": {"prioritized": True, "alpha": 0.7, "beta": 0.5},
    "time_limit": {"time_limit": True},
    "prioritized+time_limit": {"prioritized": True, "time_limit": True, "unique": True},
    "input_priorities": {"prioritized": True, "input_priorities": True},
}


def _flat(batch, path="batch"):
    """Every leaf of a (nested) batch by its path."""
    if isinstance(batch, tuple):
        return {
            key: leaf
            for name, item in zip(batch._fields, batch, strict=True)
            for key, leaf in _flat(item, f"{path}.{name}").items()
        }
    return {path: batch}


def assert_same_batch(host_batch, device_batch, device="cpu"):
    """Equal values and dtypes; the device batch's leaves tensors on ``device``."""
    assert type(host_batch) is type(device_batch)
    expected, got = _flat(torchify_buffer(host_batch)), _flat(device_batch)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert isinstance(got[key], torch.Tensor) and got[key].device == torch.device(device), key
        assert got[key].dtype == value.dtype, key
        assert torch.equal(got[key].cpu(), value.cpu()), key


def pair(world, n_step_return, options, size=60, device="cpu"):
    """A host buffer and a device one, made alike, with the same seed."""
    return [
        ReplayBuffer(
            world.example(), size, world.B, 0.9, n_step_return, seed=3, device=d, **options
        )
        for d in (None, device)
    ]


def run_side_by_side(host, on_device, world, steps, batch_B=16, seed=0):
    """Append chunks of varying length (wrapping the ring several times) to both buffers,
    sample from both after each, give both the same new priorities: every batch equal."""
    rng = np.random.default_rng(seed)
    prioritized, inputs = (
        host.prioritized,
        bool(host.priorities and host.priorities.input_priorities),
    )
    for T in steps:
        chunk = world.chunk(T)
        if inputs:
            chunk = PrioritiesSamplesToBuffer(rng.random((T, world.B)) + 0.1, chunk)
        host.append_samples(chunk)
        on_device.append_samples(chunk)
        valid = min(host.t_total, host.T) - host.n_step_return - host.off_forward
        if valid * host.B < batch_B:
            continue
        assert_same_batch(host.sample_batch(batch_B), on_device.sample_batch(batch_B))
        if prioritized:
            new = rng.random(batch_B) + 0.01
            host.update_batch_priorities(new)
            on_device.update_batch_priorities(torch.from_numpy(new))  # a tensor is taken too
            host.set_beta(0.8)
            on_device.set_beta(0.8)
        else:
            assert_same_batch(host.sample_batches(batch_B, 3), on_device.sample_batches(batch_B, 3))


@pytest.mark.parametrize("n_step_return", [1, 3])
@pytest.mark.parametrize("name", OPTIONS)
def test_device_buffer_replays_what_the_host_buffer_does(name, n_step_return):
    options = OPTIONS[name]
    world = World(3, timeout_prob=0.5 if options.get("time_limit") else 0.0)
    host, on_device = pair(world, n_step_return, options)
    run_side_by_side(host, on_device, world, [5, 7, 1, 20, 3, 11, 19, 2, 13, 8])
    for key, value in host.state_dict().items():  # the returns, the tree, the generator
        assert np.array_equal(on_device.state_dict()[key], value), key


def test_batches_are_what_the_world_holds():
    """Against the reference world itself: observations, previous actions zeroed at an
    episode's start, n-step returns and time-limit flags."""
    n, discount = 3, 0.9
    world = World(2, done_prob=0.3, timeout_prob=0.5)
    buffer = ReplayBuffer(world.example(), 40, 2, discount, n, time_limit=True, device="cpu")
    for T in [15, 15, 15, 10]:
        buffer.append_samples(world.chunk(T))
    batch = buffer.sample_batch(30)
    for i in range(30):
        a, b = (int(x) - 1 for x in batch.agent_inputs.observation[i])
        return_, done_n, timeout_n = world.n_step(a, b, n, discount)
        assert batch.return_[i] == torch.tensor(return_)
        assert bool(batch.done_n[i]) == done_n and bool(batch.timeout_n[i]) == timeout_n
        assert batch.agent_inputs.prev_action[i] == world.previous(world.action, a, b)
        assert batch.agent_inputs.prev_reward[i] == world.previous(world.reward, a, b)
        target = batch.target_inputs.observation[i].tolist()
        assert target == [a + n + 1, b + 1]
        assert batch.target_inputs.prev_action[i] == world.previous(world.action, a + n, b)


def _read_only_reversed(array):
    """The same values in a read-only array with negative strides (which torch cannot view)."""
    array = np.ascontiguousarray(array[::-1])[::-1]
    array.flags.writeable = False
    return array


def test_tensor_and_unusual_numpy_samples_are_written_as_numpy_ones_are():
    """Samples already in torch (a sampler on the device) go in without a trip to numpy;
    read-only or reversed numpy arrays go in too."""
    world = World(3, timeout_prob=0.5)
    from_numpy, from_torch, from_views = (
        ReplayBuffer(world.example(), 60, 3, 0.9, 2, time_limit=True, seed=1, device="cpu")
        for _ in range(3)
    )
    for T in [7, 20, 9]:
        chunk = world.chunk(T)
        from_numpy.append_samples(chunk)
        from_torch.append_samples(torchify_buffer(chunk))
        from_views.append_samples(type(chunk)(*(_read_only_reversed(a) for a in chunk)))
    expected = from_numpy.sample_batch(32)
    assert_same_batch(expected, from_torch.sample_batch(32))
    assert_same_batch(expected, from_views.sample_batch(32))


class _Kernels(TorchDispatchMode):
    """The torch operations that compute (not views) inside its block."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("options", [{"time_limit": True}, {"prioritized": True}])
def test_sampling_never_reads_the_device_and_costs_the_same_at_any_batch_size(options):
    """On torch's meta device (tensors without data: a host read of one fails) appends and
    batches work, and a batch takes the same few operations whatever its size."""
    world = World(4, timeout_prob=0.5 if options.get("time_limit") else 0.0)
    buffer = ReplayBuffer(world.example(), 400, 4, 0.99, 3, device="meta", **options)
    for T in [30, 90, 5]:
        buffer.append_samples(world.chunk(T))
    counts = []
    for batch_B in [8, 256]:
        with _Kernels() as kernels:
            batch = buffer.sample_batch(batch_B)
        assert batch.return_.shape == (batch_B,) and batch.return_.device.type == "meta"
        counts.append(kernels.count)
    assert counts[0] == counts[1] <= 12


def test_save_and_load_across_host_and_device(tmp_path):
    """A device buffer saves what the host buffer saves (numpy, no tensors) and loads the
    host buffer's file; both then go on replaying the same batches."""
    world = World(3, timeout_prob=0.5)
    options = OPTIONS["prioritized+time_limit"]
    host, on_device = pair(world, 3, options)
    run_side_by_side(host, on_device, world, [9, 20, 17])
    on_device.save(tmp_path / "device.npz")
    host.save(tmp_path / "host.npz")
    with np.load(tmp_path / "device.npz") as saved, np.load(tmp_path / "host.npz") as expected:
        assert saved.files == expected.files
        for key in expected.files:
            assert np.array_equal(saved[key], expected[key]), key

    restored_host, restored_device = pair(world, 3, options)
    restored_host.load(tmp_path / "device.npz")
    restored_device.load(tmp_path / "host.npz")
    for buffer in (restored_host, restored_device):
        buffer.set_beta(0.8)  # (a setting, not state: DQN sets it after loading)
    batches = [b.sample_batch(16) for b in (host, restored_host)]
    assert isinstance(batches[0], SamplesFromReplayTLPri)
    assert_same_batch(batches[0], restored_device.sample_batch(16))
    assert_same_batch(batches[1], on_device.sample_batch(16))
    run_side_by_side(restored_host, restored_device, world, [4, 19])


def test_a_state_of_other_shapes_is_refused():
    world = World(3)
    small, large = (ReplayBuffer(world.example(), size, 3, device="cpu") for size in (30, 60))
    with pytest.raises(ValueError, match="same arguments"):
        small.load_state_dict(large.state_dict())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda w: ReplayBuffer(w.example(), 60, 2, frame_based=True, device="cpu"), "frame"),
        (lambda w: ReplayBuffer(w.example(), 60, 2, shared_memory=True, device="cpu"), "shared"),
        (lambda w: SequenceReplayBuffer(w.example(), 60, 2, 0, device="cpu"), "sequence"),
        (lambda w: ReplayBuffer(w.example(), 60, 2, device="gpu"), "device='gpu'"),
    ],
    ids=["frame_based", "shared_memory", "sequence", "unknown device"],
)
def test_combinations_that_stay_on_the_host_are_refused(make, match):
    world = World(2, n_frames=2) if "frame" in match else World(2)
    with pytest.raises(ValueError, match=match):
        make(world)


def test_without_a_device_the_buffer_is_numpy():
    world = World(2)
    buffer = ReplayBuffer(world.example(), 60, 2, 0.9, 2)
    assert buffer.device is None and isinstance(buffer.samples.reward, np.ndarray)
    buffer.append_samples(world.chunk(10))
    assert isinstance(buffer.sample_batch(4).return_, np.ndarray)
    on_device = ReplayBuffer(world.example(), 60, 2, 0.9, 2, device=torch.device("cpu"))
    assert on_device.device == torch.device("cpu") and "device='cpu'" in repr(on_device)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", ["time_limit", "prioritized+time_limit"])
def test_on_the_gpu_the_buffer_replays_what_the_host_buffer_does(name):
    """``"cuda"`` is normalised to the current GPU (``cuda:0``), as its tensors report."""
    options = OPTIONS[name]
    world = World(3, timeout_prob=0.5)
    host, on_gpu = pair(world, 3, options, device="cuda")
    assert on_gpu.device == torch.device("cuda", torch.cuda.current_device())
    rng = np.random.default_rng(0)
    for T in [9, 20, 17, 20]:
        chunk = world.chunk(T)
        host.append_samples(chunk)
        on_gpu.append_samples(chunk)
        assert_same_batch(host.sample_batch(16), on_gpu.sample_batch(16), on_gpu.device)
        if host.prioritized:
            new = rng.random(16) + 0.01
            host.update_batch_priorities(new)
            on_gpu.update_batch_priorities(torch.from_numpy(new).cuda())
    for key, value in host.state_dict().items():
        assert np.array_equal(on_gpu.state_dict()[key], value), key


# ------------------------------------------------------------------- the sum tree on the device


def tree_pair(**kwargs):
    """A host tree and a device one (on the CPU), made alike."""
    args = (10, 3, 2, 1)
    return SumTree(*args, rng=0, **kwargs), DeviceSumTree(*args, rng=0, device="cpu", **kwargs)


def test_the_device_tree_holds_and_draws_as_the_host_tree():
    """The same advances (wrapping the ring, with input priorities) and the same updates
    (repeated leaves: the last priority kept) give the same nodes; the same uniform values
    reach the same leaves, never one of priority 0."""
    host, device = tree_pair(enable_input_priorities=True, input_priority_shift=1)
    rng = np.random.default_rng(0)
    for step, T in enumerate([5, 3, 1, 7, 4, 6, 2]):
        priorities = rng.random((T, 3)) + 0.1 if step % 2 else None
        host.advance(T, priorities)
        device.advance(T, priorities)
        host.sample(12)
        device.sample(12)
        device._sampled_leaves = torch.from_numpy(host._sampled_leaves)  # (the same leaves)
        new = rng.random(12) * (rng.random(12) < 0.8)  # (some 0)
        host.update_batch_priorities(new)
        device.update_batch_priorities(torch.from_numpy(new))
        assert np.array_equal(device.state_dict()["tree"], host.tree), step
        assert device.total == pytest.approx(host.total, rel=1e-12)
        fractions = np.concatenate([rng.random(200), [0.0, 1 - 1e-16]])
        expected = host._descend(fractions * host.total)
        drawn = device._invert_cumsum(torch.from_numpy(fractions)).numpy()
        assert np.array_equal(drawn, expected)
        assert host.leaf_priorities().ravel()[drawn].min() > 0


def test_the_device_tree_draws_in_proportion_to_priority_and_as_its_rng_says():
    _, tree = tree_pair()
    tree.advance(7)
    priorities = np.random.default_rng(1).random(7 * 3) + 0.05
    tree.sample(21)
    tree._sampled_leaves = torch.arange(3, 24)  # (rows 1 to 7 given priorities directly)
    tree.update_batch_priorities(torch.from_numpy(priorities))
    T_idxs, B_idxs, drawn = tree.sample(200_000)
    counts = np.bincount((T_idxs * 3 + B_idxs).numpy() - 3, minlength=21)
    expected = 200_000 * priorities / priorities.sum()
    assert ((counts - expected) ** 2 / expected).sum() < 60  # chi-square, 20 dof: p < 1e-5
    assert np.array_equal(drawn.numpy(), priorities[(T_idxs * 3 + B_idxs).numpy() - 3])
    state = tree.rng.bit_generator.state
    first = tree.sample(64)[0]
    tree.rng.bit_generator.state = state
    assert torch.equal(tree.sample(64)[0], first)


def tree_on_device_buffer(world, device="cpu", size=60, **options):
    return ReplayBuffer(
        world.example(), size, world.B, 0.9, 3, prioritized=True, tree_on_device=True, seed=3,
        device=device, **options,
    )  # fmt: skip


ON_THE_GPU = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU")],
)


@pytest.mark.parametrize("device", ["cpu", ON_THE_GPU])
def test_a_buffer_with_its_tree_on_the_device_replays_its_storage(device):
    """Batches drawn on the device are the storage at the drawn slots, weighted by the
    tree's priorities; the tree keeps what a host tree keeps for the same appends; saved
    and loaded, the buffer goes on drawing the same batches."""
    world = World(3, timeout_prob=0.5)
    buffer = tree_on_device_buffer(world, device, time_limit=True)
    host_tree = pair(world, 3, {"prioritized": True, "time_limit": True})[1]
    rng = np.random.default_rng(0)
    for T in [12, 20, 17, 5, 19]:
        chunk = world.chunk(T)
        buffer.append_samples(chunk)
        host_tree.append_samples(chunk)
        batch = buffer.sample_batch(16)
        assert isinstance(batch, SamplesFromReplayTLPri)
        T_idxs, B_idxs = (x.cpu().numpy() for x in buffer.priorities._sampled)
        expected = host_tree.extract_batch(T_idxs, B_idxs)
        assert_same_batch(expected, SamplesFromReplayTL(*tuple(batch)[:-1]), buffer.device)
        weights = buffer.priorities.tree.leaf_priorities()[T_idxs, B_idxs] ** -0.4
        assert torch.allclose(batch.is_weights, (weights / weights.max()).float())
        buffer.update_batch_priorities(torch.from_numpy(rng.random(16) + 0.01).to(device))
    state = buffer.state_dict()
    assert state.keys() == host_tree.state_dict().keys()
    restored = tree_on_device_buffer(world, device, time_limit=True)
    restored.load_state_dict(state)
    assert_same_batch(buffer.sample_batch(16), restored.sample_batch(16), buffer.device)

    # Appends alone (no new priorities): the tree a host tree keeps.
    twin = tree_on_device_buffer(world, device, time_limit=True)
    host_twin = pair(world, 3, {"prioritized": True, "time_limit": True})[1]
    for T in [9, 20, 17]:
        chunk = world.chunk(T)
        twin.append_samples(chunk)
        host_twin.append_samples(chunk)
    for key, value in host_twin.state_dict().items():
        assert np.array_equal(twin.state_dict()[key], value), key


def test_prioritized_replay_on_the_device_never_reads_it():
    """On the meta device (a host read fails) a batch and its priority update take the same
    few operations whatever the batch size and the tree's depth."""
    world = World(4)
    counts = []
    for size in [400, 40_000]:
        buffer = tree_on_device_buffer(world, device="meta", size=size)
        for T in [30, 50]:
            buffer.append_samples(world.chunk(T))
        for batch_B in [8, 256]:
            with _Kernels() as kernels:
                batch = buffer.sample_batch(batch_B)
                buffer.update_batch_priorities(batch.return_)
            assert batch.is_weights.shape == (batch_B,) and batch.is_weights.device.type == "meta"
            counts.append(kernels.count)
    assert len(set(counts)) == 1 and counts[0] <= 45  # (42: 16 of them the rows and gathers)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"prioritized": True, "tree_on_device": True}, "needs device="),
        ({"tree_on_device": True, "device": "cpu"}, "only apply with prioritized=True"),
        (
            {"prioritized": True, "tree_on_device": True, "unique": True, "device": "cpu"},
            "unique",
        ),
    ],
    ids=["no device", "not prioritized", "unique"],
)
def test_a_tree_on_the_device_needs_prioritized_storage_there(options, match):
    world = World(2)
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(world.example(), 60, 2, **options)
