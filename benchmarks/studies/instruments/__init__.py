"""What each instrument costs the app per request, in-process: the instruments study
(study.py), run as `python -m benchmarks.studies.instruments` (__main__.py), its
measuring process (worker.py), the OTLP receiver it sends traces to (otlp_sink.py)
and its table (table.py)."""
