"""`python -m benchmarks.studies.instruments`: benchmarks/studies/instruments/study.py.
Its parser is here too, where the docs' checks look for a package's."""

import sys

from benchmarks.studies.instruments.study import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
