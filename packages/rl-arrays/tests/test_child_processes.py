"""Children that leave the stop signals to the main process, started with them held back."""

import multiprocessing as mp
import os
import signal
import sys
import time

import pytest

from rl_arrays import CHILD_IGNORED_SIGNALS, enter_child, signals_held_for_children

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask") or sys.platform != "linux", reason="POSIX signals"
)


def _child(main_pid, ready):
    enter_child(main_pid)
    ready.set()
    time.sleep(30)


def test_a_child_lives_through_the_stop_signals_and_dies_with_the_main_process():
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    with signals_held_for_children("fork"):
        assert set(CHILD_IGNORED_SIGNALS) <= signal.pthread_sigmask(signal.SIG_BLOCK, [])
        child = ctx.Process(target=_child, args=(os.getpid(), ready))
        child.start()
    assert not set(CHILD_IGNORED_SIGNALS) & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert ready.wait(30)
    for signum in CHILD_IGNORED_SIGNALS:
        os.kill(child.pid, signum)
    time.sleep(0.3)
    assert child.is_alive()
    child.kill()
    child.join()
