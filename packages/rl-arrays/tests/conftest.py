import multiprocessing as mp
import sys
from pathlib import Path

import pytest

# Children started with spawn / forkserver import their targets by module name.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(params=["fork", "forkserver", "spawn"])
def mp_context(request):
    """A multiprocessing context for each start method this platform offers."""
    if request.param not in mp.get_all_start_methods():
        pytest.skip(f"{request.param} is not available here")
    return mp.get_context(request.param)
