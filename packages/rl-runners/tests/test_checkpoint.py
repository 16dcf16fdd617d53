import os
import random
import re
import signal

import numpy as np
import pytest
import torch
from rl_runners_toys import make

from rl_runners import (
    MinibatchRl,
    atomic_write,
    companion_path,
    find_checkpoint,
    get_rng_state,
    load_data,
    logger,
    logger_context,
    make_seed,
    save_data,
    set_rng_state,
    set_seed,
)


@pytest.mark.parametrize(
    ("mode", "gap", "files"),
    [
        ("none", 1, []),
        ("last", 1, ["params.pt", "sampler_state-ID.npz"]),
        (
            "all",
            1,
            [f"itr_{i}{s}" for i in (1, 3, 5, 7) for s in (".pt", "_sampler_state-ID.npz")],
        ),
        (
            "gap",
            4,
            ["itr_3.pt", "itr_3_sampler_state-ID.npz", "itr_7.pt", "itr_7_sampler_state-ID.npz"],
        ),
    ],
)
def test_snapshot_modes(tmp_path, mode, gap, files):
    algo, agent, sampler = make()
    runner = MinibatchRl(algo, agent, sampler, n_steps=64, log_interval_steps=16)
    with logger_context(tmp_path, 0, "snap", snapshot_mode=mode, snapshot_gap=gap) as run_dir:
        runner.train()
    written = [p.name for p in run_dir.iterdir() if p.suffix in (".pt", ".npz")]
    assert sorted(re.sub("-[0-9a-f]{32}", "-ID", name) for name in written) == sorted(files)
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    for name in written:
        if name.endswith(".pt"):
            checkpoint = torch.load(run_dir / name, weights_only=True)
            assert name in ("params.pt", f"itr_{checkpoint['itr']}.pt")
            assert checkpoint["sampler_file"] in written  # each snapshot names its own
    if mode == "last":
        assert torch.load(run_dir / "params.pt", weights_only=True)["itr"] == 7


def test_the_logger_saves_nothing_outside_a_context(tmp_path):
    assert logger.save_itr_params(0, {"a": 1}) is None
    with logger_context(tmp_path, 0, "n", snapshot_mode="gap", snapshot_gap=3) as run_dir:
        for itr in range(6):
            logger.save_itr_params(itr, {"itr": itr})
    assert sorted(p.name for p in run_dir.glob("itr_*")) == ["itr_2.pt", "itr_5.pt"]


def test_data_files_round_trip_and_load_without_pickle(tmp_path):
    rng = np.random.default_rng(3)
    tree = {"a": [1, 2.5, None, "x", True], "b": {"c": np.arange(6).reshape(2, 3)}}
    tree["rng"] = rng.bit_generator.state  # (128-bit integers)
    save_data(tree, tmp_path / "d.npz")
    back = load_data(tmp_path / "d.npz")
    assert back["a"] == tree["a"] and back["rng"] == tree["rng"]
    assert np.array_equal(back["b"]["c"], tree["b"]["c"]) and back["b"]["c"].dtype == np.int64
    with pytest.raises(TypeError, match="cannot be saved as data"):
        save_data({"f": lambda: None}, tmp_path / "e.npz")
    assert not (tmp_path / "e.npz").exists()
    np.save(tmp_path / "objects.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="not a data file"):
        load_data(tmp_path / "objects.npy")


def test_atomic_write_never_leaves_a_half_written_file(tmp_path):
    target = tmp_path / "params.pt"
    target.write_bytes(b"old and complete")

    def fails_half_way(f):
        f.write(b"new but")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, fails_half_way)
    assert target.read_bytes() == b"old and complete"
    assert os.listdir(tmp_path) == ["params.pt"]  # the temporary file is gone
    atomic_write(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new"


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raising KeyboardInterrupt, as in a terminal, even when the test run was started
    with SIGINT ignored (as a shell's background job is)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_during_a_write_takes_effect_once_the_file_is_complete(tmp_path):
    """A KeyboardInterrupt raised inside torch.save's writer (a C++ caller) can abort the
    process or vanish; atomic_write holds it until the file is in place, then raises it."""
    target = tmp_path / "params.pt"

    def interrupted_half_way(f):
        f.write(b"first half, ")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C
        f.write(b"second half")

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted_half_way)
    assert target.read_bytes() == b"first half, second half"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    with pytest.raises(KeyboardInterrupt):  # and torch.save's own writer
        atomic_write(
            target, lambda f: (os.kill(os.getpid(), signal.SIGINT), torch.save({"x": 1}, f))
        )
    assert torch.load(target, weights_only=True) == {"x": 1}


def test_a_failed_snapshot_keeps_the_previous_one(tmp_path):
    with logger_context(tmp_path, 0, "n", snapshot_mode="last") as run_dir:
        logger.save_itr_params(1, {"itr": 1, "w": torch.ones(3)})
        with pytest.raises((AttributeError, TypeError)):
            logger.save_itr_params(3, {"itr": 3, "bad": lambda: None})
    assert torch.load(run_dir / "params.pt", weights_only=True)["itr"] == 1
    files = sorted(n for n in os.listdir(run_dir) if n != ".lock")  # (the run lock, kept)
    assert files == ["debug.log", "params.json", "params.pt", "progress.csv"]


def test_find_checkpoint_and_companions(tmp_path):
    for name in ("itr_9.pt", "itr_10.pt", "itr_2.pt", "itr_10_sampler_state-0a.npz"):
        (tmp_path / name).write_bytes(b"")
    assert find_checkpoint(tmp_path).name == "itr_10.pt"  # by number, not by name
    (tmp_path / "params.pt").write_bytes(b"")
    assert find_checkpoint(tmp_path).name == "params.pt"
    assert find_checkpoint(tmp_path / "itr_2.pt").name == "itr_2.pt"
    assert companion_path(tmp_path / "params.pt", "replay-0a").name == "replay-0a.npz"
    assert companion_path(tmp_path / "itr_10.pt", "s", ".json").name == "itr_10_s.json"


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    set_seed(11)
    torch.save(get_rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), float(np.random.rand()), np.random.randn(), torch.rand(2))
    set_seed(12)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    again = (random.random(), float(np.random.rand()), np.random.randn(), torch.rand(2))
    assert expected[:3] == again[:3] and torch.equal(expected[3], again[3])


def test_seeds():
    set_seed(3)
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    set_seed(3)
    assert first == (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert all(0 <= make_seed() <= 10000 for _ in range(20))
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="seed must be a non-negative int"):
            set_seed(bad)
