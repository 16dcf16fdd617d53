"""The API check (``tools/api_check.py``, ``nox -s api``) on a copy of rl-arrays and its release
record in a fresh git repository: it passes on the released code and fails on a name removed
from ``__all__`` or a parameter renamed, unless the version was bumped for it."""

import shutil
import subprocess
import sys
from pathlib import Path

import griffe  # noqa: F401  (tools/api_check.py's; the integration session installs it)
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "packages" / "rl-arrays"
INIT = Path("packages/rl-arrays/src/rl_arrays/__init__.py")
COUNTS = Path("packages/rl-arrays/src/rl_arrays/_counts.py")
PYPROJECT = Path("packages/rl-arrays/pyproject.toml")


def git(repo, *args):
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    return subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    shutil.copytree(ROOT / "tools", tmp_path / "tools")
    shutil.copytree(PACKAGE / "src", tmp_path / "packages/rl-arrays/src")
    shutil.copy(PACKAGE / "pyproject.toml", tmp_path / PYPROJECT)
    version = (tmp_path / PYPROJECT).read_text().split('version = "')[1].split('"')[0]
    (tmp_path / "releases").mkdir()
    record = f'{{"package": "rl-arrays", "version": "{version}"}}\n'
    (tmp_path / f"releases/rl-arrays-{version}.json").write_text(record)
    git(tmp_path, "init", "--quiet")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "--quiet", "-m", f"Release rl-arrays {version}")
    return tmp_path


def check(repo):
    command = [sys.executable, str(repo / "tools" / "api_check.py"), "rl-arrays"]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True)


def edit(repo, path, old, new):
    text = (repo / path).read_text()
    assert old in text
    (repo / path).write_text(text.replace(old, new, 1))


def test_the_released_api_passes(repo):
    result = check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is kept" in result.stdout


def test_a_name_removed_from_all_fails(repo):
    edit(repo, INIT, '    "as_count",\n', "")
    result = check(repo)
    assert result.returncode == 1
    assert "rl_arrays.as_count: removed from __all__ (breaking)" in result.stdout


def test_a_renamed_parameter_fails_unless_the_version_was_bumped_for_it(repo):
    edit(repo, COUNTS, "low: int = 0", "minimum: int = 0")
    result = check(repo)
    assert result.returncode == 1
    assert "as_count" in result.stdout and "low" in result.stdout
    edit(repo, PYPROJECT, 'version = "0.2.0"', 'version = "0.3.0"')
    bumped = check(repo)
    assert bumped.returncode == 0, bumped.stdout
    assert "allowed by the bump to 0.3.0" in bumped.stdout
