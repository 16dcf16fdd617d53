"""Asynchronous parameter sharing between two processes, under every start method."""

import multiprocessing as mp

import pytest
import rl_agents_mp_children as children
import torch
from rl_agents_testkit import MUJOCO_SPACES

import rl_agents as ra

TIMEOUT = 60


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_sampler_process_sees_parameters_only_once_sent(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    ctx = mp.get_context(method)
    torch.manual_seed(0)
    trainer = ra.MujocoFfAgent(model_kwargs=dict(hidden_sizes=[16], normalize_observation=True))
    trainer.initialize(MUJOCO_SPACES, share_memory=True)
    original = {k: v.tolist() for k, v in trainer.state_dict().items()}
    changed, sent, results = ctx.Event(), ctx.Event(), ctx.Queue()
    process = ctx.Process(
        target=children.receive_parameters, args=(trainer, changed, sent, results)
    )
    process.start()
    try:
        stage, start = results.get(timeout=TIMEOUT)
        assert stage == "start"
        assert start == original

        # Train in place on the shared model (a CPU trainer): the sampler's own model is
        # untouched until the update is sent.
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(1.0)
        trainer.update_obs_rms(torch.randn(32, 5) + 4.0)
        changed.set()
        stage, unchanged = results.get(timeout=TIMEOUT)
        assert stage == "changed"
        assert unchanged == original

        trainer.send_shared_memory()
        sent.set()
        stage, received = results.get(timeout=TIMEOUT)
        assert stage == "sent"
        assert received == {k: v.tolist() for k, v in trainer.state_dict().items()}
        assert received != original and received["obs_rms.count"] == 32
    finally:
        process.join(TIMEOUT)
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0
