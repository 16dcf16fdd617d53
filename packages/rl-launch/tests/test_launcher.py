import json
import os
import signal
import subprocess
import sys
import time
from itertools import combinations

import psutil
import pytest

from rl_launch import (
    EXPERIMENTS_TREE_FILE,
    NUM_LAUNCHED_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    VARIANT_FILE,
    VariantLevel,
    encode_affinity,
    make_variants,
    read_launch_args,
    run_experiments,
)

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or not {0, 1} <= os.sched_getaffinity(0),
    reason="the queue tests pin runs to cpus 0 and 1",
)

# Two run slots of one core each (cpu 0 and cpu 1), on any machine that has them.
TWO_SLOTS = dict(n_cpu_core=2, cpu_per_run=1, hyperthread_offset=0, n_socket=1)

# A launched run: checks it is pinned as its affinity says, reads its variant, writes its
# progress and a record of when it ran on which cpus.
RUN_SCRIPT = """
import json, os, sys, time
from rl_launch import affinity_from_code, load_variant, read_launch_args, run_context

args = read_launch_args()
affinity = affinity_from_code(args.affinity_code)
variant = load_variant(args.log_dir)
with run_context(args.log_dir, args.run_ID, "toy", log_params=variant) as run_dir:
    start = time.time()
    cpus = sorted(os.sched_getaffinity(0))
    if cpus != affinity["master_cpus"]:
        sys.exit(f"pinned to {cpus}, but the affinity says {affinity['master_cpus']}")
    print("hello from", args.run_ID)
    if variant.get("fail"):
        raise RuntimeError("this run fails on purpose")
    time.sleep(variant.get("sleep", 0.3))
    with open(run_dir / "progress.csv", "w") as f:
        f.write("Iteration,Return\\n" + "".join(f"{i},{variant['lr'] * i}\\n" for i in range(3)))
    record = dict(start=start, end=time.time(), cpus=cpus, args=args.args, variant=variant)
    (run_dir / "record.json").write_text(json.dumps(record))
"""

# A run that never ends by itself, with a child of its own.
HANGING_SCRIPT = """
import json, os, subprocess, sys, time
from rl_launch import read_launch_args

args = read_launch_args()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
run_dir = os.path.join(args.log_dir, f"run_{args.run_ID}")
with open(os.path.join(run_dir, "pids.json.tmp"), "w") as f:
    json.dump([os.getpid(), child.pid], f)
os.replace(os.path.join(run_dir, "pids.json.tmp"), os.path.join(run_dir, "pids.json"))
time.sleep(120)
"""


@pytest.fixture
def run_script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(RUN_SCRIPT)
    return path


def records(summary):
    return [json.loads((run.run_dir / "record.json").read_text()) for run in summary.runs]


def test_a_sweep_queues_runs_on_disjoint_cpus(tmp_path, run_script, capsys):
    level = VariantLevel([("lr",)], [[0.1], [0.2]], ["lr0.1", "lr0.2"])
    variants, log_dirs = make_variants(level)
    summary = run_experiments(
        run_script,
        encode_affinity(**TWO_SLOTS),
        "sweep",
        2,
        variants,
        log_dirs,
        common_args=["--common", 7],
        runs_args=[["a"], ["b"]],
        log_root=tmp_path / "data",
    )
    exp_dir = tmp_path / "data" / "sweep"
    assert summary.exp_dir == exp_dir
    assert len(summary.succeeded) == 4 and not summary.failed, capsys.readouterr().out
    assert [(run.log_dir.name, run.run_ID) for run in summary.runs] == [
        ("lr0.1", 0),
        ("lr0.1", 1),
        ("lr0.2", 0),
        ("lr0.2", 1),
    ]
    assert (exp_dir / NUM_LAUNCHED_FILE).read_text() == "4 of 4 runs launched\n"
    tree = (exp_dir / EXPERIMENTS_TREE_FILE).read_text()
    assert "lr0.1/\n    run_0: succeeded" in tree and tree.count("succeeded") == 4
    for run, record in zip(summary.runs, records(summary), strict=True):
        variant = json.loads((run.log_dir / VARIANT_FILE).read_text())
        assert record["variant"] == variant == {"lr": float(run.log_dir.name[2:])}
        assert record["args"] == ["--common", "7", "a" if variant["lr"] == 0.1 else "b"]
        assert record["cpus"] == [run.run_slot]
        params = json.loads((run.run_dir / "params.json").read_text())
        assert params == {**variant, "name": "toy", "run_ID": run.run_ID}
        assert len((run.run_dir / "progress.csv").read_text().splitlines()) == 4
        assert (run.run_dir / STDOUT_FILE).read_text() == f"hello from {run.run_ID}\n"
        assert (run.run_dir / STDERR_FILE).read_text() == ""
    overlapping = 0
    for a, b in combinations(records(summary), 2):
        if a["start"] < b["end"] and b["start"] < a["end"]:
            overlapping += 1
            assert not set(a["cpus"]) & set(b["cpus"]), "two runs at once on one cpu"
    assert overlapping >= 1  # (two slots: runs did go at once)


def test_a_failed_run_is_reported_and_the_queue_goes_on(tmp_path, run_script, capsys):
    variants = [{"lr": 0.1, "fail": True}, {"lr": 0.2}, {"lr": 0.3, "sleep": 0.0}]
    summary = run_experiments(
        run_script,
        encode_affinity(**TWO_SLOTS),
        "failing",
        1,
        variants,
        ["bad", "good", "queued"],
        log_root=tmp_path,
    )
    assert [run.log_dir.name for run in summary.failed] == ["bad"]
    assert [run.log_dir.name for run in summary.succeeded] == ["good", "queued"]
    failed = summary.failed[0]
    assert failed.returncode == 1
    assert "this run fails on purpose" in failed.stderr.read_text()
    out = capsys.readouterr().out
    assert "1 failed" in out and f"FAILED (exit code 1): {failed.run_dir}" in out
    assert "RuntimeError: this run fails on purpose" in out  # (the tail of its stderr)
    assert "FAILED (exit code 1)" in (tmp_path / "failing" / EXPERIMENTS_TREE_FILE).read_text()


def test_no_value_is_ever_run_by_a_shell(tmp_path, run_script):
    pwned = tmp_path / "pwned"
    attacks = [f"x; touch {pwned}", f"$(touch {pwned})", f"`touch {pwned}`", f"x && touch {pwned}"]
    log_dir = f"x; touch {pwned} #"
    summary = run_experiments(
        run_script,
        encode_affinity(**TWO_SLOTS),
        "inject",
        1,
        [{"lr": 0.1, "note": attacks[0]}],
        [log_dir],
        common_args=attacks,
        log_root=tmp_path,
    )
    assert not pwned.exists()
    assert len(summary.succeeded) == 1
    record = records(summary)[0]
    assert record["args"] == attacks and record["variant"]["note"] == attacks[0]
    assert summary.runs[0].log_dir == tmp_path / "inject" / log_dir


def _ctrl_c_raises_in_child() -> None:
    """Run in the child before it starts: SIGINT as in a terminal (Python then raises
    KeyboardInterrupt), even when this test run was started with SIGINT ignored (a shell's
    background job), which children would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_ends_every_run_and_what_it_started(tmp_path, stop_signal):
    script = tmp_path / "hang.py"
    script.write_text(HANGING_SCRIPT)
    launcher = tmp_path / "launch.py"
    launcher.write_text(
        "from rl_launch import encode_affinity, run_experiments\n"
        f"run_experiments({str(script)!r}, encode_affinity(**{TWO_SLOTS!r}), 'ctrl_c', 1, "
        f"[{{}}, {{}}, {{}}], ['a', 'b', 'c'], log_root={str(tmp_path)!r}, grace_period=2.0)\n"
    )
    process = subprocess.Popen(
        [sys.executable, str(launcher)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_ctrl_c_raises_in_child,
    )
    pid_files = [tmp_path / "ctrl_c" / name / "run_0" / "pids.json" for name in ("a", "b")]
    deadline = time.monotonic() + 20
    while not all(f.exists() for f in pid_files):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the runs did not start"
        time.sleep(0.05)
    pids = [pid for f in pid_files for pid in json.loads(f.read_text())]
    assert not any(_gone(pid) for pid in pids)
    process.send_signal(stop_signal)
    _, err = process.communicate(timeout=20)
    assert process.returncode != 0 and b"KeyboardInterrupt" in err
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # (orphans are reaped by init a moment later)
    assert all(_gone(pid) for pid in pids), "a run or its child outlived the launcher"
    assert not (tmp_path / "ctrl_c" / "c" / "run_0").exists()  # (the queued run never started)
    assert "stopped" in (tmp_path / "ctrl_c" / EXPERIMENTS_TREE_FILE).read_text()


def test_run_experiments_refuses_bad_input_before_any_work(tmp_path, run_script):
    code = encode_affinity(**TWO_SLOTS)

    def run(**changes):
        kwargs = dict(
            script=run_script,
            affinity_code=code,
            experiment_title="bad",
            runs_per_setting=1,
            variants=[{"lr": 0.1}],
            log_dirs=["a"],
            log_root=tmp_path,
        )
        return run_experiments(**{**kwargs, **changes})

    with pytest.raises(FileNotFoundError, match="script"):
        run(script=tmp_path / "missing.py")
    with pytest.raises(ValueError, match="names run slot 1"):
        run(affinity_code=encode_affinity(run_slot=1, **TWO_SLOTS))
    with pytest.raises(ValueError, match="may not use"):
        run(affinity_code=encode_affinity(n_cpu_core=4096, hyperthread_offset=0, n_socket=1))
    with pytest.raises(ValueError, match="same length"):
        run(log_dirs=["a", "b"])
    with pytest.raises(ValueError, match="log_dirs repeat"):
        run(variants=[{}, {}], log_dirs=["a", "a/"])
    with pytest.raises(ValueError, match="relative path"):
        run(log_dirs=["../a"])
    with pytest.raises(ValueError, match="experiment_title"):
        run(experiment_title="a/b")
    with pytest.raises(ValueError, match="runs_per_setting"):
        run(runs_per_setting=0)
    with pytest.raises(TypeError, match="common_args"):
        run(common_args=[{"not": "an argument"}])
    with pytest.raises(ValueError, match="one list per variant"):
        run(runs_args=[[], []])
    assert not (tmp_path / "bad").exists()
    (tmp_path / "bad" / "a" / "run_0").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="already exist"):
        run()


def test_read_launch_args():
    args = read_launch_args(["slot0_code", "/logs/a", "3", "--x", "1"])
    assert args == ("slot0_code", "/logs/a", 3, ["--x", "1"])
    with pytest.raises(ValueError, match="run_ID"):
        read_launch_args(["code", "/logs", "three"])
    with pytest.raises(ValueError, match="expected <slot_affinity_code>"):
        read_launch_args(["code"])
