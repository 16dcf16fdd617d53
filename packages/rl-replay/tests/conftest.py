import sys
from pathlib import Path

# Test helper modules (the reference world, child-process targets) import by name.
sys.path.insert(0, str(Path(__file__).parent))
