"""Where things are in the source tree, for tests at any depth."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
DATA = REPO / "tests" / "data"
