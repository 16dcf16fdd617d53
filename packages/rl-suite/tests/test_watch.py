"""``rl-suite eval``: videos of the episodes, a window where there is a display, and another
environment with the same spaces."""

import re

import pytest

from rl_suite._cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    argv = ["train", "ppo", "--env", "CartPole-v1", "--steps", "2048", "--log-dir", str(root)]
    assert main([*argv, "--set", "runner.evaluate=False", "--set", "torch_threads=1"]) == 0
    return root / "run_0"


def test_video_writes_one_decodable_file_per_episode_with_its_frames(run_dir, tmp_path, capsys):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="the video extra")
    videos = tmp_path / "videos"
    assert main(["eval", str(run_dir), "--episodes", "3", "--video", str(videos)]) == 0
    out = capsys.readouterr().out
    lengths = [int(n) for n in re.findall(r"episode \d+: return [\d.]+, length (\d+)", out)]
    files = sorted(videos.glob("*.mp4"), key=lambda p: int(re.findall(r"\d+", p.stem)[-1]))
    assert len(lengths) == 3 and len(files) == 3, (out, files)
    assert [f.name for f in files] == [f"CartPole-v1-episode-{n}.mp4" for n in range(3)]
    for length, video in zip(lengths, files, strict=True):
        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(video))
        assert frames == length + 1  # the first observation's frame, then one per step
    assert f"videos: {videos}" in out


def test_render_without_a_display_says_so(run_dir, capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    assert main(["eval", str(run_dir), "--render"]) == 2
    assert "no display" in capsys.readouterr().err


def test_another_env_with_the_same_spaces_is_played_and_others_are_refused(run_dir, capsys):
    assert main(["eval", str(run_dir), "--episodes", "2", "--env", "CartPole-v0"]) == 0
    assert "mean return over 2 episodes" in capsys.readouterr().out
    assert main(["eval", str(run_dir), "--env", "Acrobot-v1"]) == 2
    err = capsys.readouterr().err
    assert "Acrobot-v1 has another observation space than CartPole-v1" in err
