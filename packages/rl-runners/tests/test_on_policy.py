import csv
import random
import time

import numpy as np
import pytest
import torch
from rl_runners_toys import OBS_DIM, ToyTrajInfo, make, make_policy

from rl_runners import (
    InferenceAgentProtocol,
    MinibatchRl,
    MinibatchRlEval,
    OnPolicyRunner,
    logger_context,
)

TIME_COLUMNS = {"CumTime (s)", "StepsPerSecond", "UpdatesPerSecond"}
# The toys: 8 steps an iteration (batch_T 4 x batch_B 2); a row every 2 iterations.


def progress(run_dir):
    """progress.csv without its time columns: (header, rows)."""
    with open(run_dir / "progress.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in reader]
        return reader.fieldnames, rows


def column(run_dir, name, kind=int):
    return [kind(r[name]) for r in progress(run_dir)[1]]


def runner_for(seed=5, n_steps=None, sampler_kwargs=None, **kwargs):
    algo, agent, sampler = make_policy(sampler_kwargs)
    return OnPolicyRunner(
        algo, agent, sampler, n_steps=n_steps, seed=seed, log_interval_steps=16, **kwargs
    )


def context(root, name, **kwargs):
    """A logger_context on ``root/run_<name>`` (entered again: the same files continue)."""
    return logger_context(root, name, "on_policy", **kwargs)


def rng_state():
    return torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()


def assert_same_rng(a, b):
    assert torch.equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])
    assert a[2] == b[2]


def assert_same_training(runner_a, runner_b):
    """Same parameters and normaliser statistics, same optimizer state."""
    params_a, params_b = runner_a.agent.state_dict(), runner_b.agent.state_dict()
    assert params_a.keys() == params_b.keys()
    for key in params_a:
        assert torch.equal(params_a[key], params_b[key]), key
    state_a = runner_a.algo.optimizer.state_dict()["state"]
    state_b = runner_b.algo.optimizer.state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert torch.equal(state_a[key]["momentum_buffer"], state_b[key]["momentum_buffer"])


@pytest.fixture
def full(tmp_path):
    """8 iterations in one learn call: (runner, run directory, random state after)."""
    runner = runner_for()
    with context(tmp_path, "full") as run_dir:
        runner.learn(8)
    state = rng_state()
    runner.close()
    return runner, run_dir, state


@pytest.fixture
def saved(tmp_path):
    """A checkpoint saved after 4 iterations (logged to run_half): (runner, path)."""
    runner = runner_for()
    with context(tmp_path, "half"):
        runner.learn(4)
        path = runner.save(tmp_path / "checkpoints" / "model_4.pt", infos={"note": "half"})
    runner.close()
    return runner, path


# ------------------------------------------------------------------------ learn


def test_learning_twice_equals_one_learn_of_the_sum(full, tmp_path):
    once, once_dir, once_rng = full
    twice = runner_for()
    with context(tmp_path, "twice") as twice_dir:
        twice.learn(4)
        assert twice.current_learning_iteration == 4
        assert ("shutdown",) not in twice.sampler.calls  # the sampler stays up
        twice.learn(4)
    twice_rng = rng_state()
    assert_same_training(once, twice)
    assert_same_rng(once_rng, twice_rng)
    assert twice.sampler.state_dict() == once.sampler.state_dict()
    assert progress(twice_dir) == progress(once_dir)
    assert column(twice_dir, "Iteration") == [1, 3, 5, 7]
    assert column(twice_dir, "CumSteps") == [16, 32, 48, 64]
    calls = twice.sampler.calls
    assert [c[0] for c in calls].count("initialize") == 1
    assert [c[1] for c in calls if c[0] == "obtain_samples"] == list(range(8))
    assert twice.algo.optimize_calls == list(range(8))


def test_each_learn_call_ends_with_a_row(full, tmp_path):
    """learn(3) + learn(5): a row after iteration 2 as well, the others where a single run
    has them; the training itself is the same."""
    once, once_dir, _ = full
    parts = runner_for()
    with context(tmp_path, "parts") as run_dir:
        parts.learn(3)
        assert column(run_dir, "Iteration") == [1, 2]
        parts.learn(5)
    assert_same_training(once, parts)
    assert column(run_dir, "Iteration") == [1, 2, 3, 5, 7]
    assert column(run_dir, "CumSteps") == [16, 24, 32, 48, 64]
    assert column(run_dir, "CumUpdates") == [4, 6, 8, 12, 16]
    assert sum(column(run_dir, "NewCompletedTrajs")) == sum(column(once_dir, "NewCompletedTrajs"))
    assert column(run_dir, "CumCompletedTrajs")[-1] == column(once_dir, "CumCompletedTrajs")[-1]


def test_the_time_between_learn_calls_is_not_counted(tmp_path, monkeypatch):
    runner = runner_for()
    with context(tmp_path, "time") as run_dir:
        runner.learn(2)
        real_time = time.time
        monkeypatch.setattr(time, "time", lambda: real_time() + 1000.0)  # 1000 s later
        runner.learn(2)
        monkeypatch.undo()
    with open(run_dir / "progress.csv", newline="") as f:
        cum_times = [float(r["CumTime (s)"]) for r in csv.DictReader(f)]
    assert 0 < cum_times[0] <= cum_times[1] < 100


def test_the_algorithm_is_initialized_for_n_steps_or_the_first_learn(tmp_path):
    open_ended = runner_for()
    assert open_ended.n_itr == 0  # planned at startup
    with context(tmp_path, "open") as run_dir:
        open_ended.learn(3)
        assert open_ended.algo.init_kwargs["n_itr"] == 3
        open_ended.learn(1)
    assert (
        "past the n_itr=3 the algorithm was initialized with" in (run_dir / "debug.log").read_text()
    )

    planned = runner_for(n_steps=44)  # 5.5 batches: 6 iterations, whole log intervals
    with context(tmp_path, "planned") as run_dir:
        planned.learn(2)
        assert planned.algo.init_kwargs["n_itr"] == 6
        planned.learn()  # the rest of n_steps
        assert planned.current_learning_iteration == 6
        with pytest.raises(ValueError, match="n_steps=44 of this runner are done"):
            planned.learn()
    assert "WARNING" not in (run_dir / "debug.log").read_text()
    assert column(run_dir, "Iteration") == [1, 3, 5]


def test_train_learns_n_steps_and_closes(tmp_path):
    runner = runner_for(n_steps=32)
    with context(tmp_path, "train") as run_dir:
        runner.train()
    assert runner.closed and runner.sampler.calls[-1] == ("shutdown",)
    assert column(run_dir, "CumSteps") == [16, 32]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda r: r.learn(0), ValueError, "num_iterations must be a positive integer"),
        (lambda r: r.learn(2.5), ValueError, "num_iterations must be a positive integer"),
        (lambda r: r.learn(), ValueError, "needs num_iterations: this runner has no n_steps"),
        (lambda r: r.save("x.pt", infos=object()), TypeError, "weights_only"),
        (lambda r: r.get_inference_policy("no-such-device"), RuntimeError, "no-such-device"),
    ],
)
def test_bad_calls_raise_before_any_work(call, error, match):
    runner = runner_for()
    with pytest.raises(error, match=match):
        call(runner)
    assert runner.sampler.calls == [] and runner.algo.init_kwargs is None


def test_constructor_arguments_are_checked_as_minibatch_rl_does():
    with pytest.raises(ValueError, match="n_steps=7 is less than one sampler batch"):
        runner_for(n_steps=7)
    with pytest.raises(ValueError, match="log_traj_window"):
        runner_for(log_traj_window=0)
    with pytest.raises(TypeError, match=r"agent \(object\) lacks to_device"):
        OnPolicyRunner(make()[0], object(), make()[2])


# ---------------------------------------------------------- errors and closing


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_error_in_learn_shuts_the_sampler_down_and_closes(tmp_path, error):
    runner = runner_for(sampler_kwargs=dict(fail_at=5, fail_with=error))
    with context(tmp_path, "fail", snapshot_mode="last") as run_dir:
        runner.learn(4)
        with pytest.raises(error, match="sampler failed at 5"):
            runner.learn(4)
    assert runner.closed and runner.sampler.calls[-1] == ("shutdown",)
    assert column(run_dir, "Iteration") == [1, 3]
    with pytest.raises(RuntimeError, match="closed"):
        runner.learn(1)
    if error is KeyboardInterrupt:
        log = (run_dir / "debug.log").read_text()
        assert "Interrupted after 5 iterations" in log and "load() continues" in log
    resumed = runner_for()  # the snapshot of the last row continues the run
    assert resumed.load(run_dir) is None  # a logger snapshot carries no infos
    assert resumed.current_learning_iteration == 4


def test_close_shuts_the_sampler_down_once(tmp_path):
    runner = runner_for()
    with context(tmp_path, "close"):
        runner.learn(2)
    runner.close()
    assert runner.sampler.calls[-1] == ("shutdown",)
    runner.close()
    assert runner.sampler.calls.count(("shutdown",)) == 1
    with pytest.raises(RuntimeError, match="is closed"):
        runner.learn(1)
    with pytest.raises(RuntimeError, match="is closed"):
        runner.load(tmp_path)
    checkpoint = torch.load(runner.save(tmp_path / "after.pt"), weights_only=True)
    assert checkpoint["next_itr"] == 2 and checkpoint["sampler_state"] is False
    assert not list(tmp_path.glob("after_sampler_state*"))

    with runner_for() as managed, context(tmp_path, "managed"):
        managed.learn(2)
        assert ("shutdown",) not in managed.sampler.calls
    assert managed.closed and managed.sampler.calls.count(("shutdown",)) == 1

    unstarted = runner_for()
    unstarted.close()  # nothing was started: nothing to shut down
    assert unstarted.closed and unstarted.sampler.calls == []


def test_an_error_at_startup_shuts_down(tmp_path):
    runner = runner_for()

    def broken(*args, **kwargs):
        raise RuntimeError("no optimizer")

    runner.algo.initialize = broken
    with pytest.raises(RuntimeError, match="no optimizer"):
        runner.learn(2)
    assert runner.closed and runner.sampler.calls[-1] == ("shutdown",)


# ----------------------------------------------------------------- checkpoints


def test_save_and_load_continue_the_curve_in_a_fresh_runner(full, saved, tmp_path):
    full_runner, full_dir, _ = full
    _, path = saved
    checkpoint = torch.load(path, weights_only=True)
    assert (checkpoint["runner"], checkpoint["next_itr"], checkpoint["cum_steps"]) == (
        "OnPolicyRunner",
        4,
        32,
    )
    assert checkpoint["infos"] == {"note": "half"}
    assert set(checkpoint["agent_state_dict"]) == {
        "linear.weight",
        "linear.bias",
        "obs_mean",
        "obs_count",
    }
    assert checkpoint["agent_state_dict"]["obs_count"] == 32  # the normaliser's statistics
    assert checkpoint["optimizer_state_dict"]["optimizer"]["state"]  # momentum buffers
    assert checkpoint["runner_state"]["progress_rows"] == 2
    assert (path.parent / checkpoint["sampler_file"]).is_file()
    assert checkpoint["sampler_file"].startswith("model_4_sampler_state-")

    fresh = runner_for(seed=None)
    assert fresh.load(path) == {"note": "half"}
    assert fresh.seed == 5 and fresh.current_learning_iteration == 4
    assert fresh.sampler.calls == []  # applied at startup
    with context(tmp_path, "half") as run_dir:
        fresh.learn(4)
    assert fresh.algo.init_kwargs["n_itr"] == 4  # the saved run's: its first learn(4)
    assert [c[1] for c in fresh.sampler.calls if c[0] == "obtain_samples"] == [4, 5, 6, 7]
    assert_same_training(full_runner, fresh)
    assert progress(run_dir) == progress(full_dir)


def test_load_after_startup_applies_at_once(full, saved, tmp_path):
    full_runner, _, _ = full
    _, path = saved
    runner = runner_for()
    with context(tmp_path, "other"):
        runner.learn(2)
        runner.load(path)
        assert runner.current_learning_iteration == 4
        runner.learn(4)
    assert_same_training(full_runner, runner)


def test_load_takes_snapshots_of_minibatch_rl(full, tmp_path):
    full_runner, full_dir, _ = full
    minibatch = MinibatchRl(*make_policy(), n_steps=32, seed=5, log_interval_steps=16)
    with context(tmp_path, "mb", snapshot_mode="last") as run_dir:
        minibatch.train()
    runner = runner_for()
    with context(tmp_path, "mb"):
        assert runner.load(run_dir) is None
        runner.learn(4)
    assert_same_training(full_runner, runner)
    assert progress(run_dir) == progress(full_dir)


def test_load_optimizer_false_keeps_a_fresh_optimizer(saved, tmp_path):
    first, path = saved
    without = runner_for()
    without.load(path, load_optimizer=False)
    checkpoint = torch.load(without.save(tmp_path / "without.pt"), weights_only=True)
    assert checkpoint["optimizer_state_dict"]["optimizer"]["state"] == {}  # no momentum yet
    assert checkpoint["next_itr"] == 4
    for key, value in first.agent.state_dict().items():
        assert torch.equal(checkpoint["agent_state_dict"][key], value), key

    with_optimizer = runner_for()
    with_optimizer.load(path)
    with_optimizer.save(tmp_path / "with.pt")  # (startup: the checkpoint is applied)
    assert_same_training(first, with_optimizer)


def test_infos_round_trip_and_must_be_plain(tmp_path):
    runner = runner_for()
    with context(tmp_path, "infos"):
        runner.learn(2)
    infos = {
        "env_cfg": {"num_envs": 2, "name": "toy", "dt": 0.02, "terrain": None},
        "history": [1, 2.5, (True, "x")],
        "weights": torch.arange(3.0),
    }
    path = runner.save(tmp_path / "infos.pt", infos=infos)
    loaded = runner_for().load(path)
    assert loaded.keys() == infos.keys()
    assert loaded["env_cfg"] == infos["env_cfg"] and loaded["history"] == infos["history"]
    assert torch.equal(loaded["weights"], infos["weights"])
    assert runner_for().load(runner.save(tmp_path / "none.pt")) is None

    class Config:
        pass

    with pytest.raises(TypeError, match=r"infos must load with torch.load\(weights_only=True\)"):
        runner.save(tmp_path / "bad.pt", infos={"cfg": Config()})
    assert not (tmp_path / "bad.pt").exists()


def test_bad_checkpoints_are_refused_clearly(saved, tmp_path):
    runner = runner_for()
    with pytest.raises(FileNotFoundError, match="no checkpoint file or run directory"):
        runner.load(tmp_path / "nowhere.pt")
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match=r"not a checkpoint that torch\.load"):
        runner.load(tmp_path / "notes.pt")
    torch.save({"model": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not an rl_runners checkpoint"):
        runner.load(tmp_path / "other.pt")

    evaluating = MinibatchRlEval(*make_policy(), n_steps=16, seed=5, log_interval_steps=16)
    with context(tmp_path, "eval", snapshot_mode="last") as eval_dir:
        evaluating.train()
    with pytest.raises(ValueError, match="written by MinibatchRlEval, whose runner state lacks"):
        runner.load(eval_dir)

    algo, agent, sampler = make_policy(dict(batch_B=4))
    wider = OnPolicyRunner(algo, agent, sampler, log_interval_steps=16)
    with pytest.raises(ValueError, match=r"cannot load .*itr_batch_size=8, this runner has 16"):
        wider.load(saved[1])
    assert runner.sampler.calls == [] and sampler.calls == []


def test_a_missing_sampler_state_is_a_warning_for_load(saved, tmp_path):
    _, path = saved
    (path.parent / torch.load(path, weights_only=True)["sampler_file"]).unlink()
    runner = runner_for()
    with context(tmp_path, "warned") as run_dir:
        runner.load(path)
        runner.learn(2)
    assert "sampler state" in (run_dir / "debug.log").read_text()
    assert runner.current_learning_iteration == 6


# ------------------------------------------------------------------ deploying


def test_the_inference_policy_is_deterministic_without_grad_on_the_device(tmp_path):
    runner = runner_for()
    with context(tmp_path, "deploy"):
        runner.learn(4)
    model = runner.agent.model
    assert isinstance(runner.agent, InferenceAgentProtocol)
    policy = runner.get_inference_policy(device="cpu")
    observation = torch.randn(5, OBS_DIM)
    action = policy(observation)
    with torch.no_grad():  # the model on normalised observations
        expected = model.linear(observation - model.obs_mean).squeeze(-1)
    assert model.obs_mean.abs().sum() > 0  # normalisation matters here
    assert action.shape == (5,) and action.device == torch.device("cpu")
    assert torch.equal(action, expected)
    assert torch.equal(policy(observation), action)  # deterministic
    assert not action.requires_grad and action.grad_fn is None
    assert torch.equal(policy(observation.numpy()), action)  # numpy observations too
    assert not policy.module.training and model.training  # the agent's model is untouched
    assert not any(p.requires_grad for p in policy.module.parameters())
    assert all(p.requires_grad for p in model.parameters())
    assert policy.module.calls == 3
    policy.reset()  # a recurrent policy's state
    assert policy.module.calls == 0

    obs_count = model.obs_count.clone()
    with context(tmp_path, "deploy"):
        runner.learn(2)  # a copy: later training does not change it
    assert model.obs_count > obs_count
    assert torch.equal(policy(observation), action)
    newer = runner.get_inference_policy()
    assert not torch.equal(newer(observation), action)


def test_a_loaded_policy_deploys_without_training(saved, tmp_path):
    first, path = saved
    player = runner_for()
    player.load(path)
    policy = player.get_inference_policy()  # startup, then the checkpoint: no iteration
    assert [c[0] for c in player.sampler.calls] == ["initialize"]
    observation = torch.randn(3, OBS_DIM)
    assert torch.equal(policy(observation), first.get_inference_policy("cpu")(observation))
    player.close()


def test_an_agent_without_inference_policy_is_a_type_error():
    algo, agent, sampler = make()
    runner = OnPolicyRunner(algo, agent, sampler, log_interval_steps=16)
    with pytest.raises(TypeError, match=r"agent \(ToyAgent\) has no inference_policy"):
        runner.get_inference_policy()
    assert sampler.calls == []


def test_trajectory_returns_are_logged_as_minibatch_rl_does(tmp_path):
    script = {0: [ToyTrajInfo(2, 1.0)], 1: [ToyTrajInfo(4, 3.0)]}
    runner = runner_for(sampler_kwargs=dict(script=script))
    with context(tmp_path, "returns") as run_dir:
        runner.learn(2)
    (row,) = progress(run_dir)[1]
    assert float(row["ReturnAverage"]) == 2.0 and int(row["NewCompletedTrajs"]) == 2
