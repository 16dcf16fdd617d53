"""The release command (``tools/release.py``, ``nox -s release``), run on a copy of the
repository's packages' pyprojects and changelogs in a fresh git repository."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATE = "2026-11-29"


def git(repo, *args):
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "release.py", tmp_path / "tools")
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        folder = tmp_path / "packages" / pyproject.parent.name
        folder.mkdir(parents=True)
        shutil.copy(pyproject, folder)
        notes = (pyproject.parent / "CHANGELOG.md").read_text()
        pending = "## [Unreleased]\n\n### Added\n\n- A change to release.\n"
        (folder / "CHANGELOG.md").write_text(notes.replace("## [Unreleased]\n", pending, 1))
    git(tmp_path, "init", "--quiet")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "start")
    return tmp_path


def release(repo, *args):
    command = [sys.executable, str(repo / "tools" / "release.py"), *args, "--date", DATE]
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t")
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env)


def version_of(repo, package):
    text = (repo / "packages" / package / "pyproject.toml").read_text()
    return text.split('version = "')[1].split('"')[0]


def test_a_release_bumps_moves_the_changelog_moves_ranges_records_and_commits(repo):
    old = version_of(repo, "rl-arrays")
    unreleased = (repo / "packages/rl-arrays/CHANGELOG.md").read_text().split("## [Unreleased]")[1]
    done = release(repo, "rl-arrays", "minor")
    assert done.returncode == 0, done.stderr
    major, minor = (int(x) for x in old.split(".")[:2])
    new = f"{major}.{minor + 1}.0"
    assert version_of(repo, "rl-arrays") == new
    changelog = (repo / "packages/rl-arrays/CHANGELOG.md").read_text()
    assert f"## [Unreleased]\n\n## [{new}] - {DATE}\n" in changelog
    assert unreleased.strip() in changelog.split(f"## [{new}] - {DATE}")[1]
    # Every sibling that required rl-arrays 0.<minor> now requires the new minor version.
    for sibling in ("rl-replay", "rl-agents", "rl-suite"):
        text = (repo / "packages" / sibling / "pyproject.toml").read_text()
        assert f'"rl-arrays>={major}.{minor + 1},<{major}.{minor + 2}"' in text
        notes = (repo / "packages" / sibling / "CHANGELOG.md").read_text()
        unreleased_notes = notes.split("## [Unreleased]")[1].split("\n## [")[0]
        assert f"Requires `rl-arrays>={major}.{minor + 1},<{major}.{minor + 2}` (was" in notes
        assert "- Requires `rl-arrays>=" in unreleased_notes.split("### Changed")[-1]
    record = json.loads((repo / f"releases/rl-arrays-{new}.json").read_text())
    assert record | {"built_from": None} == dict(
        package="rl-arrays", version=new, previous=old, date=DATE, built_from=None
    )
    commit = git(repo, "log", "-1", "--format=%H", "--", f"releases/rl-arrays-{new}.json").strip()
    assert git(repo, "log", "-1", "--format=%s", commit).strip() == f"Release rl-arrays {new}"
    assert git(repo, "status", "--porcelain") == ""
    # A patch release stays in its dependents' ranges: they are left alone.
    algos = (repo / "packages/rl-algos/pyproject.toml").read_text()
    assert release(repo, "rl-replay", "patch").returncode == 0
    assert (repo / "packages/rl-algos/pyproject.toml").read_text() == algos
    # A sibling's extras move with its dependencies (rl-suite names rl-runners in both).
    assert release(repo, "rl-runners", "minor").returncode == 0
    suite = (repo / "packages/rl-suite/pyproject.toml").read_text()
    assert f"rl-runners>={major}.{minor}," not in suite
    assert f'"rl-runners[mlflow]>={major}.{minor + 1},<{major}.{minor + 2}"' in suite
    # The note keeps a requirement's extras.
    assert release(repo, "rl-samplers", "minor").returncode == 0
    notes = (repo / "packages/rl-suite/CHANGELOG.md").read_text()
    assert f"Requires `rl-samplers[atari]>={major}.{minor + 1},<{major}.{minor + 2}`" in notes


def test_a_release_refuses_a_dirty_tree_an_unknown_package_and_an_empty_changelog(repo):
    (repo / "stray.txt").write_text("x")
    assert "working tree has changes" in release(repo, "rl-arrays", "minor").stderr
    (repo / "stray.txt").unlink()
    assert "no package 'rl-nope'" in release(repo, "rl-nope", "minor").stderr
    assert release(repo, "rl-launch", "minor").returncode == 0
    again = release(repo, "rl-launch", "minor")
    assert "Unreleased section is empty" in again.stderr
    assert git(repo, "status", "--porcelain") == ""  # nothing written by the refusals
