"""`python -m benchmarks.studies.capacity`: benchmarks/studies/capacity/study.py. Its
parser is here too, where the docs' checks look for a package's (tests/lab/test_docs.py)."""

import sys

from benchmarks.studies.capacity.study import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
