"""Workers recycled: what `max_requests` costs the tail, with and without jitter, and
what it does to prometheus_client's multiprocess files (lab 17).

    python -m benchmarks.studies.recycling [--workers 4] [--rate 200] [--seconds 20]
        [--max-requests 300] [--jitter 0,150] [--repeats 3]
        [--metrics-exit none,mark,fold] [--metrics-max-requests 50]

Stage 8's gunicorn (gunicorn/today.conf.py: gevent, stage 8's settings) on the lab's
server CPU with a real Redis beside it, `--workers` processes, and for each variant the
config's own lines plus the variant's `max_requests`/`max_requests_jitter`: no recycling,
then each jitter of `--jitter`. An open-model load (load.py: a request every 1/--rate s,
each timed from its intended start, so a stall shows in full) of authenticated `GET
/users/me` runs from the lab's client CPU; every request's time and outcome is kept, and
a watcher reads the master's children every 10 ms, so each restart has its times (the old
worker's exit, the new one's fork). The report: p99, p99.9 and max (HdrHistogram) over the
run, the worst second with a restart against the worst without, errors by kind, and how
many workers were down at once.

The metrics part (`--metrics-exit`): the app with FLASK_METRICS=1 in multiprocess mode,
each worker recycled every `--metrics-max-requests`, then the folder's files counted and
`/metrics` timed (median of 20 scrapes) for each `child_exit` hook: none, prometheus_client's
documented `mark_process_dead` (it removes live gauges' files only), and `fold`
(app/watchers/metrics_exit.py: the dead worker's counters and histograms folded into one file),
with the scraped request count held to the requests served.

Requirements: redis-server, taskset, the venv. No root. Writes
results/<timestamp>-recycling/ (recycling.json, report.md).
"""
