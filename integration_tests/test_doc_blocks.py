"""Every Python block of the READMEs and of the documentation site runs as written.

Each ```python block of the top README, of every package's README and of every page under
docs/ runs alone, in a fresh interpreter whose working directory is an empty folder, and must
exit with 0 and leave no process running; each ```pycon block (an interactive session, ``>>>``
prompts and their output) runs as a doctest, its printed output checked. A block that cannot
run on its own (a signature listing, a snippet that needs a GPU or another program) says so in
its fence, ```python title="not run: why" (the site shows the title above the block; GitHub
ignores it); such blocks stay rare. Shell, JSON and output blocks are not run.

Torch gets one thread in each block (``OMP_NUM_THREADS=1``, unless set): the blocks run beside
other tests (one pytest worker per core), and their small models train fastest on one thread
(with two, on a loaded 2-core machine, the rl-algos loops took 5 to 11 times as long and
this file 354 s instead of 122 s).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md"))]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
LANGUAGES = ("python", "pycon")
NO_RUN_TITLE = re.compile(r"not run: .+")
# In all the READMEs and pages together: raise it only for a block that cannot run here (a GPU,
# a cluster, another program), never for one that is merely slow: make its step counts small.
MAX_NO_RUN = 12
TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    document: Path
    number: int  # 1, 2, ... among the document's python and pycon blocks
    line: int  # the opening fence's line
    language: str
    options: dict[str, str]  # the fence's key="value" words (`title`)
    code: str

    @property
    def id(self) -> str:
        name = self.document.relative_to(ROOT).as_posix().removeprefix("packages/")
        return f"{name}:{self.number}"

    @property
    def runs(self) -> bool:
        return not NO_RUN_TITLE.fullmatch(self.options.get("title", ""))


def python_blocks(document: Path) -> list[Block]:
    """The document's ```python and ```pycon blocks, in order (other fences are skipped)."""
    lines = document.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    fence = None  # the open fence: (its backticks, its line, its info words)
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if fence is None:
            match = re.match(r"(`{3,})([^`]*)$", stripped)  # (an info string has no backtick)
            if match:
                fence, body = (match.group(1), number, shlex.split(match.group(2))), []
        elif stripped.startswith(fence[0]) and not stripped.strip("`"):
            _, start, info = fence
            if info and info[0] in LANGUAGES:
                indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
                code = "\n".join(text[indent:] for text in body) + "\n"
                options = dict(word.split("=", 1) for word in info[1:] if "=" in word)
                flags = [word for word in info[1:] if "=" not in word]
                assert not flags, f"{document}:{start}: unknown fence words {flags}"
                blocks.append(Block(document, len(blocks) + 1, start, info[0], options, code))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{document}:{fence[1]}: a code block is never closed"
    return blocks


BLOCKS = [block for document in READMES + PAGES for block in python_blocks(document)]
TO_RUN = [block for block in BLOCKS if block.runs]
NO_RUN = [block for block in BLOCKS if not block.runs]


def run(command: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], bool]:
    """``command`` in a process group of its own, and whether it left processes running (they
    are killed). Its output goes to files beside ``cwd`` (a pipe would wait for whatever it
    left holding one)."""
    out, err = cwd.parent / "stdout.txt", cwd.parent / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        )
    try:
        process.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        message = f"still running after {TIMEOUT_S} s; stderr:\n{err.read_text()}"
        pytest.fail(message, pytrace=False)
    finally:
        left_running = end_group(process.pid)
    result = subprocess.CompletedProcess(
        command, process.returncode, out.read_text(), err.read_text()
    )
    return result, left_running


def end_group(pgid: int, grace_s: float = 5.0) -> bool:
    """Kill what is left of a process group after ``grace_s`` (multiprocessing's resource
    tracker outlives a failed program by a moment, to unlink what it leaked); whether there
    was anything."""
    deadline = time.monotonic() + grace_s
    try:
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)  # (ProcessLookupError: the group is empty)
            time.sleep(0.1)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("block", TO_RUN, ids=[block.id for block in TO_RUN])
def test_block_runs(block: Block, tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"  # (empty: the block's file lies beside it)
    cwd.mkdir()
    if block.language == "pycon":
        source = tmp_path / "session.txt"  # (a .txt file: doctest reads it as a session)
        command = [sys.executable, "-m", "doctest", str(source)]
    else:
        source = tmp_path / "block.py"
        command = [sys.executable, str(source)]
    source.write_text(block.code, encoding="utf-8")
    result, left_running = run(command, cwd)
    where = f"{block.document.relative_to(ROOT)}:{block.line + 1}"  # (its first line)
    if result.returncode != 0:
        output = result.stdout if block.language == "pycon" else result.stderr  # (doctest's)
        message = f"the block at {where} exited with {result.returncode}:\n{output}"
        pytest.fail(message, pytrace=False)
    assert not left_running, f"the block at {where} left processes running after it ended"


def test_blocks_are_found() -> None:
    packages = list(ROOT.glob("packages/*/pyproject.toml"))
    assert len(READMES) == 1 + len(packages), READMES  # (every package has one)
    assert len(TO_RUN) >= 15, [block.id for block in TO_RUN]


def test_fence_titles_say_why_a_block_does_not_run() -> None:
    odd = [block.id for block in BLOCKS if "not run" in block.options.get("title", "")]
    odd = [name for name in odd if name not in {block.id for block in NO_RUN}]
    assert not odd, f"titles that mention 'not run' without the form 'not run: why': {odd}"


def test_no_run_blocks_are_rare() -> None:
    assert len(NO_RUN) <= MAX_NO_RUN, [block.id for block in NO_RUN]
    assert all(block.language == "python" for block in NO_RUN), "a pycon block always runs"
