"""Exit 0 when this interpreter already has the project and its test dependencies importable
(e.g. the GPU machine's python3 after `pip install --no-deps -e .`), so no venv is needed.
`--all` also asks for the test extra's optional packages (safetensors: the gpt2 tests skip
without it; distributed: the --cluster tests; gmpy2: the mpmath backend comparison), so that
python_env.sh completes a .venv that lacks them."""
import importlib.util
import sys

NEEDED = ("numpy", "mpmath", "jinja2", "tqdm", "pytest", "xdist", "sklearn", "engine",
          "conformance")
OPTIONAL = ("safetensors", "distributed", "gmpy2")
wanted = NEEDED + (OPTIONAL if "--all" in sys.argv[1:] else ())
missing = [m for m in wanted if importlib.util.find_spec(m) is None]
if missing:
    print("missing: " + ", ".join(missing), file=sys.stderr)
sys.exit(1 if missing else 0)
