"""A box as attendees bring it: an image or a VM, a bare system, a user without root.

Clear words instead of tracebacks: a screenshot that cannot be taken is a warning
and the run goes on; the web UI reachable through a container's port mapping
(`--ui-address`, `$FTL_UI_ADDRESS`); a system without apt-get whose tools are all
there goes on with `make setup`. The image itself is tried by `make image-test`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import ctrl_c, read_until
from test_lab import ROOT, leftovers


def test_a_screenshot_that_cannot_be_taken_is_a_warning_and_the_run_goes_on(tmp_path):
    """A bare image's /etc/hosts has no `localhost`, and chromedriver cannot be reached
    without it: here that /etc/hosts, in a mount namespace of the test's own."""
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("127.0.0.2 not-localhost\n")
    script = ("from pathlib import Path; from benchmarks import stages; "
              "from benchmarks.sockets_tab import stage_shot; "
              f"stage_shot.screenshot(stages.get('0'), Path({str(tmp_path)!r}), "
              "'http://127.0.0.1:9'); "
              f"stage_shot.screenshot(stages.get('2'), Path({str(tmp_path)!r}), "
              "'http://127.0.0.1:9'); print('the run goes on')")
    ran = subprocess.run(["unshare", "--mount", "sh", "-c",
                          'mount --bind "$0" /etc/hosts && exec "$1" -c "$2"',
                          str(hosts_file), sys.executable, script],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    if ran.returncode != 0 and "unshare" in ran.stderr:
        pytest.skip(f"cannot make a mount namespace here: {ran.stderr.strip()}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines == ["  no screenshots of the Sockets tab: `localhost` does not resolve here "
                     "(no line for it in /etc/hosts, as in a bare image), so chromedriver "
                     "cannot be reached: add `127.0.0.1 localhost` to /etc/hosts",
                     "the run goes on"], ran.stdout   # said once, for the first stage
    assert not (tmp_path / "sockets-tab.png").exists()


@pytest.mark.netns
@pytest.mark.slow
def test_sudo_on_a_vm_set_up_by_cloud_init_serves_the_ui_where_the_page_says(tmp_path):
    """A Multipass VM made with setup/cloud-init.yaml: its /etc/flask-tuning-lab.conf as
    lab-ready leaves it there (here in a copy of /etc, bind-mounted in a mount namespace
    of the test's own), `lab up 2` with sudo's environment (env_reset: no FTL_UI_ADDRESS
    from a login shell). The UI listens on every interface and the banner gives the
    address docs/laptops.md gives; the test reaches it on loopback only."""
    etc = tmp_path / "etc"
    shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
    chosen = subprocess.run(["sh", str(lab_ready(tmp_path)), "--ui-address-for", "nocloud"],
                            capture_output=True, text=True, timeout=10).stdout.strip()
    (etc / "flask-tuning-lab.conf").write_text(
        cloud_init_conf().replace("FTL_UI_ADDRESS=\n", f"FTL_UI_ADDRESS={chosen}\n"))
    sudo_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": "/root", "TERM": "dumb", "LANG": "C.UTF-8"}
    proc = subprocess.Popen(["unshare", "--mount", "sh", "-c",
                             'mount --bind "$0" /etc && exec "$@"', str(etc), sys.executable,
                             "-m", "benchmarks.lab", "up", "2", "--results",
                             str(tmp_path / "results"), "--ui-port", "0"], cwd=ROOT,
                            env=sudo_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=False)
    try:
        seen = read_until(proc, "Locust's web UI")
        line = next((ln for ln in seen.splitlines() if "Locust's web UI" in ln), seen)
        lab = next(p for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]
                   if "benchmarks.lab" in " ".join(p.cmdline()))
        listening = [c.laddr for c in lab.net_connections("tcp4")
                     if c.status == psutil.CONN_LISTEN]
        assert len(listening) == 1 and listening[0].ip == "0.0.0.0", (listening, seen)
        port = listening[0].port
        assert line.strip() == (
            f"Locust's web UI (Sockets tab): http://127.0.0.1:{port}, listening on "
            f"0.0.0.0:{port}  (from the laptop that runs this container or VM: "
            f"http://localhost:{port} through a port mapping, or "
            f"http://VM_ADDRESS:{port})"), line
        assert "http://VM_ADDRESS:8089" in (ROOT / "docs" / "laptops.md").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200 and b"Locust" in page.read()
    finally:
        rest = ctrl_c(proc)
    assert proc.returncode == 130, rest
    assert leftovers(proc.pid) == []


def test_the_ui_address_comes_from_the_variable_first():
    """$FTL_UI_ADDRESS (the image's, a dev container's) wins over the box's file."""
    ran = subprocess.run([sys.executable, "-c", "from benchmarks.sockets_tab import web_ui; "
                          "print(web_ui.default_ui_address())"], capture_output=True,
                         text=True, timeout=30, cwd=ROOT,
                         env={**os.environ, "FTL_UI_ADDRESS": "0.0.0.0"})
    assert ran.stdout.strip() == "0.0.0.0", ran.stderr


def test_a_bad_ui_address_is_refused_before_anything_starts(tmp_path):
    ran = subprocess.run([sys.executable, "-m", "benchmarks.lab", "up", "0", "--ui-address",
                          "everywhere", "--results", str(tmp_path)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "--ui-address 'everywhere': an IPv4 address of this machine" in \
        ran.stdout + ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["up.lock"])  # nothing ran


# --- make setup on a system without apt-get ----------------------------------------

def makefile_pairs(name: str) -> list[tuple[str, str]]:
    """A `NAME := tool:package ...` line of the Makefile, as (tool, package) pairs."""
    text = (ROOT / "Makefile").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{name} :="))
    return [tuple(pair.split(":")) for pair in line.split(":=", 1)[1].split()]


def system_tools() -> list[str]:
    """The tools `make system-packages` looks for (SYSTEM_TOOLS and BROWSER_TOOLS)."""
    return [tool for tool, _ in makefile_pairs("SYSTEM_TOOLS") + makefile_pairs("BROWSER_TOOLS")]


def bin_without_apt(tmp_path: Path, leave_out: str = "") -> Path:
    """A PATH with every tool the Makefile needs, and no apt-get."""
    found = shutil.which
    folder = tmp_path / "bin"
    folder.mkdir()
    path = os.environ["PATH"] + ":/usr/sbin:/sbin"
    for tool in [*system_tools(), "sh", "uname", "id", "python3", "cat"]:
        where = found(tool, path=path)
        if tool != leave_out and where:
            (folder / tool).symlink_to(where)
    assert not found("apt-get", path=str(folder))
    return folder


@pytest.mark.parametrize("leave_out", ["", "wrk"])
def test_without_apt_get_make_setup_goes_on_when_every_tool_is_there(tmp_path, leave_out):
    folder = bin_without_apt(tmp_path, leave_out)
    missing = [t for t in system_tools() if not (folder / t).exists() and t != leave_out]
    if missing:
        pytest.skip(f"this box lacks {missing}")
    ran = subprocess.run([shutil.which("make"), "-s", "preflight", "system-packages",
                          f"PYTHON={sys.executable}"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={**os.environ, "PATH": str(folder)})
    if not leave_out:
        assert ran.returncode == 0, ran.stdout + ran.stderr
        return
    assert ran.returncode != 0
    said = [ln for ln in (ran.stdout + ran.stderr).splitlines() if ln.startswith("setup:")]
    assert said == ["setup: missing system packages (Debian's names): wrk; no apt-get here: "
                    "install them with this system's package manager, then run make again"], \
        ran.stdout + ran.stderr


def browser_skipped() -> str:
    text = (ROOT / "Makefile").read_text()
    return next(ln for ln in text.splitlines()
                if ln.startswith("BROWSER_SKIPPED :=")).split(":=", 1)[1].strip()


def test_without_a_browser_package_make_setup_goes_on_and_says_what_is_skipped():
    """Ubuntu has no `chromium` deb (a snap): here a browser package apt does not know
    (BROWSER_TOOLS given on the command line), on this box's real apt."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("needs root and apt-get")
    ran = subprocess.run([shutil.which("make"), "-s", "system-packages", f"PYTHON={sys.executable}",
                          "BROWSER_TOOLS=ftl-no-browser:ftl-no-such-package"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={k: v for k, v in os.environ.items() if k != "MAKEFLAGS"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    said = [ln for ln in ran.stdout.splitlines() if ln.startswith("setup:")]
    assert said == ["setup: no apt package ftl-no-such-package here (Ubuntu ships Chromium as a "
                    f"snap): going on without it; {browser_skipped()}"], ran.stdout



# --- the VM recipe: setup/cloud-init.yaml ---------------------------------------------

CLOUD_INIT = ROOT / "setup" / "cloud-init.yaml"


def test_the_cloud_init_file_passes_cloud_init_schema():
    tool = shutil.which("cloud-init")
    if tool is None:
        pytest.skip("cloud-init is not installed (.ci/run installs it: apt-get install "
                    "cloud-init)")
    ran = subprocess.run([tool, "schema", "--config-file", str(CLOUD_INIT)],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and "Valid cloud-config" in ran.stdout, ran.stdout + ran.stderr


def cloud_init_packages(text: str) -> set[str]:
    """The `packages:` list's names (plain YAML here: one `  - name` a line)."""
    block = text.split("\npackages:\n", 1)[1].split("\n\n", 1)[0]
    return {ln.strip()[2:] for ln in block.splitlines() if ln.strip().startswith("- ")}


def written_file(path: str) -> str:
    """A write_files entry's content, as cloud-init writes it: the block under its path,
    six spaces in."""
    block = CLOUD_INIT.read_text().split(f"path: {path}", 1)[1].split("content: |\n", 1)[1]
    lines = []
    for ln in block.splitlines():
        if ln and not ln.startswith("      "):
            break
        lines.append(ln[6:])
    return "\n".join(lines).rstrip("\n") + "\n"


def cloud_init_conf() -> str:
    return written_file("/etc/flask-tuning-lab.conf")


def lab_ready(tmp_path: Path) -> Path:
    script = tmp_path / "lab-ready"
    script.write_text(written_file("/usr/local/sbin/lab-ready"))
    return script


def test_the_cloud_init_file_installs_what_make_setup_would_and_its_script_parses(tmp_path):
    text = CLOUD_INIT.read_text()
    # what make setup needs; the browser, which Ubuntu has as a snap only (an unknown
    # package would fail cloud-init's whole install), is left to make setup
    wanted = {pkg for _, pkg in makefile_pairs("SYSTEM_TOOLS")}
    browser = {pkg for _, pkg in makefile_pairs("BROWSER_TOOLS")}
    assert wanted - cloud_init_packages(text) == set()
    assert browser & cloud_init_packages(text) == set()
    script = lab_ready(tmp_path)
    assert script.read_text().startswith("#!/bin/sh\n")
    parsed = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True,
                            timeout=10)
    assert parsed.returncode == 0, parsed.stderr
    # "ready" means every check passed: the short lab is setup/ready-lab.sh's, strict, and
    # its failure ends lab-ready with status 1 (tests/lab/test_strict.py fails it for real)
    text = script.read_text()
    assert "if ! sh setup/ready-lab.sh 0,2 5; then" in text
    failing = text.split("if ! sh setup/ready-lab.sh 0,2 5; then", 1)[1].split("fi\n", 1)[0]
    assert failing.strip().endswith("exit 1") and "NOT ready" in failing


@pytest.mark.parametrize("platform, address", [("nocloud", "0.0.0.0"), ("lxd", "0.0.0.0"),
                                               ("ec2", "127.0.0.1"), ("gce", "127.0.0.1"),
                                               ("", "127.0.0.1")])
def test_lab_ready_opens_the_ui_only_on_a_vm_of_the_laptop(tmp_path, platform, address):
    """cloud-init's platform: Multipass (nocloud) and LXD run on the attendee's laptop;
    any cloud's VM keeps the UI, which has no login, on its 127.0.0.1 (an SSH tunnel)."""
    ran = subprocess.run(["sh", str(lab_ready(tmp_path)), "--ui-address-for", platform],
                         capture_output=True, text=True, timeout=10)
    assert (ran.returncode, ran.stdout) == (0, f"{address}\n"), ran.stderr
    assert "FTL_UI_ADDRESS=\n" in cloud_init_conf()   # chosen at first boot


def test_the_dev_container_runs_the_image_privileged_with_the_ui_forwarded():
    """.devcontainer/devcontainer.json (JSON with // comments): the Containerfile, where it
    puts the lab, privileged, port 8089 forwarded, results/ mounted from the workspace."""
    import json
    import re

    text = (ROOT / ".devcontainer" / "devcontainer.json").read_text()
    config = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    built = (ROOT / ".devcontainer" / config["build"]["dockerfile"]).resolve()
    assert built == ROOT / "Containerfile"
    workdir = re.search(r"^WORKDIR (\S+)$", built.read_text(), flags=re.M)[1]
    assert config["workspaceFolder"] == workdir
    assert "--privileged" in config["runArgs"] and 8089 in config["forwardPorts"]
    # nothing runs on the host, whose shell differs (cmd.exe on Windows)
    assert "initializeCommand" not in config
    assert "source=${localWorkspaceFolder},target=/workspace," in config["workspaceMount"]


def test_the_dev_container_links_results_into_the_workspace_once(tmp_path):
    """postCreateCommand, run by sh as the container does, on copies of /lab and
    /workspace: /lab/results becomes a link to the workspace's results/ (made if
    missing), and a second run (a rebuilt container's) changes nothing."""
    import json
    import re

    text = (ROOT / ".devcontainer" / "devcontainer.json").read_text()
    command = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))["postCreateCommand"]
    lab, workspace = tmp_path / "lab", tmp_path / "workspace"
    (lab / "results").mkdir(parents=True)      # the image's empty /lab/results
    workspace.mkdir()
    command = command.replace("/workspace", str(workspace)).replace("/lab", str(lab))
    for _ in range(2):
        ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=10)
        assert ran.returncode == 0, ran.stderr
    assert (lab / "results").resolve() == workspace / "results"
    (lab / "results" / "run").mkdir()
    assert (workspace / "results" / "run").is_dir()
