"""Every client latency in an HdrHistogram, beside Locust's stats: the tail with its precision.

Locust keeps a response time rounded to two significant digits (whole ms below 100 ms,
10 ms to 1 s, 100 ms to 10 s, 1 s above), so a p99 of 1,100 ms is known to 100 ms. Here
the same value, the `response_time` of Locust's `request` event (for the open model the
time from the intended start, benchmarks/arrivals.py), goes into an HdrHistogram in
microseconds with 3 significant digits: known to 0.1%.

- In a Locust process (`install(events)`, from the locustfiles): a histogram per request
  type and name, emptied when a test starts (and where Locust resets its stats).
- Across processes: a worker sends its histograms, encoded (HdrHistogram's compressed
  base64), in its reports to the master (benchmarks/worker_messages.py, `figures`);
  the master decodes and adds them, and as the test stops writes `--latency-file`.
- The file (`save`): HdrHistogram's interval log (`.hlog`), written by the package's
  HistogramLogWriter, one interval (the test) a line: untagged, every request (Locust's
  Aggregated row); tagged `METHOD:name`, each of Locust's rows. HdrHistogram's tools read
  it; values are µs, so Java's `HistogramLogProcessor -i latency.hlog
  -outputValueUnitRatio 1000` prints ms (add `-tag GET:/users/friends` for one row).
- Reading (`times_ms`): {ms: count} of the tagged lines a filter keeps, the form of
  Locust's own histogram, so the lab's one percentile rule (benchmarks/analysis/stats.py)
  applies to either.

Standard library and the `hdrhistogram` package only, no Locust: the analysis imports it
too (with the repository root on the path; the locustfiles with either that or
`benchmarks/`).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter

FILE_NAME = "latency.hlog"  # without --latency-file: beside Locust's --json-file
LOWEST_US = 1
HIGHEST_US = 3600 * 1_000_000  # an hour: a longer time is recorded as an hour
DIGITS = 3  # significant digits: each value known to 0.1%
ALL = None  # the untagged line's tag: every request
HISTOGRAMS: dict[str, HdrHistogram] = {}  # this process's, by tag
SPAN: dict[str, float] = {}  # this process's first and last request (ms since the epoch)


def new() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


def tag(method: str, name: str) -> str:
    """`GET:/rooms/[id]/messages`: a Locust row's tag (HdrHistogram's tags hold no comma
    or white space)."""
    return re.sub(r"[\s,]", "_", f"{method}:{name}")


def method_of(line_tag: str | None) -> str | None:
    return line_tag.split(":", 1)[0] if line_tag else None


def name_of(line_tag: str | None) -> str | None:
    return line_tag.split(":", 1)[1] if line_tag and ":" in line_tag else None


# --- in a Locust process ------------------------------------------------------------

def record(request_type: str, name: str, response_time) -> None:
    """One request, as Locust's stats log it (ms, a float; None: Locust keeps no time)."""
    if response_time is None:
        return
    key = tag(request_type, name)
    hist = HISTOGRAMS.get(key)
    if hist is None:
        hist = HISTOGRAMS[key] = new()
    hist.record_value(min(HIGHEST_US, max(0, int(round(response_time * 1000)))))
    now = time.time() * 1000
    SPAN.setdefault("first_ms", now)
    SPAN["last_ms"] = now


def reset() -> None:
    HISTOGRAMS.clear()
    SPAN.clear()


def figures(_environment) -> dict | None:
    """This process's histograms, encoded, for its master (None: no request yet)."""
    if not HISTOGRAMS:
        return None
    return {"requests": sum(h.get_total_count() for h in HISTOGRAMS.values()), **SPAN,
            "histograms": {k: h.encode().decode() for k, h in HISTOGRAMS.items()}}


def install(events) -> None:
    """The option and the listeners, once (the locustfiles import each other)."""
    if getattr(events, "_ftl_latency", False):
        return
    events._ftl_latency = True

    @events.init_command_line_parser.add_listener
    def add_option(parser):
        parser.add_argument("--latency-file", default="",
                            help="write every request's time here as the test stops, as an "
                                 "HdrHistogram log (.hlog, µs, 3 significant digits); "
                                 f"default: {FILE_NAME} beside --json-file's, when given")

    @events.request.add_listener
    def on_request(request_type, name, response_time, **_kwargs):
        record(request_type, name, response_time)

    events.test_start.add_listener(lambda **_kw: reset())

    @events.init.add_listener
    def remember(environment, **_kwargs):
        ENVIRONMENT[:] = [environment]
        opts = environment.parsed_options  # the lab's runs name --json-file, so they get one
        if opts is not None and not opts.latency_file and getattr(opts, "json_file", None):
            opts.latency_file = str(Path(opts.json_file).parent / FILE_NAME)

    @events.spawning_complete.add_listener
    def on_spawned(**_kwargs):  # where Locust resets its stats (--reset-stats), so do we
        if ENVIRONMENT and ENVIRONMENT[0].reset_stats:
            reset()


ENVIRONMENT: list = []  # this process's Locust environment (for --reset-stats)


# --- the file -----------------------------------------------------------------------

def merged(per_process: list[dict]) -> tuple[dict[str, HdrHistogram], float, float]:
    """Every process's histograms added up by tag, and the first and last request's time."""
    out: dict[str, HdrHistogram] = {}
    for figs in per_process:
        for key, encoded in figs["histograms"].items():
            out.setdefault(key, new()).decode_and_add(encoded)
    first = min(f.get("first_ms", 0) for f in per_process)
    last = max(f.get("last_ms", 0) for f in per_process)
    return out, first, last


def save(path: Path, per_process: list[dict], total: bool = True) -> None:
    """The .hlog: every process's histograms added up, the total untagged (unless `total`
    is False: tags whose sum means nothing, as the capacity study's kinds), each tagged."""
    by_tag, first, last = merged(per_process)
    every = new()
    for hist in by_tag.values():
        every.add(hist)
    with open(path, "w", encoding="ascii") as f:
        log = HistogramLogWriter(f)
        log.output_log_format_version()
        log.output_comment(f"[flask-tuning-lab: client latencies in us, {DIGITS} significant "
                           "digits; untagged every request, tagged METHOD:name each of "
                           "Locust's rows (benchmarks/latency_log.py)]")
        # the package's output_start_time passes ms where datetime wants s: written here
        # as HdrHistogram's Java writer writes it
        when = datetime.fromtimestamp(first / 1000, UTC).strftime(
            "%a %b %d %H:%M:%S UTC %Y")
        log.output_comment(f"[StartTime: {first / 1000:f} (seconds since epoch), {when}]")
        log.output_base_time(first)
        log.base_time = first  # the lines' times relative to it (output_base_time only says)
        log.output_legend()
        for key, hist in [*([(ALL, every)] if total else []), *sorted(by_tag.items())]:
            hist.set_start_time_stamp(first)
            hist.set_end_time_stamp(max(last, first + 1))
            if key is not ALL:  # the package's writer writes no tag: the line's start
                f.write(f"Tag={key},")
            log.output_interval_histogram(hist, max_value_unit_ratio=1000.0)  # max in ms


def read(path: Path) -> dict[str | None, HdrHistogram]:
    """Each line's histogram by tag (None: the untagged line), with HdrHistogram's reader."""
    reader = HistogramLogReader(str(path), new())
    out: dict[str | None, HdrHistogram] = {}
    try:
        while (hist := reader.get_next_interval_histogram()) is not None:
            key = hist.get_tag()
            if key in out:
                out[key].add(hist)
            else:
                out[key] = hist
    finally:
        reader.close()
    return out


def times_ms(path: Path, keep: Callable[[str], bool] = lambda _tag: True) -> dict[float, int]:
    """{ms: count} over the tagged lines `keep` takes (a tag: `METHOD:name`): each
    HdrHistogram bucket at its highest value, as HdrHistogram reports a percentile."""
    out: dict[float, int] = {}
    size = path.stat()
    for key, buckets in _buckets(str(path), size.st_mtime_ns, size.st_size).items():
        if key is ALL or not keep(key):
            continue
        for ms, count in buckets:
            out[ms] = out.get(ms, 0) + count
    return out


@functools.lru_cache(maxsize=512)
def _buckets(path: str, _mtime_ns: int, _size: int) -> dict[str | None, tuple]:
    """Each line's recorded buckets, ((ms, count), ...), read once for each version of
    the file (its time and size in the key): a run's report asks each stage's log for
    several figures, and a reading is a Python loop over HdrHistogram's buckets (the
    full run's report took 36 s, most of it reading the same logs again)."""
    return {key: recorded_ms(hist) for key, hist in read(Path(path)).items()}


def recorded_ms(hist: HdrHistogram) -> tuple:
    """((ms, count), ...) of each bucket that holds a value, at the bucket's highest value:
    what the package's `get_recorded_iterator` yields, without its steps through every
    empty bucket (about 240,000 a histogram, one Python call each)."""
    counts = hist.counts[:hist.counts_len]
    return tuple((hist.get_highest_equivalent_value(hist.get_value_from_index(i)) / 1000, n)
                 for i, n in enumerate(counts) if n)
