import csv
import os

import pytest
import torch
from rl_runners_toys import StatelessToySampler, ToyAlgo, make

from rl_runners import (
    MinibatchRl,
    MinibatchRlEval,
    load_checkpoint,
    load_data,
    logger_context,
    save_data,
)

TIME_COLUMNS = {"CumTime (s)", "StepsPerSecond", "UpdatesPerSecond", "CumTrainTime", "CumEvalTime"}
N_STEPS = 64  # 8 iterations of 8 steps, a row every 2


def progress(run_dir):
    """progress.csv without its time columns."""
    with open(run_dir / "progress.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in reader]
        return reader.fieldnames, rows


def runner_for(runner_cls, n_steps, seed=5, sampler_kwargs=None, sampler_cls=None):
    kwargs = {} if sampler_cls is None else dict(sampler_cls=sampler_cls)
    algo, agent, sampler = make(sampler_kwargs, **kwargs)
    return runner_cls(algo, agent, sampler, n_steps=n_steps, seed=seed, log_interval_steps=16)


def train(runner, run_dir, snapshot_mode="last", **context):
    with logger_context(run_dir, 0, "resume", snapshot_mode=snapshot_mode, **context) as d:
        runner.train()
    return d


def resume(runner, run_dir, path=None, snapshot_mode="last", **context):
    with logger_context(
        run_dir.parent, 0, "resume", snapshot_mode=snapshot_mode, override_prefix=True, **context
    ):
        runner.resume(run_dir if path is None else path)


def assert_same_run(runner_a, dir_a, runner_b, dir_b):
    params_a = runner_a.agent.state_dict()
    params_b = runner_b.agent.state_dict()
    assert params_a.keys() == params_b.keys()
    for key in params_a:
        assert torch.equal(params_a[key], params_b[key]), key
    header_a, rows_a = progress(dir_a)
    header_b, rows_b = progress(dir_b)
    assert header_a == header_b
    assert rows_a == rows_b


@pytest.fixture(scope="module", params=[MinibatchRl, MinibatchRlEval])
def full_run(request, tmp_path_factory):
    runner = runner_for(request.param, N_STEPS)
    run_dir = train(runner, tmp_path_factory.mktemp("full"))
    return request.param, runner, run_dir


def test_a_run_stopped_half_way_and_resumed_equals_the_run_done_at_once(full_run, tmp_path):
    runner_cls, full, full_dir = full_run
    half_dir = train(runner_for(runner_cls, N_STEPS // 2), tmp_path)
    assert load_checkpoint(half_dir)["next_itr"] == 4
    resumed = runner_for(runner_cls, N_STEPS, seed=None)
    resume(resumed, half_dir)
    assert resumed.seed == 5  # taken from the checkpoint
    first_sampled = next(c for c in resumed.sampler.calls if c[0] == "obtain_samples")
    assert first_sampled == ("obtain_samples", 4)
    assert_same_run(full, full_dir, resumed, half_dir)
    _, rows = progress(half_dir)
    assert len(rows) == (5 if runner_cls is MinibatchRlEval else 4)


def test_resume_from_an_older_snapshot_after_a_crash_drops_the_later_rows(full_run, tmp_path):
    runner_cls, full, full_dir = full_run
    crashed = runner_for(runner_cls, N_STEPS, sampler_kwargs=dict(fail_at=6))
    with pytest.raises(RuntimeError):
        train(crashed, tmp_path, snapshot_mode="gap", snapshot_gap=4)
    run_dir = tmp_path / "run_0"
    checkpoint = load_checkpoint(run_dir / "itr_3.pt")
    assert sorted(p.name for p in run_dir.glob("itr_*")) == ["itr_3.pt", checkpoint["sampler_file"]]
    _, rows = progress(run_dir)
    assert [r["Iteration"] for r in rows][-1] == "5"  # logged after the last snapshot
    resumed = runner_for(runner_cls, N_STEPS)
    resume(resumed, run_dir, snapshot_mode="gap", snapshot_gap=4)
    assert_same_run(full, full_dir, resumed, run_dir)
    assert (run_dir / "itr_7.pt").is_file()


def test_the_checkpoint_holds_everything_and_loads_with_weights_only(tmp_path):
    runner = runner_for(MinibatchRl, N_STEPS // 2)
    run_dir = train(runner, tmp_path)
    checkpoint = torch.load(run_dir / "params.pt", weights_only=True)
    assert (checkpoint["itr"], checkpoint["next_itr"], checkpoint["cum_steps"]) == (3, 4, 32)
    assert checkpoint["cum_updates"] == 8
    assert checkpoint["cum_completed_trajs"] == runner.progress.cum_completed_trajs > 0
    assert set(checkpoint["agent_state_dict"]) == {"weight", "bias"}
    assert "state" in checkpoint["optimizer_state_dict"]["optimizer"]  # momentum buffers
    assert set(checkpoint["rng_state"]) >= {"torch", "numpy", "python"}
    state = checkpoint["runner_state"]
    assert state["n_itr"] == 4 and state["log_interval_itrs"] == 2 and state["seed"] == 5
    assert state["progress_rows"] == 2
    assert len(state["traj_window"]) == checkpoint["cum_completed_trajs"]
    assert set(state["traj_window"][0]) == {"Length", "Return", "DiscountedReturn"}
    saved = load_data(run_dir / checkpoint["sampler_file"])
    assert saved["snapshot_id"] == checkpoint["snapshot_id"]
    assert saved["state"]["steps"] == runner.sampler.steps


def test_a_sampler_without_state_dict_writes_no_state_and_still_resumes(tmp_path):
    half = runner_for(MinibatchRl, N_STEPS // 2, sampler_cls=StatelessToySampler)
    run_dir = train(half, tmp_path)
    assert not list(run_dir.glob("sampler_state*"))
    resumed = runner_for(MinibatchRl, N_STEPS, sampler_cls=StatelessToySampler)
    resume(resumed, run_dir)
    _, rows = progress(run_dir)
    assert [r["Iteration"] for r in rows] == ["1", "3", "5", "7"]


@pytest.fixture
def half_dir(tmp_path):
    return train(runner_for(MinibatchRl, N_STEPS // 2), tmp_path)


def test_resume_refuses_a_checkpoint_it_cannot_continue_before_any_work(half_dir, tmp_path):
    algo, agent, sampler = make(dict(batch_B=4))
    other_batch = MinibatchRl(algo, agent, sampler, n_steps=N_STEPS, log_interval_steps=16)
    with pytest.raises(ValueError, match="itr_batch_size=8, this runner has 16"):
        other_batch.resume(half_dir)
    assert sampler.calls == []
    with pytest.raises(ValueError, match="seed=6: the run used seed=5"):
        runner_for(MinibatchRl, N_STEPS, seed=6).resume(half_dir)
    with pytest.raises(ValueError, match="beyond this runner's n_itr=2"):
        runner_for(MinibatchRl, N_STEPS // 4).resume(half_dir)
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        runner_for(MinibatchRl, N_STEPS).resume(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint file or run directory"):
        runner_for(MinibatchRl, N_STEPS).resume(tmp_path / "nowhere")


def test_resume_detects_a_sampler_state_of_another_snapshot(half_dir):
    state_file = half_dir / load_checkpoint(half_dir)["sampler_file"]
    saved = load_data(state_file)
    saved["snapshot_id"] = "something else"
    save_data(saved, state_file)
    runner = runner_for(MinibatchRl, N_STEPS)
    with pytest.raises(ValueError, match="does not belong to"):
        runner.resume(half_dir)
    state_file.unlink()
    with pytest.raises(FileNotFoundError, match=r"sampler state .* is missing"):
        runner.resume(half_dir / "params.pt")
    assert runner.sampler.calls == []


def test_resume_never_unpickles_a_file_of_the_run_directory(half_dir, tmp_path, capsys):
    """A pickle whose loading would run a command, in place of a sampler state of the format
    before states were data, is not opened: the environments start afresh."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    checkpoint = load_checkpoint(half_dir)
    (half_dir / checkpoint.pop("sampler_file")).unlink()
    torch.save(checkpoint, half_dir / "params.pt")
    (half_dir / "sampler_state.pkl").write_bytes(pickle.dumps({"state": Payload()}))
    runner = runner_for(MinibatchRl, N_STEPS)
    resume(runner, half_dir)
    assert not (tmp_path / "pwned").exists()
    assert "keeps its sampler state as a pickle, which is not opened" in capsys.readouterr().out


class ReplayToyAlgo(ToyAlgo):
    """A replay algorithm's resume members: its buffer is not in the snapshot here."""

    def __init__(self):
        super().__init__()
        self.started_empty_at = []

    def save_replay(self, path):
        raise AssertionError("checkpoint_replay is off: the replay is not saved")

    def load_replay(self, path):
        raise AssertionError("no replay file to load")

    def replay_started_empty(self, itr):
        self.started_empty_at.append(itr)


def test_a_replay_algorithm_resumed_without_its_replay_is_told_where(half_dir):
    _, agent, sampler = make()
    algo = ReplayToyAlgo()
    runner = MinibatchRl(algo, agent, sampler, n_steps=N_STEPS, seed=5, log_interval_steps=16)
    resume(runner, half_dir)
    assert algo.started_empty_at == [4]  # the snapshot's next iteration
    assert "replay starts empty" in (half_dir / "debug.log").read_text()
