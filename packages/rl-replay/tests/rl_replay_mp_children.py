"""Functions run in child processes by the rl-replay multiprocessing tests.

They live in their own module, put on sys.path by the tests, because a child started
with spawn or forkserver must import its target by name.
"""

import numpy as np


def advance_sample_update(tree, T, new_priorities, queue):
    """Advance a shared sum tree, sample, set new priorities, and report what was done."""
    tree.advance(T)
    T_idxs, B_idxs, _ = tree.sample(len(new_priorities))
    tree.update_batch_priorities(np.asarray(new_priorities, dtype=np.float64))
    queue.put((T_idxs, B_idxs, tree.total, tree.t, tree.t_total))


def advance_from_queue(inbox, outbox):
    """Receive ``(tree, T)``, advance the tree, send back its total and cursor."""
    tree, T = inbox.get()
    tree.advance(T)
    outbox.put((tree.total, tree.t, tree.t_total, tree._sampled_leaves is None))


def append_chunks(buffer, chunks, queue):
    """Write samples into a shared replay buffer from another process."""
    for chunk in chunks:
        buffer.append_samples(chunk)
    queue.put(buffer.t_total)


def sample_from(buffer, batch_B, queue):
    """Sample a shared replay buffer from another process; send back what was seen."""
    batch = buffer.sample_batch(batch_B)
    queue.put((buffer.t_total, batch.agent_inputs.observation, batch.return_))


def hold_write_lock(lock, flag, conn):
    """Take ``lock``'s write side, say so, and set ``flag`` after a while, before letting go."""
    import time

    with lock.write_lock():
        conn.send("held")
        time.sleep(0.3)
        flag[0] = 1
