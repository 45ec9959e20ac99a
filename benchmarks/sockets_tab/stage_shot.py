"""A screenshot of the Sockets tab for each stage `lab run` measured.

After a stage is measured and its servers are gone, the stage's capture is
shown the way an attendee saw it live: Locust's web UI, on a free port of the
machine's 127.0.0.1, with benchmarks/sockets_tab/plugin.py reading the stage's
`sampler.csv` (`--sockets-finished`: the TIME_WAIT-per-request column is the
stage's own figure from `metrics.json`). A swarm of 0 users is started so the
UI shows its tabs, and stopped at once; it sends nothing (its host is the
discard port on loopback; the header is given the stage's entry point, whose
servers are gone by then), and its RPS and Failures are set to the stage's
own, from `metrics.json` (the viewer's own are 0). Headless
Chromium (benchmarks/sockets_tab/headless.py) opens the tab and saves
`<stage folder>/sockets-tab.png`; then both stop.

Nothing of this runs while the stage is measured, so it changes no figure.
Without Chromium, chromedriver or selenium, `lab run` says so once and goes on.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from benchmarks.run import locust_cli, results
from benchmarks.run.cli import StageFailed, say
from benchmarks.sandbox import procs, sandbox
from benchmarks.sockets_tab import headless
from benchmarks.stages import ROOT, Stage

NOWHERE = "http://127.0.0.1:9"  # the discard port: a 0-user swarm never sends there
START_TIMEOUT = 60.0


def viewer_command(stage: Stage, stage_dir: Path, port: int) -> list[str]:
    """Locust's web UI over a finished stage's capture, a 0-user swarm started that stops
    after 1 s, so the header reads STOPPED, as the stage is, by the time a browser looks
    (clicking Stop waited for the UI's next poll: about 4 s a screenshot). Its host is
    NOWHERE: it runs on the machine's own network, where the locustfiles refuse a lab
    address; the header is given the stage's entry instead (save)."""
    return locust_cli.command(stage.users, [
        "--web-host", "127.0.0.1", "--web-port", str(port), "--host", NOWHERE,
        "--autostart", "-u", "0", "-r", "1", "-t", "1s",
        "--sockets-csv", str(stage_dir / results.SAMPLER_CSV), "--sockets-finished"],
        sockets_tab=True)


def header_figures(stage_dir: Path) -> dict[str, str]:
    """What Locust's header said at the end of the stage: requests a second and the
    failed share, HTTP and Socket.IO together, as Locust counts them."""
    path = stage_dir / results.METRICS_JSON
    if not path.exists():
        return {}
    m = json.loads(path.read_text())
    rps = (m.get("locust_rps") or 0) + (m.get("sio_locust_rps") or 0)
    requests = (m.get("requests") or 0) + (m.get("sio_requests") or 0)
    failures = (m.get("failures") or 0) + (m.get("sio_failures") or 0)
    share = 100 * failures / requests if requests else 0
    return {"RPS": f"{rps:.1f}", "Failures": f"{share:.0f}%"}


def save(stage: Stage, stage_dir: Path, url: str = NOWHERE) -> Path:
    """`<stage_dir>/sockets-tab.png` of the finished stage; StageFailed if it cannot be
    made, headless.BrowserMissing without a browser."""
    headless.find_browser()
    port = procs.free_port()
    log = stage_dir / results.SOCKETS_SHOT_LOG
    viewer = procs.start(viewer_command(stage, stage_dir, port), log=log,
                         env=procs.child_env(), cwd=ROOT)
    out = stage_dir / results.SOCKETS_SCREENSHOT
    try:
        try:
            procs.wait_for_port(port, proc=viewer, timeout=START_TIMEOUT)
        except procs.ServiceError as e:
            raise StageFailed(f"Locust's web UI did not start: {e}; see {log}") from e
        with headless.chromium() as driver:
            driver.get(f"http://127.0.0.1:{port}")
            headless.wait_for_status(driver, "STOPPED")  # its 1 s run is over
            headless.open_sockets_tab(driver)
            headless.wait_for_table(driver)
            headless.show_in_header(driver, {**header_figures(stage_dir), "Host": url})
            driver.save_screenshot(str(out))
    except TimeoutError as e:
        raise StageFailed(f"the Sockets tab did not show: {e}; see {log}") from e
    finally:
        with sandbox.uninterrupted():
            procs.stop(viewer, sig=signal.SIGTERM)
    return out


_NO_BROWSER: list[str] = []  # said once per run


def screenshot(stage: Stage, stage_dir: Path, url: str) -> None:
    """`lab run`'s hook (runner.Screenshot): the stage's Sockets tab as a PNG; a missing
    browser or a failed shot is said, never fails the stage."""
    if _NO_BROWSER:
        return
    try:
        say(f"  screenshot: {results.rel(save(stage, stage_dir, url))}")
    except headless.BrowserMissing as e:
        _NO_BROWSER.append(str(e))
        say(f"  no screenshots of the Sockets tab: {e}")
    except StageFailed as e:
        say(f"  WARNING: no screenshot of the Sockets tab: {e}")
    except Exception as e:  # the browser's own errors: a picture never ends the run
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        say(f"  WARNING: no screenshot of the Sockets tab: {type(e).__name__}: {first}")
