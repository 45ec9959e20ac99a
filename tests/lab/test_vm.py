"""`make vm-test`'s pieces held honest without booting a VM (that takes most of an hour,
setup/vm-test.sh): the commands it types are the VM pages' own, from test_typed.py's
REGISTRY; its user-data is setup/cloud-init.yaml with LAB_REPO= set and nothing else
changed, beside a room's part that names this box's configuration only; its short lab
is lab-ready's; bad input stops it in one line before anything starts."""

from __future__ import annotations

import email
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import test_typed as t
import vm_typed
from test_docs import ROOT

VM_TEST = ROOT / "setup" / "vm-test.sh"


def test_it_types_the_vm_pages_commands_from_the_registry():
    typed, in_vm = vm_typed.vm_commands()
    block = [t.without_comment(c.text) for c in typed + in_vm]
    assert block == ["sudo lab", "python -m benchmarks.lab list", "exit", "sudo lab up 2",
                     "ssh -L 8089:127.0.0.1:8089 USER@VM_ADDRESS"]
    assert all(c.where.startswith("docs/laptops.md:") for c in typed + in_vm)
    # what make vm-test runs to type them
    assert '"$PY" tests/lab/vm_typed.py --ssh-config' in VM_TEST.read_text()


def test_the_tunnel_is_the_pages_with_this_vm_and_a_free_laptop_port():
    argv = vm_typed.tunnel_argv("ssh -L 8089:127.0.0.1:8089 USER@VM_ADDRESS", "CFG", "vm", 5555)
    assert argv == ["ssh", "-tt", "-L", "5555:127.0.0.1:8089", "-F", "CFG", "vm"]


def parts(user_data: str) -> list[str]:
    message = email.message_from_string(user_data)
    return [p.get_payload(decode=True).decode() for p in message.walk()
            if p.get_content_type() == "text/cloud-config"]


def room_inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    apt = tmp_path / "apt" / "etc" / "apt" / "sources.list.d"
    apt.mkdir(parents=True)
    (apt / "debian.sources").write_text("Types: deb\nURIs: http://mirror.example/debian\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    pip = tmp_path / "pip-config"
    pip.write_text(f"global.extra-index-url='file:///opt/pypi/simple'\n"
                   f"global.cert='{tmp_path / 'ca.crt'}'\n:env:.find-links='/opt/wheels'\n")
    key = tmp_path / "key.pub"
    key.write_text("ssh-ed25519 AAAA test\n")
    return tmp_path / "apt", pip, key


def test_the_user_data_is_the_cloud_init_file_with_lab_repo_set_and_a_rooms_part(tmp_path):
    apt, pip, key = room_inputs(tmp_path)
    (tmp_path / "www").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "setup.vm_user_data", "--repo", "git://10.0.2.2:9/lab.git",
         "--key", str(key), "--apt-tree", str(apt), "--pip-config", str(pip),
         "--served-at", "http://10.0.2.2:8", "--www", str(tmp_path / "www")],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    first, room = parts(out)
    original = (ROOT / "setup" / "cloud-init.yaml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, first.splitlines(), strict=True) if a != b]
    assert changed == [("      LAB_REPO=", "      LAB_REPO=git://10.0.2.2:9/lab.git")]
    config = json.loads(room.removeprefix("#cloud-config\n"))
    assert set(config) == {"merge_how", "ssh_authorized_keys", "write_files"}
    assert config["ssh_authorized_keys"] == ["ssh-ed25519 AAAA test"]
    files = {f["path"]: f["content"] for f in config["write_files"]}
    assert files["/etc/apt/sources.list.d/debian.sources"].startswith("Types: deb\nURIs: http://mirror")
    assert files["/etc/pip.conf"].splitlines() == [
        "[global]", "extra-index-url = http://10.0.2.2:8/opt/pypi/simple/",
        "cert = /etc/ftl-room/cert", "find-links = http://10.0.2.2:8/opt/wheels/",
        "trusted-host = 10.0.2.2"]
    assert files["/etc/ftl-room/cert"] == "-----BEGIN CERTIFICATE-----\n"
    assert os.readlink(tmp_path / "www" / "opt" / "pypi") == "/opt/pypi"


def test_its_short_lab_is_lab_readys_and_leaves_out_what_image_test_leaves_out():
    text = VM_TEST.read_text()
    stages, duration = re.search(r"LAB_STAGES=(\S+) LAB_DURATION=(\S+)", text).groups()
    lab_ready = (ROOT / "setup" / "lab-ready.sh").read_text()
    assert f"sh setup/ready-lab.sh {stages} {duration}" in lab_ready
    speed = re.search(r"^SPEED_CHECKS=(\S+)", text, re.M)[1]
    assert f"SPEED_CHECKS={speed}" in (ROOT / "setup" / "image-test.sh").read_text()


def test_make_vm_test_is_the_developers_not_the_suites():
    makefile = (ROOT / "Makefile").read_text()
    # from a fresh clone: the lab's venv first (the typing reads the registry with it)
    assert "vm-test: install\n\tsh setup/vm-test.sh\n" in makefile
    assert "neither `make test` nor CI runs it" in " ".join(makefile.split())
    assert "vm-test" not in (ROOT / ".ci" / "run").read_text()
    # so the page says when it last passed, and at which commit
    laptops = " ".join((ROOT / "docs" / "laptops.md").read_text().split())
    assert re.search(r"\*\*It last passed on \d{4}-\d\d-\d\d\*\* \(commit [0-9a-f]{7}", laptops)


def refused(env: dict[str, str]) -> str:
    """vm-test.sh's one line when it refuses (killed, with all it started, if it does not)."""
    proc = subprocess.Popen(["sh", str(VM_TEST)], env={**os.environ, **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("vm-test.sh did not refuse within 10 s")
    assert proc.returncode == 2 and out == "", (out, err)
    return err


@pytest.mark.skipif(os.geteuid() != 0, reason="vm-test.sh first refuses a non-root user")
def test_bad_input_is_one_line_before_anything_starts():
    assert refused({"VM_ACCEL": "hvf"}) == "vm-test: VM_ACCEL=hvf: tcg (the default) or kvm\n"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert refused({"VM_SSH_PORT": str(port)}) == (
            f"vm-test: port {port} on 127.0.0.1 is taken: VM_SSH_PORT=another\n")
