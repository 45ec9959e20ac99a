"""The lab's life cycle around a run: `up`, `exec` and Ctrl-C, Ctrl-C during a run, a
set-up and a later repeat, `clean` after kill -9, host mode, and bad options refused
before anything starts. Apart from test_lab.py (the full run) so that the two long
files run side by side.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ctrl_c, read_until
from test_lab import ROOT, lab, leftovers, start_lab

from benchmarks import lab as lab_cli
from benchmarks import stages
from benchmarks.run import options, runner
from benchmarks.sandbox import hosts, procs


@pytest.mark.netns
@pytest.mark.slow
def test_up_exec_and_ctrl_c_clean_up(tmp_path):
    """`lab up` serves a stage until Ctrl-C; `exec` runs inside it; nothing is left."""
    results = str(tmp_path / "results")
    proc = start_lab("up", "2", "--results", results, "--ui-port", "0")  # any free port
    try:
        seen = read_until(proc, "ssh -L")
        assert "is up: http://198.18.0.30:8000" in seen, seen
        ui_port = re.search(r"web UI \(Sockets tab\): http://127\.0\.0\.1:(\d+)", seen)[1]
        assert f"ssh -L {ui_port}:127.0.0.1:{ui_port} " in seen and ui_port != "0", seen
        # each server listens on its own host; on the client only Locust's web UI, on
        # its loopback (the machine reaches it through the lab's forward)
        listening = {host: lab("exec", "--results", results, "--host", host, "--",
                               "ss", "-Htln", timeout=30).stdout
                     for host in ("client", "app", "redis")}
        assert "198.18.0.30:8000" in listening["app"] and ":6379" not in listening["app"]
        assert "198.18.0.40:6379" in listening["redis"]
        assert [ln.split()[3] for ln in listening["client"].splitlines()] == ["127.0.0.1:8089"]
        curl = lab("exec", "--results", results, "--", sys.executable, "-c",
                   "import os, urllib.request; "
                   "print(urllib.request.urlopen(os.environ['LOCUST_HOST'] + '/healthz').status)",
                   timeout=30)
        assert curl.stdout.strip() == "200", curl.stderr
        # from the machine's own network the stage's address goes nowhere, and only with
        # that route in place does the test try: the locustfile refuses, under `lab exec`
        # the same line runs
        got = subprocess.run(["ip", "route", "get", "198.18.0.30"], capture_output=True,
                             text=True, timeout=10)
        assert got.returncode != 0 and "No route to host" in got.stderr, got
        line = ["locust", "-f", "benchmarks/chat.py", "--headless", "-u", "1", "-r", "1",
                "-t", "2s", "--host", "http://198.18.0.30:8000", "ChatUser"]
        outside = subprocess.run([sys.executable, "-m", *line], capture_output=True,
                                 text=True, timeout=60, cwd=ROOT)
        assert outside.returncode == 1 and "lab exec -- locust -f" in outside.stderr, outside
        inside = lab("exec", "--results", results, "--", sys.executable, "-m", *line,
                     timeout=60)
        assert inside.returncode == 0, inside.stdout + inside.stderr
        second = lab("up", "2", "--results", results, "--ui-port", str(procs.free_port()))
        assert second.returncode == 2, second.stdout
        assert f"stage 2 is already up (pid {proc.pid})" in second.stdout, second.stdout
        assert hosts.owned_namespaces(second.pid) == []
    finally:
        rest = ctrl_c(proc)
    assert proc.returncode == 130, rest
    assert "everything it started is stopped" in rest
    assert leftovers(proc.pid) == []
    assert not (tmp_path / "results" / "up.json").exists()


def test_a_second_up_while_the_first_is_still_starting_says_so(tmp_path):
    """Two `lab up` started at once: the first has no up.json yet (it writes it once the
    stage is up), so the second is stopped by the first's lock, whatever its --ui-port."""
    results = tmp_path / "results"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from benchmarks.run import runner; "
         "runner.refuse_if_up(sys.argv[1]); print('holding', flush=True); time.sleep(60)",
         str(results)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert "holding" in read_until(holder, "holding", seconds=30)
        second = lab("up", "2", "--results", str(results), "--ui-port", str(procs.free_port()))
    finally:
        holder.kill()
        holder.communicate()
    assert second.returncode == 2, second.stdout
    assert "another `lab up` is starting a stage" in second.stdout, second.stdout
    assert leftovers(second.pid) == []


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 4])
def test_ctrl_c_during_a_run_removes_namespace_and_processes(tmp_path, presses):
    """Ctrl-C once, or four times within a second: nothing is left, and the lab says so."""
    proc = start_lab("run", "--stages", "4", "--duration", "30", "--warmup", "0",
                     "--users", "10", "--results", str(tmp_path / "results"))
    try:
        read_until(proc, "measuring")
        time.sleep(3)
        # a host per role of stage 4 (client, proxy, app, redis) and the bridge's
        assert len(hosts.owned_namespaces(proc.pid)) == 5
        assert runner.started_by(proc.pid), "the stage's servers run"
        for _ in range(presses - 1):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.25)
    finally:
        rest = ctrl_c(proc)
    assert proc.returncode == 130, rest
    assert "everything it started is stopped" in rest, rest
    assert leftovers(proc.pid) == []


@pytest.mark.netns
@pytest.mark.slow
def test_ctrl_c_in_a_later_repeat_keeps_the_finished_ones_and_says_so(tmp_path):
    """Two things in one run, to keep the suite short: Ctrl-C during repeat 2 keeps
    repeat 1 and says so; and that repeat, stage 5 under the keep-alive race's load (5k's
    bursts, --chat-burst-every), shows no race: its app keeps idle connections longer
    than Nginx does (test_lab.py's full run has 5k itself)."""
    results_dir = tmp_path / "results"
    burst = f"--chat-burst-every {stages.get('5k').burst_every:g}"
    proc = start_lab("run", "--no-plots", "--stages", "5", "--repeats", "3", "--duration", "4",
                     "--warmup", "2", "--no-screenshots", "--locust-args", burst,
                     "--results", str(results_dir))
    try:
        seen = read_until(proc, "lab: repeat 2 of 3", seconds=180)
        seen += read_until(proc, "measuring")
        assert "measuring" in seen and burst in seen, seen
    finally:
        rest = ctrl_c(proc)
    assert proc.returncode == 130, rest
    run_dir = (results_dir / "latest").resolve()
    assert (f"interrupted during repeat 2 of 3; the 1 finished repeat(s) stay in "
            f"{run_dir}") in rest, rest
    assert json.loads((run_dir / "run.json").read_text())["repeats_done"] == 1
    m = json.loads((run_dir / stages.get("5").dirname / "metrics.json").read_text())
    # no race: Nginx never met a connection the app closed under a request, and no POST
    # was answered 502 (a box crowded by other tests may still time out a Redis call: the
    # app's 503 "try again shortly", which is not the race)
    assert m["requests"] > 0, m
    assert m["upstream_prematurely_closed"] == 0 and m["post_502s"] == 0, m
    assert m["upstream_prematurely_closed"] == 0 and m["post_502s"] == 0, m
    assert leftovers(proc.pid) == []


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize("stage, after", [("2", 0), ("2", 0.3), ("2", 0.8), ("6h", 1.5),
                                           ("6h", 4)])
def test_ctrl_c_in_a_terminal_during_set_up_is_quiet(tmp_path, stage, after):
    """A terminal's Ctrl-C reaches the whole foreground process group, the lab's
    children too: at any moment of `lab up`'s set-up (from its first namespace on),
    no child prints a traceback, and nothing is left, with the most hosts too (6h: two
    client hosts and their Locust workers, two app hosts)."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.lab", "up", stage, "--results",
                             str(tmp_path / "results"), "--ui-port", str(procs.free_port())],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while not hosts.owned_namespaces(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(after)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        output = proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        output = proc.communicate()[0]
    assert proc.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "stopping what it started\n" in output, output  # said at once
    assert "everything it started is stopped" in output, output
    assert leftovers(proc.pid) == []


@pytest.mark.netns
@pytest.mark.slow
def test_clean_after_kill_9_removes_only_what_the_dead_lab_left(tmp_path):
    """A `kill -9` leaves the namespace and servers; `lab clean` removes them and leaves
    a stage that is up (and in use) alone."""
    up_results = str(tmp_path / "up")
    up = start_lab("up", "0", "--results", up_results, "--ui-port", str(procs.free_port()))
    killed = start_lab("run", "--stages", "2", "--duration", "30", "--warmup", "0",
                       "--users", "5", "--results", str(tmp_path / "killed"))
    try:
        assert "is up:" in read_until(up, "is up:")
        read_until(killed, "measuring")
        killed.kill()
        killed.wait(timeout=10)
        assert hosts.owned_namespaces(killed.pid), "kill -9 leaves the namespace"
        cleaned = lab("clean", timeout=60)
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert f"ftl-{killed.pid}-2-app" in cleaned.stdout
        assert leftovers(killed.pid) == []
        # the stage that is up is untouched and still answers
        assert hosts.owned_namespaces(up.pid)
        ok = lab("exec", "--results", up_results, "--host", "app", "--", "ss", "-Htln",
                 timeout=30)
        assert ":8000" in ok.stdout, ok.stdout + ok.stderr
    finally:
        killed.kill()
        killed.communicate()
        ctrl_c(up)
    assert leftovers(up.pid) == [] and leftovers(killed.pid) == []


@pytest.mark.slow
def test_host_mode_runs_a_stage_on_free_ports_and_leaves_host_sysctls_alone(tmp_path):
    """--sandbox host: what a user without root gets (here: root, told not to use netns)."""
    before = hosts.read_sysctls(["net.ipv4.tcp_tw_reuse", "net.ipv4.ip_local_port_range"])
    result = lab("run", "--sandbox", "host", "--stages", "4", "--duration", "3", "--warmup",
                 "1", "--users", "10", "--no-screenshots", "--no-plots", "--results",
                 str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "host sysctls NOT applied" in result.stdout
    assert "loopback" in result.stdout  # the note on what host mode may hide
    if hosts.netns_available()[0]:  # root who chose host mode is told the flag, not "be root"
        assert "--sandbox netns gives a host per role" in result.stdout
        assert "as root" not in result.stdout
    run_dir = (tmp_path / "latest").resolve()
    metrics = json.loads((run_dir / "04-nginx-proxy" / "metrics.json").read_text())
    assert metrics["requests"] > 0
    seen = json.loads((run_dir / "04-nginx-proxy" / "sysctl.json").read_text())
    for role in stages.get("4").roles:  # every role ran on the machine, with its sysctls
        assert seen[role]["net.ipv4.ip_local_port_range"] == before[
            "net.ipv4.ip_local_port_range"]
    assert hosts.read_sysctls(list(before)) == before
    assert leftovers(result.pid) == []


@pytest.mark.parametrize("args, says", [
    (["--users", "0"], "--users must be at least 1"),
    (["--repeats", "0"], "--repeats must be at least 1 (got 0)"),
    (["--repeats", "-2"], "--repeats must be at least 1 (got -2)"),
    (["--duration", "0"], "--duration must be at least 1 second"),
    (["--spawn-rate", "0"], "--spawn-rate must be above 0"),
    (["--stages", ""], "--stages is empty"),
    (["--stages", "99"], "unknown stage '99'"),
    (["--stages", "5,6", "--sandbox", "host"], "stage(s) 6 run two app hosts, which need "
                                               "--sandbox netns"),
    (["--client-hosts", "0"], "--client-hosts must be 1-2"),
    (["--client-hosts", "3"], "--client-hosts must be 1-2"),
    (["--client-hosts", "2", "--sandbox", "host"], "--client-hosts 2 needs --sandbox netns"),
    (["--stages", "0t"], "failure twin(s) 0t (base 0) run beside their base stage: "
                         "--stages 0,0t, or --stages failures"),
    (["--app-hosts", "0", "--stages", "5"], "--app-hosts must be 1-2"),
    (["--app-hosts", "3", "--stages", "5"], "--app-hosts must be 1-2"),
    (["--app-hosts", "2", "--stages", "3,5"], "stage(s) 3 have no proxy to spread requests"),
    (["--app-hosts", "2", "--stages", "5", "--sandbox", "host"],
     "stage(s) 5 run two app hosts, which need --sandbox netns"),
    (["--app-cpus", "0/1/1"], "3 sets for 2 app hosts"),
    (["--app-cpus", "1/99"], "CPU 99 not available here"),
    (["--locust-args", "'unbalanced"], "No closing quotation"),
    (["--locust-args=--no-such-option"], "Locust rejects --locust-args"),
])
def test_bad_run_options_are_refused_before_anything_starts(tmp_path, capsys, args, says):
    """`lab run` called in this process, as `python -m benchmarks.lab` calls it (a Python
    start each, about 1 s of CPU, was most of what these cost); its exit code 2 from a
    process of its own: test_a_bad_option_exits_2_from_the_command_line."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = lab_cli.main(["run", *args, "--results", str(tmp_path)])
    finally:  # lab_cli.main installs the lab's own
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    out = capsys.readouterr().out
    assert code == 2, out
    assert says in out, out
    assert not any(tmp_path.iterdir()), "no results folder for a run that never started"
    assert leftovers(os.getpid()) == []


def test_a_bad_option_exits_2_from_the_command_line(tmp_path):
    result = lab("run", "--users", "0", "--results", str(tmp_path), timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "lab: --users must be at least 1" in result.stdout, result.stdout
    assert not any(tmp_path.iterdir())
    assert leftovers(result.pid) == []


def test_host_mode_leaves_the_stages_with_two_app_hosts_out_of_a_set():
    """`--stages everything` on the host (no namespaces) runs every stage it can, and says
    which it left out; a stage with two app hosts cannot be declared without a proxy."""
    opts = options.RunOptions(stages=tuple(stages.STAGES), sandbox="netns")
    on_host, note = options.on_sandbox(opts, "host", "everything")
    assert [s.key for s in on_host.stages] == [s.key for s in stages.STAGES
                                               if s.app_hosts == 1]
    assert "6, 6g, 6p, 6i, 6h left out" in note
    assert options.on_sandbox(opts, "netns", "everything") == (opts, None)
    with pytest.raises(ValueError, match="need a proxy in front"):
        stages.Stage(key="7", slug="x", title="x", server=stages.GUNICORN_SYNC,
                     redis_mode="pool", front=None, sysctl=("baseline",), users=("ChatUser",),
                     checks=(), see="x", app_hosts=2)


@pytest.mark.netns
@pytest.mark.slow
def test_clean_restores_sysctls_a_killed_host_mode_run_changed(tmp_path):
    """Host mode saves the host's values before changing them; after a `kill -9`, `lab
    clean` puts them back. Played inside a namespace of the test's own, with its own
    state folder: tests never change the machine's sysctls."""
    ns = f"ftl-test{os.getpid()}-sysctl"
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from benchmarks.sandbox import hosts, sandbox\n"
        "sandbox.HOST_SYSCTL_STATE = Path(sys.argv[1])\n"
        "key = 'net.ipv4.tcp_tw_reuse'\n"
        "before = hosts.read_sysctls([key])[key]\n"
        "dead = 2 ** 22 + 1  # above pid_max's default: no such process\n"
        "sandbox.HOST_SYSCTL_STATE.mkdir(parents=True)\n"
        "(sandbox.HOST_SYSCTL_STATE / f'{dead}.json').write_text(json.dumps({key: before}))\n"
        "hosts.write_sysctls({key: '1' if before != '1' else '0'})  # what the run set\n"
        "changed = hosts.read_sysctls([key])[key]\n"
        "restored = sandbox.restore_stale_host_sysctls()\n"
        "print(json.dumps([before, changed, hosts.read_sysctls([key])[key], restored]))\n")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script,
                              str(tmp_path / "state")], cwd=ROOT, capture_output=True,
                             text=True, timeout=30)
    finally:
        subprocess.run(["ip", "netns", "del", ns])
    assert out.returncode == 0, out.stderr
    before, changed, after, restored = json.loads(out.stdout)
    assert changed != before and after == before
    assert restored == [f"net.ipv4.tcp_tw_reuse={before}"]
    assert not list((tmp_path / "state").iterdir())
