"""The loop's parts: an Evaluator, a Checkpointer, the one owner of the agent's mode."""

import pytest
from rl_runners_toys import ToyTrajInfo, make
from test_resume import assert_same_run

from rl_runners import (
    AgentModes,
    AsyncRl,
    AsyncRlBase,
    Checkpointer,
    Evaluator,
    MinibatchRl,
    MinibatchRlBase,
    MinibatchRlEval,
    SyncRl,
    SyncRlMixin,
    load_checkpoint,
    logger_context,
)

EVAL_SCRIPT = [ToyTrajInfo(5, 2.0), ToyTrajInfo(7, 4.0)]


def train(runner, tmp_path, name, snapshot_mode="last"):
    with logger_context(tmp_path / name, 0, name, snapshot_mode=snapshot_mode) as run_dir:
        runner.train()
    return run_dir


def build(runner_cls, n_steps=48, **kwargs):
    algo, agent, sampler = make(dict(eval_script=EVAL_SCRIPT))
    return runner_cls(algo, agent, sampler, n_steps, seed=3, log_interval_steps=16, **kwargs)


def test_minibatch_rl_given_an_evaluator_equals_minibatch_rl_eval(tmp_path):
    named = build(MinibatchRlEval, stop_return=3.5)
    composed = build(MinibatchRl, evaluator=Evaluator(stop_return=3.5))
    named_dir = train(named, tmp_path, "named")
    composed_dir = train(composed, tmp_path, "composed")
    assert_same_run(named, named_dir, composed, composed_dir)
    assert named.agent.calls == composed.agent.calls
    assert named.sampler.calls == composed.sampler.calls
    assert load_checkpoint(named_dir)["runner"] == "MinibatchRlEval"  # (as before)


def test_an_evaluator_stops_a_composed_loop_too(tmp_path):
    runner = build(MinibatchRl, evaluator=Evaluator(stop_return=3.0))
    train(runner, tmp_path, "stop", snapshot_mode="none")
    assert runner.stop_reached and runner.progress.next_itr == 2


class RecordingCheckpointer(Checkpointer):
    def __init__(self):
        super().__init__()
        self.saved, self.restored = [], []

    def save(self, runner, itr):
        self.saved.append(itr)
        super().save(runner, itr)

    def restore(self, runner, path, checkpoint, sampler_state, load_optimizer=True):
        self.restored.append(checkpoint["next_itr"])
        super().restore(runner, path, checkpoint, sampler_state, load_optimizer)


def test_a_custom_checkpointer_is_used_for_snapshots_and_resume(tmp_path):
    checkpointer = RecordingCheckpointer()
    runner = build(MinibatchRl, checkpointer=checkpointer)
    run_dir = train(runner, tmp_path, "custom")
    assert checkpointer.saved == [1, 3, 5]
    assert load_checkpoint(run_dir)["next_itr"] == 6
    longer = build(MinibatchRl, n_steps=64, checkpointer=checkpointer)
    with logger_context(run_dir.parent, 0, "custom", snapshot_mode="last", override_prefix=True):
        longer.resume(run_dir)
    assert checkpointer.restored == [6] and checkpointer.saved == [1, 3, 5, 7]


def test_checkpoint_replay_and_a_checkpointer_are_not_both_given():
    with pytest.raises(ValueError, match="not both"):
        build(MinibatchRl, checkpoint_replay=True, checkpointer=Checkpointer())


def test_agent_modes_switch_once_per_mode_and_iteration():
    _, agent, _ = make()
    modes = AgentModes(agent)
    for mode, itr in [("sample", 0), ("sample", 0), ("train", 0), ("sample", 1), ("eval", 1)]:
        modes.switch(mode, itr)
    assert agent.calls == [
        ("sample_mode", 0),
        ("train_mode", 0),
        ("sample_mode", 1),
        ("eval_mode", 1),
    ]


def test_rlpyt_names_are_aliases_of_the_composed_classes():
    assert MinibatchRlBase is MinibatchRl
    assert AsyncRlBase is AsyncRl
    assert SyncRlMixin is SyncRl
    assert issubclass(MinibatchRlEval, MinibatchRl)
