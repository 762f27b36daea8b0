"""Exit 0 when this interpreter already has the project and its test dependencies importable
(e.g. the GPU machine's python3 after `pip install --no-deps -e .`), so no venv is needed."""
import importlib.util
import sys

NEEDED = ("numpy", "mpmath", "jinja2", "tqdm", "pytest", "xdist", "sklearn", "engine",
          "conformance")
missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
if missing:
    print("missing: " + ", ".join(missing), file=sys.stderr)
sys.exit(1 if missing else 0)
