"""A box as attendees bring it: an image or a VM, a bare system, a user without root.

Clear words instead of tracebacks: a screenshot that cannot be taken is a warning
and the run goes on; the web UI reachable through a container's port mapping
(`--ui-address`, `$FTL_UI_ADDRESS`); a system without apt-get whose tools are all
there goes on with `make setup`. The image itself is tried by `make image-test`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import ctrl_c, read_until
from test_docs import block_commands, doc_commands, docs, fenced_blocks, rel
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
    the cloud-init file writes it and the page's Multipass line opens it (here in a copy
    of /etc, bind-mounted in a mount namespace of the test's own), then `sudo lab up 2`
    as typed: `lab` (setup/lab.sh, its /lab this checkout) found on sudo's secure_path,
    with sudo's environment (env_reset: no FTL_UI_ADDRESS from a login shell). The UI
    listens on every interface and the banner gives the address docs/laptops.md gives;
    the test reaches it on loopback only."""
    etc = tmp_path / "etc"
    shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
    (etc / "flask-tuning-lab.conf").write_text(cloud_init_conf())
    multipass_opens_the_ui(etc / "flask-tuning-lab.conf")
    bin_dir = lab_command(tmp_path)
    proc = subprocess.Popen(["unshare", "--mount", "sh", "-c",
                             'mount --bind "$0" /etc && exec "$@"', str(etc), "lab", "up", "2",
                             "--results", str(tmp_path / "results"), "--ui-port", "0"],
                            cwd=tmp_path, env=sudo_env(bin_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=False)
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
    """The tools `make system-packages` looks for (SYSTEM_TOOLS, BROWSER_TOOLS and
    METRICS_TOOLS)."""
    return [tool for tool, _ in makefile_pairs("SYSTEM_TOOLS") + makefile_pairs("BROWSER_TOOLS")
            + makefile_pairs("METRICS_TOOLS")]


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


def test_without_apt_get_and_a_metrics_tool_make_setup_goes_on_and_says_what_is_skipped(
        tmp_path):
    """Prometheus and its exporters serve --metrics alone: a box without them (and without
    apt-get) still sets up, and is told what it goes without."""
    folder = bin_without_apt(tmp_path, "prometheus")
    missing = [t for t in system_tools() if not (folder / t).exists() and t != "prometheus"]
    if missing:
        pytest.skip(f"this box lacks {missing}")
    ran = subprocess.run([shutil.which("make"), "-s", "preflight", "system-packages",
                          f"PYTHON={sys.executable}"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={**os.environ, "PATH": str(folder)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    said = [ln for ln in (ran.stdout + ran.stderr).splitlines() if ln.startswith("setup:")]
    assert said == ["setup: no prometheus here, and no apt-get: going on without them; lab "
                    "--metrics and its test (tests/lab/test_metrics_stack.py) are skipped"], said


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


# sudo's PATH on Debian 12 (its /etc/sudoers' secure_path; Ubuntu 24.04 adds /snap/bin):
# what `sudo CMD` searches, whatever the user's shell had on PATH
SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAB_COMMAND = ROOT / "setup" / "lab.sh"  # lab-ready installs it as /usr/local/bin/lab


def sudo_env(bin_dir: Path | None = None) -> dict[str, str]:
    """sudo's environment (env_reset): its secure_path, root's HOME, nothing a login shell
    exported. `bin_dir` stands first for /usr/local/bin, where lab-ready installs `lab`."""
    path = f"{bin_dir}:{SECURE_PATH}" if bin_dir else SECURE_PATH
    return {"PATH": path, "HOME": "/root", "TERM": "dumb", "LANG": "C.UTF-8"}


def lab_command(folder: Path) -> Path:
    """setup/lab.sh as lab-ready installs it (`lab`, mode 0755), its /lab this checkout;
    the folder it is in (readable by any user, as /usr/local/bin is)."""
    text = LAB_COMMAND.read_text()
    assert text.count("\nLAB=/lab\n") == 1
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "lab").write_text(text.replace("\nLAB=/lab\n", f"\nLAB={ROOT}\n"))
    (bin_dir / "lab").chmod(0o755)
    for path in (folder, bin_dir):
        path.chmod(0o755)
    return bin_dir


LAPTOPS = ROOT / "docs" / "laptops.md"


def recipe(title: str) -> list[str]:
    """The commands of the bash block under a `## title` heading of docs/laptops.md."""
    text = LAPTOPS.read_text()
    start = text.index(f"\n## {title}")
    line = text.count("\n", 0, start) + 2
    blocks = [(n, lines) for n, lang, lines in fenced_blocks(LAPTOPS) if lang == "bash"]
    n, lines = next((n, lines) for n, lines in blocks if n > line)
    return [c.text for c in block_commands(LAPTOPS, n, lines)]


def multipass_opens_the_ui(conf: Path) -> None:
    """The Multipass recipe's line that opens the UI, run as the VM would (root), on
    `conf` in place of the VM's /etc/flask-tuning-lab.conf."""
    prefix = "multipass exec ftl -- sudo "
    (line,) = [c for c in recipe("A VM with Multipass") if "FTL_UI_ADDRESS=0.0.0.0" in c]
    assert line.startswith(prefix) and line.count("/etc/flask-tuning-lab.conf") == 1, line
    command = line.removeprefix(prefix).replace("/etc/flask-tuning-lab.conf", str(conf))
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=10)
    assert ran.returncode == 0, ran.stderr


def test_the_cloud_init_file_installs_what_make_setup_would_and_its_script_parses(tmp_path):
    text = CLOUD_INIT.read_text()
    # what make setup needs; the browser, which Ubuntu has as a snap only (an unknown
    # package would fail cloud-init's whole install), is left to make setup
    wanted = {pkg for _, pkg in makefile_pairs("SYSTEM_TOOLS")}
    browser = {pkg for _, pkg in makefile_pairs("BROWSER_TOOLS")}
    assert wanted - cloud_init_packages(text) == set()
    assert browser & cloud_init_packages(text) == set()
    script = lab_ready(tmp_path)
    for path in (script, LAB_COMMAND):
        assert path.read_text().startswith("#!/bin/sh\n")
        parsed = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True,
                                timeout=10)
        assert parsed.returncode == 0, parsed.stderr
    # "ready" means every check passed: the short lab is setup/ready-lab.sh's, strict, and
    # its failure ends lab-ready with status 1 (tests/lab/test_strict.py fails it for real)
    text = script.read_text()
    assert "if ! sh setup/ready-lab.sh 0,2 10; then" in text
    failing = text.split("if ! sh setup/ready-lab.sh 0,2 10; then", 1)[1].split("fi\n", 1)[0]
    assert failing.strip().endswith("exit 1") and "NOT ready" in failing


def ui_address(conf: Path) -> str:
    """The address `lab up` listens on with this box file and sudo's environment."""
    code = ("import sys; from pathlib import Path; from benchmarks.sockets_tab import web_ui; "
            "web_ui.BOX_CONF = Path(sys.argv[1]); print(web_ui.default_ui_address())")
    ran = subprocess.run([sys.executable, "-c", code, str(conf)], cwd=ROOT, env=sudo_env(),
                         capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def test_the_ui_stays_on_loopback_on_every_vm_until_the_multipass_line_opens_it(tmp_path):
    """cloud-init's platform cannot tell a laptop's VM from a room's (Multipass, Proxmox
    and libvirt all say `nocloud`): the box file says 127.0.0.1 and lab-ready never
    changes it. Only the Multipass recipe's line of docs/laptops.md, run here on a copy
    of the file, opens it to 0.0.0.0."""
    assert "FTL_UI_ADDRESS=" not in lab_ready(tmp_path).read_text()
    conf = tmp_path / "flask-tuning-lab.conf"
    conf.write_text(cloud_init_conf())
    assert ui_address(conf) == "127.0.0.1"
    multipass_opens_the_ui(conf)
    assert ui_address(conf) == "0.0.0.0"


def test_the_cloud_init_file_writes_setup_lab_ready_as_it_is():
    """One lab-ready: the cloud-init file's (written before any clone exists) is
    setup/lab-ready.sh, which a VM made without that file (Lima) installs from the clone."""
    assert written_file("/usr/local/sbin/lab-ready") == \
        (ROOT / "setup" / "lab-ready.sh").read_text()


def test_the_lima_recipe_installs_lab_ready_and_runs_it():
    """docs/laptops.md's Lima block installs setup/lab-ready.sh where the cloud-init file
    puts it (on sudo's secure_path), then runs it on the mounted clone, which it copies
    into /lab (again on a re-run, where `cp -a "$PWD" /lab` would copy into /lab/NAME): a
    Lima box is checked as ready too. The cloud-init file's own header says so."""
    commands = recipe("A VM with Lima")
    install = ('limactl shell ftl sudo install -m 0755 "$PWD/setup/lab-ready.sh" '
               "/usr/local/sbin/lab-ready")
    assert install in commands, commands
    ready = [c for c in commands if c.startswith('limactl shell ftl sudo lab-ready "$PWD"')]
    assert ready and commands.index(ready[0]) > commands.index(install), commands
    assert not [c for c in commands if " cp " in c], commands
    assert "/usr/local/sbin" in SECURE_PATH.split(":")
    comments = [ln.lstrip("# ") for ln in CLOUD_INIT.read_text().splitlines()
                if ln.startswith("#")]
    assert "Lima, which writes its own user-data, installs lab-ready from the clone, " \
        "setup/lab-ready.sh, and runs it by hand" in " ".join(" ".join(comments).split())


@pytest.fixture
def lab_bin():
    """lab_command() in a folder any user can read (pytest's tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="ftl-lab-command-"))
    try:
        yield lab_command(folder)
    finally:
        shutil.rmtree(folder)


def test_sudo_lab_runs_a_lab_command_as_typed_through_secure_path(lab_bin, tmp_path):
    """`sudo lab list` from the user's own folder, with sudo's environment: `lab`, where
    lab-ready installs it, is on secure_path, and runs the lab from /lab with its venv,
    no activate needed."""
    if os.geteuid() != 0:
        pytest.skip("sudo runs `lab` as root")
    assert "install -m 0755 setup/lab.sh /usr/local/bin/lab" in lab_ready(tmp_path).read_text()
    assert "/usr/local/bin" in SECURE_PATH.split(":")
    ran = subprocess.run(["lab", "list"], cwd=tmp_path, env=sudo_env(lab_bin),
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "main: make lab STAGES=main" in ran.stdout


def test_sudo_lab_alone_is_a_root_shell_in_the_lab_with_its_venv(lab_bin, tmp_path):
    """`sudo lab`: a shell in /lab whose `python` is the lab's venv's, as the labs'
    commands assume (here its commands come on stdin, not from a terminal)."""
    if os.geteuid() != 0:
        pytest.skip("sudo runs `lab` as root")
    ran = subprocess.run(["lab"], input="command -v python\npwd\n", cwd=tmp_path,
                         env=sudo_env(lab_bin), capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [str(ROOT / ".venv" / "bin" / "python"), str(ROOT)]
    assert "a root shell in" in ran.stderr


def test_lab_without_root_says_so_instead_of_running_in_host_mode(lab_bin):
    if os.geteuid() != 0:
        pytest.skip("needs root, to run it as another user")
    ran = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          str(lab_bin / "lab"), "up", "0"], cwd="/", env=sudo_env(lab_bin),
                         capture_output=True, text=True, timeout=30)
    assert (ran.returncode, ran.stdout) == (1, ""), ran.stderr
    assert ran.stderr == "lab: the lab needs root (a network namespace per host): sudo lab up 0\n"


# The one way into the lab on a VM, in the same words on every page that speaks to a
# VM's user (whitespace aside)
VM_PAGES = (LAPTOPS, ROOT / "exercises" / "INSTRUCTOR.md", ROOT / "exercises" / "00-setup.md")
WAY_IN = ("`sudo lab` opens a root shell in `/lab` with the lab's venv first on `PATH`, "
          "where every command of the labs runs as written")


def test_every_vm_page_gives_the_same_way_into_the_lab():
    """...and no page tells `sudo python -m ...`, which fails on a VM as typed (no
    `python`, no venv through sudo's secure_path, not in /lab)."""
    missing = [rel(p) for p in VM_PAGES if WAY_IN not in " ".join(p.read_text().split())]
    assert not missing, f"{missing} do not say: {WAY_IN}"
    broken = [rel(p) for p in docs() if re.search(r"sudo python3? -m", p.read_text())]
    assert not broken, broken


def test_the_rehearsal_is_ready_lab_wherever_a_box_is_proven_ready(tmp_path):
    """setup/ready-lab.sh is lab-ready's, make image-test's and the instructor's rehearsal,
    as its header says: each runs it."""
    assert "sh setup/ready-lab.sh 0,2 10" in lab_ready(tmp_path).read_text()
    assert "sh setup/ready-lab.sh" in (ROOT / "setup" / "image-test.sh").read_text()
    commands = [c.text for c in doc_commands(ROOT / "exercises" / "INSTRUCTOR.md")]
    assert any(c.startswith("sh setup/ready-lab.sh ") for c in commands), commands


def dev_container() -> dict:
    """.devcontainer/devcontainer.json (JSON with // comments)."""
    import json

    text = (ROOT / ".devcontainer" / "devcontainer.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def test_the_dev_container_opens_the_clone_in_the_image_privileged_with_the_ui_forwarded():
    """The Containerfile's image, privileged, port 8089 forwarded; the editor's folder is
    the clone's mount, not the image's copy of the code (its WORKDIR), so an edit is what
    the lab runs and outlives a rebuild."""
    config = dev_container()
    built = (ROOT / ".devcontainer" / config["build"]["dockerfile"]).resolve()
    assert built == ROOT / "Containerfile"
    workdir = re.search(r"^WORKDIR (\S+)$", built.read_text(), flags=re.M)[1]
    mounted = re.search(r"target=([^,]+),", config["workspaceMount"])[1]
    assert config["workspaceFolder"] == mounted != workdir
    assert "source=${localWorkspaceFolder}," in config["workspaceMount"]
    assert "--privileged" in config["runArgs"] and 8089 in config["forwardPorts"]
    # nothing runs on the host, whose shell differs (cmd.exe on Windows)
    assert "initializeCommand" not in config


def test_the_dev_container_runs_the_clone_with_the_images_environments(tmp_path):
    """postCreateCommand, run by sh as the container does (twice: a rebuilt container's),
    on copies of /lab (its installed venvs, their make stamps) and /workspace (the clone's
    Makefile and requirements files, older than the stamps: the image was built from
    them). Then the Makefile's own make finds both environments installed, so `make lab`
    in the workspace needs no network; a lock changed since the build is installed."""
    lab, workspace = tmp_path / "lab", tmp_path / "workspace"
    workspace.mkdir()
    for path in [ROOT / "Makefile", *ROOT.glob("requirements*")]:
        shutil.copy(path, workspace)
        os.utime(workspace / path.name, (1e9, 1e9))   # the clone, before the build
    for venv in (".venv", ".venv-eventlet"):
        (lab / venv).mkdir(parents=True)
        (lab / venv / ".installed").touch()           # the image's build
    command = dev_container()["postCreateCommand"]
    command = command.replace("/workspace", str(workspace)).replace("/lab", str(lab))
    for _ in range(2):
        ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=10)
        assert ran.returncode == 0, ran.stderr
    assert (workspace / ".venv").resolve() == lab / ".venv"
    assert (workspace / ".venv-eventlet").resolve() == lab / ".venv-eventlet"

    def installed() -> int:
        """make -q: 0 when both stamps are up to date (nothing to install)."""
        return subprocess.run(["make", "-q", ".venv/.installed", ".venv-eventlet/.installed"],
                              cwd=workspace, capture_output=True, timeout=30).returncode

    assert installed() == 0
    (workspace / "requirements.lock").touch()
    assert installed() == 1
