"""Counts as rlpyt's scripts write them (floats such as ``8.0``): an integral float is taken as
the int, and 1.5 or -1 are still refused with the message naming the argument."""

import pytest

from rl_launch import encode_affinity, run_experiments

CPU = dict(n_cpu_core=4, hyperthread_offset=0, n_socket=1)
GPU = dict(CPU, n_gpu=2)


@pytest.mark.parametrize(
    "name, value, others",
    [
        ("n_cpu_core", 4, {"hyperthread_offset": 0, "n_socket": 1}),
        ("n_gpu", 2, CPU),
        ("contexts_per_gpu", 2, GPU),
        ("gpu_per_run", 2, GPU),
        ("cpu_per_run", 2, CPU),
        ("cpu_per_worker", 2, CPU),
        ("cpu_reserved", 1, CPU),
        ("hyperthread_offset", 4, {"n_cpu_core": 4, "n_socket": 1}),
        ("n_socket", 2, {"n_cpu_core": 4, "hyperthread_offset": 0}),
        ("sample_gpu_per_run", 1, dict(GPU, async_sample=True)),
        ("run_slot", 1, dict(CPU, cpu_per_run=2)),
    ],
)
def test_counts_accept_integral_floats(name, value, others):
    code = encode_affinity(**others, **{name: value})
    assert encode_affinity(**others, **{name: float(value)}) == code
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=f"{name} must be an int >= "):
            encode_affinity(**others, **{name: bad})


def test_runs_per_setting_accepts_an_integral_float(tmp_path):
    script = tmp_path / "run.py"
    script.write_text("")
    code = encode_affinity(n_cpu_core=1, hyperthread_offset=0, n_socket=1, set_affinity=False)

    def run(runs_per_setting):
        return run_experiments(
            script, code, "counts", runs_per_setting, [{}], ["a"], log_root=tmp_path
        )

    for bad in (1.5, -1):
        with pytest.raises(ValueError, match="runs_per_setting must be an int >= 1"):
            run(bad)
    assert len(run(2.0).runs) == 2
