"""The staged lab, end to end: every stage runs for real and shows its phenomenon.

One short `lab run` of every stage (a few seconds each) in network
namespaces, then its checks are read back from the results folder. Needs root
(network namespaces); without it these tests are skipped with the reason.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from benchmarks import metrics, nginx_conf, sandbox, stages

ROOT = stages.ROOT


def lab(*args, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.lab", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, **kw)


def leftovers(marker: str) -> list[str]:
    """Lab processes still running: any naming `marker` (a results folder: Redis, Nginx,
    Locust, the sampler) or serving the app on the stage port (gunicorn, flask run)."""
    found = []
    for pattern in (marker, "127.0.0.1:8000 app.wsgi:app", "app run --host 127.0.0.1"):
        out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
        found += [line for line in out.splitlines() if "pgrep" not in line]
    return found


def ctrl_c(proc: subprocess.Popen) -> str:
    """Send SIGINT as a terminal's Ctrl-C would; the rest of the output."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


@pytest.mark.parametrize("stage", [s for s in stages.STAGES if s.front], ids=lambda s: s.key)
def test_stage_nginx_config_passes_nginx_t(stage, tmp_path):
    conf = nginx_conf.render(stage.front, tmp_path, stages.APP_PORT, stages.FRONT_PORT)
    result = nginx_conf.check(conf)
    assert result.returncode == 0, result.stderr


def test_every_stage_sysctl_profile_exists_and_sets_tw_reuse():
    for stage in stages.STAGES:
        settings = stages.stage_sysctls(stage)
        assert settings["net.ipv4.tcp_tw_reuse"] in ("0", "1"), stage.key
    assert stages.stage_sysctls(stages.get("4"))["net.ipv4.tcp_tw_reuse"] == "0"
    assert stages.stage_sysctls(stages.get("5"))["net.ipv4.tcp_tw_reuse"] == "1"


def test_stage_lookup_by_key_and_slug_and_clear_error():
    assert stages.get("3g").slug == "gevent-keepalive"
    assert stages.get("nginx-proxy").key == "4"
    assert [s.key for s in stages.select("2, builtin")] == ["0", "2"]
    with pytest.raises(KeyError, match="known stages"):
        stages.get("9")


def test_unknown_stage_is_a_clear_error():
    result = lab("run", "--stages", "9", "--duration", "1")
    assert result.returncode == 2
    assert "unknown stage '9'" in result.stdout


def test_exec_without_a_running_stage_says_what_to_do(tmp_path):
    state = ROOT / "results" / "up.json"
    if state.exists():
        pytest.skip("a stage is up on this machine")
    result = lab("exec", "--", "ss", "-s")
    assert result.returncode != 0
    assert "no stage is up" in result.stderr


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One short run of every stage; the results folder."""
    results = tmp_path_factory.mktemp("lab-results")
    before = set(sandbox.list_lab_namespaces())
    proc = lab("run", "--stages", "all", "--duration", "6", "--warmup", "2", "--users", "20",
               "--spawn-rate", "20", "--results", str(results), timeout=900)
    run_dir = (results / "latest").resolve()
    (results / "lab-output.txt").write_text(proc.stdout + proc.stderr)
    return {"proc": proc, "run_dir": run_dir, "results": results, "before": before}


@pytest.mark.netns
def test_full_run_exits_zero_and_writes_the_results_folder(full_run):
    proc, run_dir = full_run["proc"], full_run["run_dir"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["versions"]["packages"]["gunicorn"].startswith("25.")
    assert set(info["stages"]) == {s.key for s in stages.STAGES}
    header = (run_dir / "summary.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == metrics.SUMMARY_COLUMNS
    assert (run_dir / "report.md").exists()
    for stage in stages.STAGES:
        d = run_dir / stage.dirname
        for name in ("locust_stats.csv", "sampler.csv", "ss-tanp.txt", "netstat-tan.txt",
                     "checks.json", "sysctl.json", "app.log",
                     "redis.log"):
            assert (d / name).exists(), f"{stage.dirname}/{name} missing"
        checks = json.loads((d / "checks.json").read_text())
        assert {c["name"] for c in checks} == {c.metric for c in stage.checks}
        for c in checks:
            assert set(c) >= {"name", "expected", "measured", "passed"}


@pytest.mark.netns
@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: f"{s.key}-{s.slug}")
def test_stage_shows_its_phenomenon(full_run, stage):
    d = full_run["run_dir"] / stage.dirname
    checks = json.loads((d / "checks.json").read_text())
    failed = [c for c in checks if not c["passed"]]
    assert not failed, json.dumps(failed, indent=1)


@pytest.mark.netns
def test_stage_namespaces_had_their_sysctls_and_host_was_untouched(full_run):
    run_dir = full_run["run_dir"]
    for stage in stages.STAGES:
        seen = json.loads((run_dir / stage.dirname / "sysctl.json").read_text())
        for key, value in stages.stage_sysctls(stage).items():
            assert seen[key] == value, (stage.key, key)
    # the host keeps its own values (Linux's defaults here)
    host = sandbox.read_sysctls(["net.ipv4.ip_local_port_range"])
    assert host["net.ipv4.ip_local_port_range"] != "50000 50999"


@pytest.mark.netns
def test_nothing_left_after_a_run(full_run):
    assert set(sandbox.list_lab_namespaces()) <= full_run["before"]
    assert leftovers(str(full_run["results"])) == []


@pytest.mark.netns
def test_up_exec_and_ctrl_c_clean_up(tmp_path):
    """`lab up` serves a stage until Ctrl-C; `exec` runs inside it; nothing is left."""
    results = tmp_path / "results"
    before = set(sandbox.list_lab_namespaces())
    state = ROOT / "results" / "up.json"
    if state.exists():
        pytest.skip("a stage is already up on this machine")
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.lab", "up", "2", "--results",
                             str(results)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "is up:" in line:
                break
        assert any("is up: http://127.0.0.1:8000" in ln for ln in lines), "".join(lines)
        out = lab("exec", "--", "ss", "-Htln", timeout=30)
        assert out.returncode == 0, out.stderr
        listening = out.stdout
        assert ":6379" in listening and ":8000" in listening
        curl = lab("exec", "--", sys.executable, "-c",
                   "import os, urllib.request; "
                   "print(urllib.request.urlopen(os.environ['LOCUST_HOST'] + '/healthz').status)",
                   timeout=30)
        assert curl.stdout.strip() == "200", curl.stderr
    finally:
        rest = ctrl_c(proc)
    assert proc.returncode == 130, rest
    assert "interrupted" in rest
    assert set(sandbox.list_lab_namespaces()) <= before
    assert leftovers(str(results)) == []
    assert not state.exists()


@pytest.mark.netns
def test_ctrl_c_during_a_run_removes_namespace_and_processes(tmp_path):
    results = tmp_path / "results"
    before = set(sandbox.list_lab_namespaces())
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.lab", "run", "--stages", "4",
                             "--duration", "30", "--warmup", "0", "--users", "10",
                             "--results", str(results)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or "measuring" in line:
                break
        time.sleep(3)
        assert len(set(sandbox.list_lab_namespaces()) - before) == 1
    finally:
        rest = ctrl_c(proc)
    assert proc.returncode == 130, rest
    assert set(sandbox.list_lab_namespaces()) <= before
    assert leftovers(str(results)) == []


def test_host_mode_runs_a_stage_on_free_ports_and_leaves_host_sysctls_alone(tmp_path):
    """--sandbox host: what a user without root gets (here: root, told not to use netns)."""
    before = sandbox.read_sysctls(["net.ipv4.tcp_tw_reuse", "net.ipv4.ip_local_port_range"])
    result = lab("run", "--sandbox", "host", "--stages", "4", "--duration", "3", "--warmup",
                 "1", "--users", "10", "--results", str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "host sysctls NOT applied" in result.stdout
    assert "loopback" in result.stdout  # the note on what host mode may hide
    run_dir = (tmp_path / "latest").resolve()
    metrics = json.loads((run_dir / "04-nginx-proxy" / "metrics.json").read_text())
    assert metrics["requests"] > 0
    seen = json.loads((run_dir / "04-nginx-proxy" / "sysctl.json").read_text())
    assert seen["net.ipv4.ip_local_port_range"] == before["net.ipv4.ip_local_port_range"]
    assert sandbox.read_sysctls(list(before)) == before
    assert leftovers(str(tmp_path)) == []
