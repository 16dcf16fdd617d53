"""Targets for processes started with spawn in the rl-agents tests (imported by name)."""

from __future__ import annotations


def _snapshot(agent):
    """Plain lists: tensors sent through a queue would need this process alive to be read."""
    return {key: value.tolist() for key, value in agent.state_dict().items()}


def receive_parameters(agent, changed, sent, results):
    """The sampler side of asynchronous mode: a model of its own, refreshed on demand."""
    agent.async_cpu(share_memory=False)
    results.put(("start", _snapshot(agent)))
    changed.wait(60)
    agent.recv_shared_memory()  # the shared model changed, but nothing was sent yet
    results.put(("changed", _snapshot(agent)))
    sent.wait(60)
    agent.recv_shared_memory()
    results.put(("sent", _snapshot(agent)))


def hold_the_lock(agent, conn):
    """Take the shared model's lock as ``recv_shared_memory`` does, say so, and keep it until
    told to let go."""
    with agent._rw_lock:
        conn.send("held")
        conn.recv()
