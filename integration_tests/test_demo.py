"""The installed command line runs the demo end to end, under each start method."""

import shutil
import subprocess

import pytest


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_rl_suite_demo_command(start_method):
    command = shutil.which("rl-suite")
    assert command, "the rl-suite console script is not installed"
    result = subprocess.run(
        [command, "demo", "-T", "32", "-B", "6", "--workers", "3", "--start-method", start_method],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"from 3 {start_method} workers" in result.stdout
    assert "read by torch without a copy: True" in result.stdout
