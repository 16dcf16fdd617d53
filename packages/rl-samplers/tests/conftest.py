import sys
from pathlib import Path

# Test helpers (toy env and agent, child-process targets) import by name, also in spawned
# worker processes.
sys.path.insert(0, str(Path(__file__).parent))
