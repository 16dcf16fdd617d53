import sys
from pathlib import Path

import torch

# The fake agents and batch builders (rl_algos_fakes) import by name.
sys.path.insert(0, str(Path(__file__).parent))

# The tests' tensors are tiny: intra-op threads only add overhead, a lot of it on a busy machine.
torch.set_num_threads(1)
