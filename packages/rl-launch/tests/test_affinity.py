import json
import os
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_launch import (
    AffinityDict,
    Hardware,
    affinity_from_code,
    detect_hardware,
    encode_affinity,
    make_affinity,
    n_run_slots,
    visible_gpu_count,
)

ARGUMENTS = (
    "n_cpu_core",
    "n_gpu",
    "contexts_per_gpu",
    "gpu_per_run",
    "cpu_per_run",
    "cpu_per_worker",
    "cpu_reserved",
    "hyperthread_offset",
    "n_socket",
    "run_slot",
    "async_sample",
    "sample_gpu_per_run",
    "optim_sample_share_gpu",
    "alternating",
    "set_affinity",
)
SAMPLING_KEYS = {
    "master_cpus",
    "master_torch_threads",
    "workers_cpus",
    "worker_torch_threads",
    "cuda_idx",
    "alternating",
    "set_affinity",
}
OPTIMIZER_KEYS = {"master_cpus", "master_torch_threads", "cuda_idx", "set_affinity"}


def mostly(default, other):
    """``default`` about two times in three, else ``other``: keeps many draws possible."""
    return st.one_of(st.just(default), st.just(default), other)


@st.composite
def configurations(draw):
    """Any mix of arguments, many of them impossible."""
    n_cpu_core = draw(st.integers(1, 40))
    n_gpu = draw(mostly(0, st.integers(1, 6)))
    async_sample = draw(st.booleans())
    return dict(
        n_cpu_core=n_cpu_core,
        n_gpu=n_gpu,
        contexts_per_gpu=draw(mostly(1, st.integers(2, 3))),
        gpu_per_run=draw(mostly(1, st.integers(2, 3))),
        cpu_per_run=draw(mostly(None, st.integers(1, 40)) if n_gpu else st.integers(1, 40)),
        cpu_per_worker=draw(mostly(1, st.integers(2, 4))),
        cpu_reserved=draw(mostly(0, st.integers(1, 3))),
        hyperthread_offset=draw(st.sampled_from([0, n_cpu_core, n_cpu_core + 8, 1])),
        n_socket=draw(mostly(1, st.integers(2, 4))),
        async_sample=async_sample,
        sample_gpu_per_run=draw(mostly(0, st.integers(1, 2)) if async_sample else st.just(0)),
        optim_sample_share_gpu=draw(mostly(False, st.just(True))),
        alternating=draw(st.booleans()),
        set_affinity=draw(mostly(True, st.just(False))),
    )


@st.composite
def possible_configurations(draw):
    """Valid by construction, with the number of run slots they must give."""
    cpu_per_worker = draw(st.integers(1, 3))
    cpu_reserved = draw(st.integers(0, 2))
    n_slots = draw(st.integers(1, 6))
    common = dict(
        cpu_per_worker=cpu_per_worker,
        cpu_reserved=cpu_reserved,
        alternating=draw(st.booleans()),
        set_affinity=draw(st.booleans()),
    )
    workers = draw(st.integers(1, 3))
    if draw(st.booleans()):  # CPU only, sync
        n_socket = draw(st.integers(1, 2))
        cpu_per_run = cpu_reserved + workers * cpu_per_worker
        n_cpu_core = cpu_per_run * n_slots * n_socket
        hyperthread_offset = draw(st.sampled_from([0, n_cpu_core]))
        kwargs = dict(
            n_cpu_core=n_cpu_core,
            cpu_per_run=cpu_per_run,
            n_socket=n_socket,
            hyperthread_offset=hyperthread_offset,
        )
        return {**common, **kwargs}, n_slots * n_socket
    gpu_per_run = draw(st.integers(1, 3))
    per_gpu = cpu_reserved + workers * cpu_per_worker
    kwargs = dict(
        n_gpu=gpu_per_run * n_slots,
        gpu_per_run=gpu_per_run,
        n_cpu_core=per_gpu * gpu_per_run * n_slots,
        hyperthread_offset=0,
        n_socket=1,
    )
    return {**common, **kwargs}, n_slots


def processes(affinity):
    """Every process dict of one run, and whether each samples."""
    if isinstance(affinity, list):
        return [(a, True) for a in affinity]
    if "sampler" in affinity:
        return [(affinity["sampler"], True), *((a, False) for a in affinity["optimizer"])]
    return [(affinity, True)]


def machine_cpus(n_cpu_core, hyperthread_offset=0, n_socket=1):
    """The cpu ids a layout may use: each socket's first n_cpu_core / n_socket cores (of
    max(n_cpu_core, hyperthread_offset) in all), and their hyperthreads."""
    per_socket = n_cpu_core // n_socket
    stride = max(n_cpu_core, hyperthread_offset) // n_socket
    cores = {s * stride + i for s in range(n_socket) for i in range(per_socket)}
    return cores | ({c + hyperthread_offset for c in cores} if hyperthread_offset else set())


def check_run_slots(kwargs, n_slots):
    """The properties every valid configuration's slots have."""
    offset = kwargs.get("hyperthread_offset", 0)
    pinned = kwargs.get("set_affinity", True)
    ids = machine_cpus(kwargs["n_cpu_core"], offset, kwargs.get("n_socket", 1))
    cpus_of_slot, gpu_users = [], {}
    for slot in range(n_slots):
        code = encode_affinity(run_slot=slot, **kwargs)
        affinity = affinity_from_code(code, check_machine=False)
        assert affinity == make_affinity(run_slot=slot, check_machine=False, **kwargs)
        assert json.loads(json.dumps(affinity)) == affinity  # travels as JSON ...
        again = pickle.loads(pickle.dumps(affinity))  # ... and to spawned processes
        assert again == affinity and type(again) is type(affinity)
        slot_cpus, slot_gpus = set(), []
        for process, samples in processes(affinity):
            assert set(process) == (SAMPLING_KEYS if samples else OPTIMIZER_KEYS)
            assert isinstance(process, AffinityDict)
            assert process.cuda_idx == process["cuda_idx"]
            if process["cuda_idx"] is not None:
                assert 0 <= process["cuda_idx"] < kwargs.get("n_gpu", 0)
                slot_gpus.append(process["cuda_idx"])
            assert process["set_affinity"] is pinned
            if samples:
                workers = process["workers_cpus"]
                assert len(workers) >= 1
                assert process["worker_torch_threads"] == kwargs.get("cpu_per_worker", 1)
                if kwargs.get("alternating"):
                    half = len(workers) // 2
                    assert len(workers) % 2 == 0 and workers[:half] == workers[half:]
            if not pinned:
                assert process["master_cpus"] is None
                assert not samples or all(w is None for w in process["workers_cpus"])
                continue
            cpus = set(process["master_cpus"])
            assert cpus and cpus <= ids
            assert not cpus & slot_cpus, "two processes of one run share a cpu"
            slot_cpus |= cpus
            assert process["master_torch_threads"] * (2 if offset else 1) == len(cpus)
            if samples:
                for worker in process["workers_cpus"]:
                    assert set(worker) <= cpus
        if kwargs.get("async_sample") and kwargs.get("optim_sample_share_gpu"):
            assert affinity["sampler"]["cuda_idx"] == affinity["optimizer"][0]["cuda_idx"]
            slot_gpus.remove(affinity["sampler"]["cuda_idx"])
        assert len(slot_gpus) == len(set(slot_gpus)), "a run uses one GPU twice"
        for gpu in set(slot_gpus):
            gpu_users[gpu] = gpu_users.get(gpu, 0) + 1
        if pinned:
            assert all(not slot_cpus & other for other in cpus_of_slot), "run slots overlap"
            cpus_of_slot.append(slot_cpus)
    assert all(users <= kwargs.get("contexts_per_gpu", 1) for users in gpu_users.values())
    with pytest.raises(ValueError, match="run_slot"):
        encode_affinity(run_slot=n_slots, **kwargs)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configurations())
def test_any_configuration_is_laid_out_or_refused_by_name(kwargs):
    try:
        code = encode_affinity(**kwargs)
    except ValueError as error:
        assert any(name in str(error) for name in ARGUMENTS), str(error)
        return
    assert encode_affinity(**kwargs) == code  # deterministic
    check_run_slots(kwargs, n_run_slots(code))


@settings(max_examples=200, deadline=None)
@given(possible_configurations())
def test_possible_configurations_give_the_expected_run_slots(case):
    kwargs, n_slots = case
    code = encode_affinity(**kwargs)
    assert n_run_slots(code) == n_slots
    check_run_slots(kwargs, n_slots)


def test_cpu_runs_with_hyperthreads_and_sockets():
    kwargs = dict(n_cpu_core=8, hyperthread_offset=8, n_socket=2, cpu_per_run=3)
    code = encode_affinity(**kwargs)
    assert n_run_slots(code) == 2  # one run of 3 per socket of 4 (none straddles)
    first, second = (make_affinity(s, check_machine=False, **kwargs) for s in (0, 1))
    assert first["master_cpus"] == [0, 1, 2, 8, 9, 10]
    assert second["master_cpus"] == [4, 5, 6, 12, 13, 14]
    assert second["workers_cpus"] == [[4, 12], [5, 13], [6, 14]]
    assert second["master_torch_threads"] == 3 and second["cuda_idx"] is None


def test_gpu_contexts_multi_gpu_and_async_shapes():
    shared = make_affinity(
        3, False, n_cpu_core=8, n_gpu=2, contexts_per_gpu=2, hyperthread_offset=0
    )
    assert shared["cuda_idx"] == 1 and shared["master_cpus"] == [6, 7]
    multi = make_affinity(
        1, False, n_cpu_core=8, n_gpu=4, gpu_per_run=2, cpu_reserved=1, hyperthread_offset=0
    )
    assert [p["cuda_idx"] for p in multi] == [2, 3]
    assert [p["master_cpus"] for p in multi] == [[4, 5], [6, 7]]
    assert [p["workers_cpus"] for p in multi] == [[[5]], [[7]]]  # (core 4 and 6 reserved)
    run = make_affinity(
        0,
        False,
        n_cpu_core=8,
        n_gpu=2,
        async_sample=True,
        sample_gpu_per_run=1,
        cpu_reserved=2,
        hyperthread_offset=0,
    )
    assert run.optimizer == [
        {"master_cpus": [0, 1], "master_torch_threads": 2, "cuda_idx": 0, "set_affinity": True}
    ]
    assert run.sampler.cuda_idx == 1 and run.sampler.master_cpus == [2, 3, 4, 5, 6, 7]
    cpu_async = make_affinity(1, False, n_cpu_core=4, cpu_per_run=2, async_sample=True)
    assert cpu_async.optimizer[0].master_cpus == [2] and cpu_async.sampler.workers_cpus == [[3]]


def test_unpinned_runs_keep_their_worker_count():
    affinity = make_affinity(n_cpu_core=4, hyperthread_offset=0, set_affinity=False)
    assert affinity["master_cpus"] is None and affinity["workers_cpus"] == [None] * 4


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(n_cpu_core=4, cpu_per_run=5), "cpu_per_run=5 is more than"),
        (dict(n_cpu_core=4, n_gpu=1, gpu_per_run=2), "gpu_per_run=2 is more than"),
        (
            dict(n_cpu_core=4, n_gpu=2, async_sample=True, sample_gpu_per_run=1, gpu_per_run=2),
            "GPUs per run",
        ),
        (
            dict(n_cpu_core=4, async_sample=True, sample_gpu_per_run=1),
            "sample_gpu_per_run=1 needs GPUs",
        ),
        (dict(n_cpu_core=4, sample_gpu_per_run=1), "only with async_sample"),
        (dict(n_cpu_core=4, n_gpu=1, optim_sample_share_gpu=True), "only with async_sample"),
        (dict(n_cpu_core=4, n_gpu=1, cpu_per_run=1.5), "cpu_per_run must be an int"),
        (dict(n_cpu_core=2, n_gpu=4), "n_cpu_core=2 cores cannot"),
        (dict(n_cpu_core=4, cpu_per_run=2, cpu_per_worker=3), "cpu_per_worker=3"),
        (dict(n_cpu_core=4, cpu_reserved=4), "cpu_reserved=4"),
        (dict(n_cpu_core=8, hyperthread_offset=4), "hyperthread_offset=4"),
        (dict(n_cpu_core=6, n_socket=4), "n_socket=4"),
        (dict(n_cpu_core=4, hyperthread_offset=9, n_socket=2), "hyperthread_offset=9"),
        (dict(n_cpu_core=8, n_socket=2, cpu_per_run=6), "straddle sockets"),
        (dict(n_cpu_core=4, n_gpu=2, contexts_per_gpu=2, gpu_per_run=2), "contexts_per_gpu=2"),
        (
            dict(n_cpu_core=4, async_sample=True, optim_sample_share_gpu=True),
            "optim_sample_share_gpu=True needs GPUs",
        ),
        (
            dict(n_cpu_core=4, n_gpu=1, async_sample=True, cpu_reserved=4, sample_gpu_per_run=0),
            "optimizer",
        ),
        (dict(n_cpu_core=4, cpu_per_run=2, run_slot=2), "run_slot=2 is out of range"),
        (dict(n_cpu_core="4"), "n_cpu_core must be an int"),
        (dict(n_cpu_core=4, alternating=1), "alternating must be a bool"),
        (dict(n_cpu_core=4, cpu_per_run=0), "cpu_per_run"),
    ],
)
def test_impossible_requests_are_refused_by_name(kwargs, named):
    kwargs.setdefault("hyperthread_offset", 0)
    kwargs.setdefault("n_socket", 1)
    with pytest.raises(ValueError, match=named):
        encode_affinity(**kwargs)


def test_cpu_per_run_is_ignored_with_gpus_as_in_rlpyt():
    """rlpyt's default cpu_per_run=1 (and any value) is ignored with GPUs: the same code."""
    plain = encode_affinity(n_cpu_core=8, n_gpu=2, gpu_per_run=1)
    assert encode_affinity(n_cpu_core=8, n_gpu=2, cpu_per_run=1, gpu_per_run=1) == plain
    for cpu_per_run in (0, 2, 8, 64, 4.0):
        assert encode_affinity(n_cpu_core=8, n_gpu=2, cpu_per_run=cpu_per_run) == plain
    for slot in (0, 1):
        affinity = make_affinity(slot, False, n_cpu_core=8, n_gpu=2, cpu_per_run=1, gpu_per_run=1)
        assert affinity == make_affinity(slot, False, n_cpu_core=8, n_gpu=2, gpu_per_run=1)
        assert affinity.cuda_idx == slot and affinity.master_torch_threads == 4
    assert n_run_slots(plain) == 2
    with pytest.raises(ValueError, match="cpu_per_run must be an int >= 1 or None without GPUs"):
        encode_affinity(n_cpu_core=8, cpu_per_run=0)


def test_a_shared_gpu_overrides_sample_gpu_per_run_as_in_rlpyt():
    kwargs = dict(n_cpu_core=8, n_gpu=2, async_sample=True, optim_sample_share_gpu=True)
    kwargs.update(hyperthread_offset=0, n_socket=1)
    code = encode_affinity(sample_gpu_per_run=1, **kwargs)
    assert encode_affinity(sample_gpu_per_run=0, **kwargs) == code
    assert encode_affinity(sample_gpu_per_run=2, **kwargs) == code
    assert n_run_slots(code) == 2  # one GPU per run, the sampler's and the optimizer's
    run = make_affinity(1, False, **kwargs)
    assert run.sampler.cuda_idx == run.optimizer[0].cuda_idx == 1


def test_runs_sharing_gpus_spread_over_the_gpus_first():
    """rlpyt's order: slot k uses GPU k % n_gpu, so fewer runs than slots use every GPU."""
    kwargs = dict(n_cpu_core=8, n_gpu=4, contexts_per_gpu=2, hyperthread_offset=0, n_socket=1)
    slots = [make_affinity(s, False, **kwargs) for s in range(8)]
    assert [a.cuda_idx for a in slots] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [a.master_cpus for a in slots[:2]] == [[0], [2]]  # a GPU's runs on adjacent cores
    assert slots[4].master_cpus == [1]


def test_a_larger_machine_s_sockets_follow_hyperthread_offset():
    """rlpyt's example_7: 16 of 24 cores on 2 sockets, so socket 1's cores start at 12."""
    kwargs = dict(n_cpu_core=16, n_gpu=8, hyperthread_offset=24, n_socket=2, gpu_per_run=2)
    first, third = make_affinity(0, False, **kwargs), make_affinity(2, False, **kwargs)
    assert [(p.master_cpus, p.cuda_idx) for p in first] == [
        ([0, 1, 24, 25], 0),
        ([2, 3, 26, 27], 1),
    ]
    assert [(p.master_cpus, p.cuda_idx) for p in third] == [
        ([12, 13, 36, 37], 4),
        ([14, 15, 38, 39], 5),
    ]
    assert third[1].workers_cpus == [[14, 38], [15, 39]]


# rlpyt's documented and example calls (docs 17.3, examples/, experiments/scripts launch
# files), unchanged, with the run slots rlpyt's get_n_run_slots gives them.
RLPYT_CALLS = [
    ("docs: 8 GPUs, 40 cores, 1 GPU per run", dict(n_cpu_core=40, n_gpu=8), 8),
    ("docs: 2 GPUs per run", dict(n_cpu_core=40, n_gpu=8, gpu_per_run=2), 4),
    ("example_6", dict(n_cpu_core=2, n_gpu=0, cpu_per_run=1, set_affinity=True), 2),
    (
        "example_7",
        dict(n_cpu_core=16, n_gpu=8, hyperthread_offset=24, n_socket=2, gpu_per_run=2),
        4,
    ),
    (
        "atari_dqn_async_cpu",
        dict(n_cpu_core=3, n_gpu=1, sample_gpu_per_run=0, async_sample=True),
        1,
    ),
    (
        "atari_dqn_async_gpu",
        dict(
            n_cpu_core=8,
            n_gpu=2,
            gpu_per_run=1,
            sample_gpu_per_run=1,
            async_sample=True,
            optim_sample_share_gpu=False,
        ),
        1,
    ),
    (
        "atari_dqn_async_serial",
        dict(n_cpu_core=2, n_gpu=1, sample_gpu_per_run=0, async_sample=True),
        1,
    ),
    (
        "launch_mujoco_td3_serial",
        dict(n_cpu_core=4, n_gpu=4, contexts_per_gpu=1, cpu_per_run=1, hyperthread_offset=20),
        4,
    ),
    (
        "launch_mujoco_sac_serial",
        dict(
            n_cpu_core=8,
            n_gpu=4,
            contexts_per_gpu=2,
            cpu_per_run=1,
            hyperthread_offset=20,
            n_socket=1,
        ),
        8,
    ),
    (
        "launch_mujoco_ddpg_td3_sac_serial",
        dict(n_cpu_core=16, n_gpu=8, contexts_per_gpu=2, hyperthread_offset=24, n_socket=2),
        16,
    ),
    (
        "launch_mujoco_ddpg_cpu",
        dict(n_cpu_core=2, n_gpu=0, cpu_per_run=2, hyperthread_offset=2, n_socket=1),
        1,
    ),
    ("launch_atari_ff_a2c_gpu", dict(n_cpu_core=16, n_gpu=4, hyperthread_offset=20, n_socket=2), 4),
    (
        "launch_atari_dqn_async_gpu (shared GPU, sample_gpu_per_run=0)",
        dict(
            n_cpu_core=24,
            n_gpu=8,
            async_sample=True,
            sample_gpu_per_run=0,
            gpu_per_run=1,
            hyperthread_offset=24,
            optim_sample_share_gpu=True,
        ),
        8,
    ),
    (
        "launch_mujoco_sac_async_gpu",
        dict(n_cpu_core=16, n_gpu=4, async_sample=True, sample_gpu_per_run=1),
        2,
    ),
]


@pytest.mark.parametrize(
    "kwargs, n_slots", [c[1:] for c in RLPYT_CALLS], ids=[c[0] for c in RLPYT_CALLS]
)
def test_rlpyt_calls_work_unchanged(monkeypatch, kwargs, n_slots):
    # A fixed 48-core machine without hyperthreads for the arguments left to detection.
    monkeypatch.setattr("rl_launch._affinity.detect_hardware", lambda: Hardware(48, 0, 1, None))
    code = encode_affinity(**kwargs)
    assert n_run_slots(code) == n_slots
    check_run_slots(kwargs, n_slots)
    first = make_affinity(0, False, **kwargs)
    if kwargs.get("n_gpu") and not kwargs.get("async_sample"):
        gpus = [p.cuda_idx for p in (first if isinstance(first, list) else [first])]
        assert gpus == list(range(kwargs.get("gpu_per_run", 1)))  # slot 0 starts at GPU 0


def test_rlpyt_s_several_action_servers_are_refused_saying_so():
    """rlpyt's R2D1 scripts ask for 2 or 3 action-server GPUs; our async samplers run one."""
    with pytest.raises(ValueError, match="several action-server GPUs per run are not supported"):
        encode_affinity(
            n_cpu_core=40, n_gpu=4, async_sample=True, gpu_per_run=1, sample_gpu_per_run=2
        )


def test_a_bad_code_is_refused_by_name():
    code = encode_affinity(n_cpu_core=4, hyperthread_offset=0, n_socket=1)
    with pytest.raises(ValueError, match="names no run slot"):
        affinity_from_code(code)
    with pytest.raises(ValueError, match="lacks cpw"):
        affinity_from_code("slot0_" + code.replace("_cpw1", ""), check_machine=False)
    with pytest.raises(ValueError, match="unknown or repeated field 'cpu'"):
        affinity_from_code(f"slot0_{code}_cpu4", check_machine=False)
    with pytest.raises(ValueError, match="not <name><number>"):
        affinity_from_code("slot0_" + code.replace("cpu4", "cpu-4"), check_machine=False)
    with pytest.raises(ValueError, match="cpu_per_run=5 is more than"):  # (edited by hand)
        affinity_from_code("slot0_" + code.replace("cpr4", "cpr5"), check_machine=False)
    with pytest.raises(TypeError, match="must be a str"):
        affinity_from_code(3)


def test_the_machine_check_refuses_what_is_not_there(monkeypatch):
    with pytest.raises(ValueError, match="may not use"):
        make_affinity(4000, n_cpu_core=4096, cpu_per_run=1, hyperthread_offset=0, n_socket=1)
    if hasattr(os, "sched_getaffinity") and 0 not in os.sched_getaffinity(0):
        pytest.skip("this process may not use cpu 0")
    kwargs = dict(n_cpu_core=1, n_gpu=1, hyperthread_offset=0, n_socket=1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match="uses GPU 0, but only 0 GPU"):
        make_affinity(**kwargs)
    assert make_affinity(check_machine=False, **kwargs)["cuda_idx"] == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert make_affinity(**kwargs)["cuda_idx"] == 0


@pytest.mark.parametrize(
    "visible, count", [("", 0), ("0", 1), ("2,3", 2), ("0,-1,1", 1), ("GPU-abc,GPU-def", 2)]
)
def test_visible_gpu_count_reads_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert visible_gpu_count() == count


def test_detect_hardware_describes_this_machine():
    import psutil

    machine = detect_hardware()
    assert isinstance(machine, Hardware)
    assert machine.n_cpu_core == (psutil.cpu_count(logical=False) or psutil.cpu_count())
    assert machine.hyperthread_offset in (0, machine.n_cpu_core)
    assert machine.n_cpu_core % machine.n_socket == 0
    code = encode_affinity()  # the whole machine, one run
    assert n_run_slots(code) == 1
    if hasattr(os, "sched_getaffinity") and set(range(machine.n_cpu_core)) <= os.sched_getaffinity(
        0
    ):
        assert len(make_affinity()["workers_cpus"]) == machine.n_cpu_core
