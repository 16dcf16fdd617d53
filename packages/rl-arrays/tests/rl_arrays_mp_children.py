"""Functions run in child processes by the multiprocessing tests.

They live in their own module, put on sys.path by the tests, because a child started
with spawn or forkserver must import its target by name.
"""

import numpy as np


def describe(obj, queue):
    """Send back what the child saw, and a new instance of the same type."""
    queue.put((type(obj).__name__, obj._fields, np.asarray(obj[0].get(0)).tolist(), obj._make(obj)))


def echo_from_queue(inbox, outbox):
    obj = inbox.get()
    outbox.put((type(obj).__name__, obj._fields, obj))


def fill(array, value, queue):
    array[...] = value
    queue.put("done")


def fill_from_queue(inbox, outbox):
    array, value = inbox.get()
    array[...] = value
    outbox.put(float(array.sum()))
