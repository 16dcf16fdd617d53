import sys
from pathlib import Path

# Helper modules (fake spaces, children started with spawn) are imported by name.
sys.path.insert(0, str(Path(__file__).parent))
