"""The lab's code, run with the Python of the lab's environment (.venv, `make setup`)."""

import importlib.util
import sys

# `python -m benchmarks...` in a terminal that never activated .venv: one line that says
# what to do, not a ModuleNotFoundError from deep in an import. sys.argv[0] is "-m"
# while `python -m` imports this package; a plain import is left alone.
if sys.argv[:1] == ["-m"] and importlib.util.find_spec("psutil") is None:
    sys.exit(f"benchmarks: {sys.executable} does not have the lab's packages; run "
             "`source .venv/bin/activate` (made by `make setup`) first, or call "
             ".venv/bin/python")
