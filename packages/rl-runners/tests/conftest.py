import sys
from pathlib import Path

# The tests import their toy sampler, agent and algorithm (rl_runners_toys) by module name.
sys.path.insert(0, str(Path(__file__).parent))
