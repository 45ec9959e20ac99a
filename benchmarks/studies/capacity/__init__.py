"""How many chat users one box holds: the capacity study (study.py; lab 16), run as
`python -m benchmarks.studies.capacity` (__main__.py)."""
