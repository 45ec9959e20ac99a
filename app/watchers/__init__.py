"""The watchers: what the app tells about itself as it serves. Its Prometheus
metrics (metrics.py; metrics_exit.py folds an exited worker's files, loaded by its
path in gunicorn's master), its traces (tracing.py), its timed access log
(access_log.py), the collector's pauses (gc_log.py) and a census of its objects
(gc_census.py). How the collector runs is a setting, not a watcher: app/gc_policy.py.

Nothing is imported here: importing one module does not import the rest.
"""
