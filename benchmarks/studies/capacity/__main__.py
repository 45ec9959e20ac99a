"""`python -m benchmarks.studies.capacity`: benchmarks/studies/capacity/study.py."""

import sys

from benchmarks.studies.capacity.study import main

sys.exit(main())
