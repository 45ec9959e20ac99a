"""A "Sockets" tab in Locust's web UI: the lesson beside the load, live.

Loaded as a second locustfile, after the scenario:

    locust -f benchmarks/chat.py,benchmarks/sockets_tab/plugin.py --class-picker \\
        --sockets-csv results/up/00-builtin/sampler.csv

(`python -m benchmarks.lab up N` starts it so). With --sockets-csv (the sampler's
CSV of the running stage; `sockets.json` beside it names the classes) it adds:

  the Sockets tab   Locust's extension points (template_args `extended_tabs`,
                    `extended_tables`, and `extended_stats` in /stats/requests)
                    fill a table per connection class and host; a small script
                    (benchmarks/sockets_tab/static/sockets_tab.js, served from here, no CDN)
                    draws TIME_WAIT and ESTABLISHED over time above it and links
                    the CSV
  /sockets/stats    the same numbers as JSON (benchmarks/sockets_tab/stats.py)
  /sockets/series   the chart's time series, JSON
  /sockets/csv      the sampler's CSV, as a download
  headless          one line every --sockets-every seconds

With --class-picker the picker offers the classes named on the command line
(the stage's), all selected; without them, every class of the locustfiles.
The numbers themselves are derived in benchmarks/sockets_tab/stats.py only.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import gevent
from flask import Response, jsonify, request, send_file
from locust import events

from benchmarks.run import results
from benchmarks.sockets_tab import stats

TAB_KEY = "sockets"
STATIC = Path(__file__).parent / "static"
log = logging.getLogger("sockets")


@events.init_command_line_parser.add_listener
def _options(parser):
    parser.add_argument("--sockets-csv", default="", include_in_web_ui=False,
                       env_var="LOCUST_SOCKETS_CSV",
                       help="the sampler's CSV of the running stage (lab up sets it)")
    parser.add_argument("--sockets-finished", action="store_true", include_in_web_ui=False,
                       env_var="LOCUST_SOCKETS_FINISHED",
                       help="the CSV is a finished stage's (benchmarks/sockets_tab/stage_shot.py): "
                            "its TIME_WAIT per request comes from metrics.json beside it")
    parser.add_argument("--sockets-every", type=float, default=5.0, include_in_web_ui=False,
                       env_var="LOCUST_SOCKETS_EVERY",
                       help="seconds between the headless run's sockets lines")


class SocketsView:
    """What the tab, the JSON and the headless line show, from the sampler's CSV."""

    def __init__(self, environment, sampler_csv: Path, finished: bool = False):
        self.env, self.csv = environment, Path(sampler_csv)
        self.window = stats.RequestWindow()
        self.finished = finished
        log = stats.read_layout(self.csv).get("count_log")
        self.server = stats.ServerCount(self.csv.parent / log) if log else None

    def count_requests(self) -> None:
        """The server's request count (its count log; without one, Locust's own) once a
        second, from the start: the per-request figure then covers every request of the
        last 60 s, whoever sent them and whether anyone looks or not."""
        while True:
            runner = self.env.runner
            rows = stats.read_rows(self.csv, last=1)
            total = (self.server.read() if self.server else
                     runner.stats.total.num_requests if runner else 0)
            self.window.add(total, time_wait={k[3:]: v for k, v in
                                              (rows[-1] if rows else {}).items()
                                              if k.startswith("tw_")})
            gevent.sleep(1)

    def stats(self) -> dict:
        layout = stats.read_layout(self.csv)
        rows = stats.read_rows(self.csv, last=1)
        snap = stats.snapshot(rows[-1] if rows else None, layout,
                                     self.window.recent(), self.window.left_over)
        if self.finished:  # no live count: the stage's own figure
            measured = results.read_json(self.csv.parent / results.METRICS_JSON)
            for c in snap["classes"]:
                c["tw_per_request"] = measured.get(f"tw_{c['class']}_per_request")
        return snap

    def series(self, last: int = 300) -> dict:
        layout = stats.read_layout(self.csv)
        return stats.series(stats.read_rows(self.csv, last=last), layout)

    def print_lines(self, every: float) -> None:
        while True:
            gevent.sleep(every)
            print(stats.line(self.stats()), flush=True)


@events.init.add_listener
def _init(environment, **_kwargs):
    options = environment.parsed_options
    if not options or not options.sockets_csv:
        return
    folder = Path(options.sockets_csv).parent
    if not folder.is_dir():
        # nothing would ever be there to show: say so rather than serve an empty tab
        log.error("--sockets-csv %s: no stage is up there (no folder %s). Start one: "
                  "python -m benchmarks.lab up 0", options.sockets_csv, folder)
        sys.exit(2)
    view = SocketsView(environment, Path(options.sockets_csv), options.sockets_finished)
    if getattr(options, "class_picker", False) and options.user_classes:
        # preselect the stage's classes: the picker selects every class it offers
        environment.available_user_classes = {
            name: cls for name, cls in environment.available_user_classes.items()
            if name in options.user_classes}
    gevent.spawn(view.count_requests)
    if options.headless:
        gevent.spawn(view.print_lines, options.sockets_every)
    if environment.web_ui:
        _extend_web_ui(environment.web_ui, view)


def _extend_web_ui(web_ui, view: SocketsView) -> None:
    app = web_ui.app
    web_ui.template_args["extended_tabs"] = [{"title": "Sockets", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": stats.TABLE_STRUCTURE}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./sockets/csv", "title": "Download sockets CSV (sampler)"}]

    @app.route("/sockets/stats")
    def sockets_stats():
        return jsonify(view.stats())

    @app.route("/sockets/series")
    def sockets_series():
        return jsonify(view.series(int(request.args.get("last", 300))))

    @app.route("/sockets/csv")
    def sockets_csv():
        if not view.csv.exists():
            return Response("the sampler has written nothing yet\n", 404,
                            mimetype="text/plain")
        return send_file(view.csv, mimetype="text/csv", as_attachment=True,
                         download_name="sockets.csv", max_age=0)

    @app.route("/sockets/tab.js")
    def sockets_tab_js():
        return send_file(STATIC / "sockets_tab.js", mimetype="text/javascript", max_age=0)

    @app.after_request
    def _add_sockets(response):
        if request.path == "/stats/requests" and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [
                {"key": TAB_KEY, "data": stats.table_rows(view.stats())}]
            response.set_data(json.dumps(data))
        elif request.path == "/" and response.mimetype == "text/html":
            html = response.get_data(as_text=True)
            script = '<script src="./sockets/tab.js"></script>'
            response.set_data(html.replace("</body>", f"{script}</body>", 1))
        return response
