"""Each plot's title and how to read it, in words: report.md and the notebook print
them beside the pictures that benchmarks/analysis/plots.py draws (which re-exports
both, as `plots.TITLES` and `plots.HOW_TO_READ`)."""

from benchmarks.analysis import stats

HOW_TO_READ = {
    "throughput_latency": (
        "Taller green bars are more answered requests per second (red on top: requests "
        "that failed, which Locust counts in its RPS too; a red bar too tall for the axis "
        "is cut, marked ▲ with its full height); lower latency bars are better, "
        "on a log scale, a p99 far above the p95 is a tail of slow requests, and where a "
        "red box says many requests failed, their fast 502s make the latency look good. "
        "A black dash is the p95 in the server's own access log: the gap up to Locust's "
        "bar is time spent outside the server (the network, Locust's own queueing). With "
        "--repeats, a black dot and whiskers are a stage's geometric mean RPS and its 95% "
        "interval "
        "(the bar is the first repeat), and `n.s.` marks a step that is not significant "
        "(its paired test on the ratios within each repeat, p adjusted by Holm's method "
        f"over every step the report tests: adjusted p >= {stats.ALPHA:g})."),
    "time_wait": (
        "Each panel is one stage: a line that climbs is a connection class opening and "
        "closing a connection per request (each socket stays in TIME_WAIT for 60 s, so "
        "lines start with what the warm-up left), a flat line near 0 is connections being "
        "reused, a line that flattens at the dashed port limit has used up every "
        "local port, and a wide pale line under a thin one is two classes with the same "
        "counts (stages 0 and 1: a Redis connection per request)."),
    "time_wait_vs_throughput": (
        "Each dot is one connection class in one stage (its key beside it, joined by a "
        "thin line when the dots crowd): dots on the dashed line leave one TIME_WAIT "
        "socket per request (the cost of churn grows with throughput), dots at the bottom "
        "reuse their connections whatever the throughput."),
    "cpu": (
        "Each bar stacks the mean CPU of every component over the measured window (100% = "
        "one core, the dotted line is all cores); when Locust's hatched share, or its peak "
        "written above the bar, passes 90% of a core, the client, not the server, sets the "
        "numbers."),
    "failures": (
        "In each Nginx stage the purple line counts Nginx's upstream TIME_WAIT sockets "
        "(each holds a local port), the red bars failed and the short green lines answered "
        "requests per second (a bar taller than its axis is cut and marked ▲ with its "
        "height): when the purple line reaches the dashed port limit, Nginx cannot "
        "connect, the 502s start and the answered requests drop."),
    "cpu_by_bucket": (
        "Each bar is the app server's CPU per answered request (the sampler's), cut by "
        "where py-spy found its workers (benchmarks/profile/buckets.py): a tall red base "
        "is Redis connections opened and closed per request, which the pool (stage 2) "
        "removes; a shorter bar is a cheaper request. A hatched dark segment is CPU on "
        "threads with no Python frame (granian's Rust, measured per thread from /proc), "
        "which py-spy cannot see and the buckets do not share. The flame graph of each stage, "
        "profile.svg in its folder, shows the same samples frame by frame."),
}

TITLES = {
    "throughput_latency": "Throughput and tail latency per stage",
    "time_wait": "TIME_WAIT over time, per connection class",
    "time_wait_vs_throughput": "TIME_WAIT against throughput: the cost of churn",
    "cpu": "CPU per component",
    "failures": "Failures and upstream TIME_WAIT in the Nginx stages",
    "cpu_by_bucket": "CPU per request, by bucket, per stage",
}
