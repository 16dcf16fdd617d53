"""namedarraytuples and shared buffers across processes, under every start method."""

import gc
import os
import pickle

import numpy as np
import pytest
import rl_arrays_mp_children as children

from rl_arrays import (
    AgentInputs,
    NamedArrayTupleSchema,
    Samples,
    buffer_from_example,
    namedarraytuple,
    np_mp_array,
)

TIMEOUT = 60


def _run(ctx, target, *args):
    process = ctx.Process(target=target, args=args)
    process.start()
    return process


def _join(process):
    process.join(TIMEOUT)
    assert process.exitcode == 0


def test_runtime_type_round_trips_through_a_child(mp_context):
    Local = namedarraytuple("Local", ["obs", "reward"])  # made at run time, not importable
    queue = mp_context.Queue()
    process = _run(
        mp_context, children.describe, Local(np.arange(6).reshape(3, 2), np.ones(3)), queue
    )
    name, fields, first, back = queue.get(timeout=TIMEOUT)
    _join(process)
    assert (name, fields, first) == ("Local", ("obs", "reward"), [0, 1])
    assert type(back) is Local
    np.testing.assert_array_equal(back.obs, np.arange(6).reshape(3, 2))


def test_schema_and_module_types_round_trip_through_a_queue(mp_context):
    Schema = NamedArrayTupleSchema("Obs", ["image", "vector"])
    structure = Samples(
        agent=AgentInputs(np.zeros((2, 3)), np.arange(2), np.ones(2)),
        env=Schema(np.full((2, 4), 7, np.uint8), None),
    )
    inbox, outbox = mp_context.Queue(), mp_context.Queue()
    process = _run(mp_context, children.echo_from_queue, inbox, outbox)
    inbox.put(structure)
    name, fields, back = outbox.get(timeout=TIMEOUT)
    _join(process)
    assert (name, fields) == ("Samples", ("agent", "env"))
    assert type(back) is Samples and type(back.agent) is AgentInputs
    assert back.env._typename == "Obs" and back.env.vector is None
    np.testing.assert_array_equal(back.env.image, structure.env.image)


def test_runtime_class_object_itself_pickles():
    Local = namedarraytuple("LocalCls", "a b", classname_suffix=True)
    assert pickle.loads(pickle.dumps(Local)) is Local
    assert pickle.loads(pickle.dumps(AgentInputs)) is AgentInputs


def test_child_writes_to_shared_array_are_seen(mp_context):
    array = np_mp_array((4, 3), np.float32)
    queue = mp_context.Queue()
    process = _run(mp_context, children.fill, array[1:3], 5.0, queue)
    assert queue.get(timeout=TIMEOUT) == "done"
    _join(process)
    np.testing.assert_array_equal(array[1:3], 5.0)
    assert array[0].sum() == 0 and array[3].sum() == 0


def test_shared_array_sent_through_a_queue_stays_shared(mp_context):
    array = np_mp_array(10, np.int64)
    inbox, outbox = mp_context.Queue(), mp_context.Queue()
    process = _run(mp_context, children.fill_from_queue, inbox, outbox)
    inbox.put((array[::2], 3))
    assert outbox.get(timeout=TIMEOUT) == 15.0
    _join(process)
    np.testing.assert_array_equal(array, [3, 0] * 5)


def test_shared_buffer_from_example_is_written_by_a_child(mp_context):
    example = AgentInputs(np.zeros(2, np.float32), np.int64(0), np.float32(0))
    buffer = buffer_from_example(example, (5, 4), share_memory=True)
    queue = mp_context.Queue()
    process = _run(mp_context, children.fill, buffer.observation, 1.5, queue)
    queue.get(timeout=TIMEOUT)
    _join(process)
    assert buffer.observation.shape == (5, 4, 2) and (buffer.observation == 1.5).all()


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.serial  # /dev/shm is the whole machine's: another test's entry would show here
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_shared_memory_is_released_when_unused():
    gc.collect()
    before_fds, before_shm = _open_fds(), set(os.listdir("/dev/shm"))
    arrays = [np_mp_array((256, 256), np.float64) for _ in range(20)]
    views = [a[1:] for a in arrays]
    assert _open_fds() >= before_fds + 20
    del arrays
    gc.collect()
    assert _open_fds() >= before_fds + 20  # views keep their memory alive
    views[0][...] = 1.0
    del views
    gc.collect()
    assert _open_fds() == before_fds
    assert set(os.listdir("/dev/shm")) <= before_shm  # no named segment ever left behind


def test_derived_arrays_pickle_as_plain_copies():
    array = np_mp_array(3, np.float64)
    doubled = pickle.loads(pickle.dumps(array + 1))
    np.testing.assert_array_equal(doubled, [1, 1, 1])
    copy = pickle.loads(pickle.dumps(array.copy()))
    copy[0] = 9
    assert array[0] == 0
