"""The pages' commands as a reader types them: README.md, docs/laptops.md, docs/image.md
and lab 00.

REGISTRY, below, lists every command of those pages' command blocks (its trailing
comment left out), page by page, with one of:

- Typed(reader): typed here, as written, into one bash per page and reader, in the
  page's order, as into a terminal (a command that opens a shell, `sudo lab`, reads
  the lines typed after it). The reader is who the page speaks to (READERS): root in
  the clone, WSL's root, or a VM's own user, whose `sudo` is Debian's (env_reset,
  secure_path) and whose `lab` is setup/lab.sh as lab-ready installs it. Its exit
  status and what it prints are checked, and a ```text block after a block whose
  commands are all typed is that block's output: each of its lines must be printed,
  in order (test_doc_outputs.in_order).
- RunBy(runner): run as typed, verbatim, by a heavier test or by CI (`file` or
  `file::function`); the runner must still hold it.
- NotHere(why): not run here as typed (Windows, macOS, a container runtime, a VM,
  the network, minutes of load).
- InVM(why): typed as written by `make vm-test` in a real VM booted from
  setup/cloud-init.yaml (tests/lab/vm_typed.py), which types the commands a VM's user
  types here (Typed("a VM's user")) there too; run by the developer, not in `make test`.

A command a page gains or changes and REGISTRY does not list fails
test_the_registry_lists_every_command_of_the_pages, as does one REGISTRY lists that
no page gives any more: a page that changes a command changes what is tested.
Every typed command is cheap (no load, no install, no VM), so this runs in `make test`
and, as root, in the image's `make test-fast`.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import skip_unless_a_git_clone
from test_box import SECURE_PATH, lab_command, sudo_env
from test_doc_outputs import in_order, outputs
from test_docs import ROOT, Command, block_commands, closed, fenced_blocks, rel

PAGES = [ROOT / "README.md", ROOT / "docs" / "laptops.md", ROOT / "docs" / "image.md",
         ROOT / "exercises" / "00-setup.md"]
LANGS = ("bash", "sh", "shell", "powershell", "console")  # a reader types these blocks
TIMEOUT = 60  # seconds, per reader's session


@dataclass(frozen=True)
class Typed:
    reader: str  # a key of READERS
    status: int = 0
    shows: str = ""  # text its output holds


@dataclass(frozen=True)
class RunBy:
    runner: str  # "path" (a line of it is the command) or "path::function"


@dataclass(frozen=True)
class NotHere:
    why: str


@dataclass(frozen=True)
class InVM:
    """Typed as written by `make vm-test` (tests/lab/vm_typed.py) in a VM booted from
    setup/cloud-init.yaml, as its default user over SSH; not in `make test`: the VM
    boots under emulation for most of an hour."""

    why: str
    shows: str = ""  # text its output holds


WINDOWS = NotHere("Windows' PowerShell")
INSTALLS = NotHere("installs from the network (a new WSL Debian's packages)")
CONTAINER = NotHere("Docker or Podman on the laptop: no container runtime starts here; "
                    "make image-test builds the image and enters it (docs/image.md)")
LIMA = NotHere("a Lima VM on a Mac: no VM boots here")
MULTIPASS = NotHere("a Multipass VM: no VM boots here (test_box.py runs the "
                    "FTL_UI_ADDRESS line's sed, as root, on a copy of the file)")
TUNNEL = NotHere("an SSH tunnel from a laptop to a box or a VM: none here")
MAIN_LINE = NotHere("the main line, 8 stages of load with screenshots (about 8 minutes); "
                    "make image-test SUITE=trixie runs it with DURATION=10 LAB_ARGS=--strict")
LOAD = NotHere("stages of load, a minute or more: test_lab.py's full run runs the stages "
               "with options of its own")
HOLDS_A_STAGE = NotHere("holds a stage up until Ctrl-C: test_box.py, test_ui.py and "
                        "make image-test's ui step start one with --results of their own")
NEEDS_A_STAGE = NotHere("reads a stage that `lab up` holds up in another terminal")
AFTER_A_RUN = NotHere("reads or rewrites what a lab run wrote in results/ (not in git)")
CI = RunBy(".ci/run")  # CI's entry point, on a fresh checkout

REGISTRY = {
    "README.md": {
        "make lab": MAIN_LINE,
        "make test": CI,
        "make lab STAGES=4,5 DURATION=20 USERS=40": LOAD,
    },
    "docs/laptops.md": {
        "wsl --install -d Debian": WINDOWS,
        "wsl -d Debian -u root": WINDOWS,
        "apt-get update && apt-get install -y git make python3 python3-venv": INSTALLS,
        "git clone REPOSITORY_URL /lab && cd /lab": Typed("WSL's root", shows="Cloning into"),
        "make lab": MAIN_LINE,
        "docker build -f Containerfile -t flask-tuning-lab .": CONTAINER,
        # Docker Desktop's readers type it in the WSL clone; a Mac's, in theirs
        "mkdir -p results": Typed("WSL's root"),
        'docker run --rm -it --privileged -p 127.0.0.1:8089:8089 -v "$PWD/results:/lab/results" '
        "flask-tuning-lab make lab": CONTAINER,
        'docker run --rm -it --privileged -p 127.0.0.1:8089:8089 -v "$PWD/results:/lab/results" '
        "flask-tuning-lab python -m benchmarks.lab up 2": CONTAINER,
        "sudo lab": Typed("a VM's user", shows="lab: a root shell in"),
        "python -m benchmarks.lab list": Typed("a VM's user", shows="main: make lab STAGES=main"),
        "exit": Typed("a VM's user"),
        "sudo lab up 2": InVM("holds a stage up until Ctrl-C: make vm-test types it in the "
                              "ssh -L session below, reaches the UI through the tunnel, then "
                              "Ctrl-C", shows="Locust's web UI (Sockets tab): "
                              "http://127.0.0.1:8089"),
        "limactl start --name=ftl --cpus=2 --memory=4 --disk=20 template://debian-12": LIMA,
        "limactl shell ftl sudo sh -c 'apt-get update && apt-get install -y make git "
        "python3-venv'": LIMA,
        'limactl shell ftl sudo install -m 0755 "$PWD/setup/lab-ready.sh" '
        "/usr/local/sbin/lab-ready": LIMA,
        'limactl shell ftl sudo lab-ready "$PWD"': LIMA,
        "limactl shell ftl sudo make -C /lab lab": LIMA,
        "multipass launch 24.04 --name ftl --cpus 2 --memory 4G --disk 20G --timeout 1800 "
        "--cloud-init setup/cloud-init.yaml": MULTIPASS,
        "multipass exec ftl -- cloud-init status --wait": MULTIPASS,
        "multipass transfer --recursive . ftl:/home/ubuntu/flask-tuning-lab": MULTIPASS,
        "multipass exec ftl -- sudo sed -i 's/^FTL_UI_ADDRESS=.*/FTL_UI_ADDRESS=0.0.0.0/' "
        "/etc/flask-tuning-lab.conf": MULTIPASS,
        "multipass exec ftl -- sudo lab-ready /home/ubuntu/flask-tuning-lab": MULTIPASS,
        "multipass exec ftl -- sudo make -C /lab lab": MULTIPASS,
        "ssh -L 8089:127.0.0.1:8089 USER@VM_ADDRESS": InVM(
            "the tunnel to a room's VM: make vm-test opens it to its VM (the laptop's side "
            "on a free port: 8089 may be taken on this shared box)"),
    },
    "docs/image.md": {
        "docker build -f Containerfile -t flask-tuning-lab .": CONTAINER,
        "podman build -f Containerfile -t flask-tuning-lab .": CONTAINER,
        'docker run --rm -it --privileged -p 127.0.0.1:8089:8089 -v "$PWD/results:/lab/results" '
        "flask-tuning-lab": CONTAINER,
        "make lab STAGES=0,2 DURATION=10": NotHere(
            "two stages of load with screenshots: make image-test runs them in the image "
            "as sh setup/ready-lab.sh 0,2 10 (10 s each, --strict)"),
        "python -m benchmarks.lab up 0": HOLDS_A_STAGE,
    },
    "exercises/00-setup.md": {
        "make setup": NotHere("installs what is missing (apt-get, pip): the network; "
                              "make test runs it first, as a prerequisite"),
        "make test": CI,
        "source .venv/bin/activate": Typed("root in the clone"),
        "python -m benchmarks.lab list": Typed("root in the clone"),
        "python -m benchmarks.lab up 0": HOLDS_A_STAGE,
        "python -m benchmarks.lab exec --host app -- ss -s": NEEDS_A_STAGE,
        "ssh -L 8089:127.0.0.1:8089 user@box": TUNNEL,
        "make lab STAGES=0": LOAD,
        "python -m benchmarks.analysis.report results/latest": AFTER_A_RUN,
        "python -m benchmarks.lab run --stages 2 --duration 10 --no-screenshots": LOAD,
        "taskset -c 1 timeout 100 sh -c 'while :; do :; done' &": NotHere(
            "a busy loop on a core for 100 s: it would slow the suite"),
        "sed -n '/## What else ran/,/## Repeats\\|## Plots/p' results/latest/report.md":
            AFTER_A_RUN,
        "python -m benchmarks.lab up 4 --sandbox host": HOLDS_A_STAGE,
        "ip netns list": Typed("root in the clone"),
        "python -m benchmarks.lab clean": NotHere(
            "deletes what any dead lab left on the machine: in the suite it would race the "
            "tests that kill a lab on purpose (test_lab_stops.py runs it after theirs)"),
        "ls results/up.json": Typed("root in the clone", status=2),
        "python -m benchmarks.lab exec -- ss -s": Typed("root in the clone", status=1),
    },
}


# --- the pages' commands ---


def without_comment(text: str) -> str:
    """The command as the registry lists it: its trailing `# ...` comment left out, runs
    of spaces as one (a `\\` continuation joined leaves two)."""
    words = shlex.split(text, comments=True) if closed(text) else None
    for m in re.finditer(r"\s+#", text):
        if closed(text[:m.start()]) and shlex.split(text[:m.start()]) == words:
            text = text[:m.start()]
            break
    return " ".join(text.split())


def page_commands(path: Path) -> list[Command]:
    """Every command of the page's command blocks (a console block's `$ ` lines)."""
    found = []
    for n, lang, lines in fenced_blocks(path):
        if lang == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        if lang in LANGS:
            found += block_commands(path, n, lines)
    return found


def unlisted_and_stale(pages: list[Path], registry: dict) -> tuple[list[str], list[str]]:
    """(commands of the pages the registry does not list, listed ones no page gives)."""
    given = {(rel(p), without_comment(c.text)): c.where for p in pages for c in page_commands(p)}
    listed = {(page, text) for page, entries in registry.items() for text in entries}
    unlisted = [f"{where}: `{text}`" for (page, text), where in given.items()
                if (page, text) not in listed]
    stale = [f"{page}: `{text}`" for page, text in sorted(listed - set(given))]
    return unlisted, stale


def entry(command: Command) -> Typed | RunBy | NotHere | None:
    """Its registry entry (None: test_the_registry_lists_every_command_of_the_pages fails)."""
    return REGISTRY.get(command.where.split(":")[0], {}).get(without_comment(command.text))


# --- who types them ---


@dataclass
class Shell:
    """A reader's terminal: where it starts, its environment, what it has defined, and
    what stands for the page's placeholders and folders."""

    cwd: Path
    env: dict[str, str]
    prelude: str = ""
    stands_for: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ("bash",)  # the terminal's shell (vm_typed.py: bash over ssh)

    def fill(self, text: str) -> str:
        """In one pass: in the image this clone is /lab itself."""
        if not self.stands_for:
            return text
        words = "|".join(map(re.escape, self.stands_for))
        return re.sub(rf"(?<![\w/.-])({words})(?![\w-])",
                      lambda m: self.stands_for[m[1]], text)


DEBIAN_USER_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"  # /etc/profile


def login_env(home: Path, path: str) -> dict[str, str]:
    """A login shell's environment, nothing of the suite's (no venv, no PYTHONPATH)."""
    home.mkdir(exist_ok=True)
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb"}


def root_in_the_clone(tmp: Path) -> Shell:
    """README and lab 00: "from the repository folder, as root" (root's PATH is
    secure_path's folders on Debian)."""
    return Shell(ROOT, login_env(tmp / "root", SECURE_PATH))


def wsl_root(tmp: Path) -> Shell:
    """docs/laptops.md: WSL's Debian, as root, cloning to /lab: here this clone, to a
    folder of the test's."""
    skip_unless_a_git_clone()
    return Shell(tmp / "root", login_env(tmp / "root", SECURE_PATH),
                 stands_for={"REPOSITORY_URL": str(ROOT), "/lab": str(tmp / "lab")})


def vm_user(tmp: Path) -> Shell:
    """docs/laptops.md: the VM's own user after lab-ready: `lab` (setup/lab.sh, its /lab
    this clone) where lab-ready installs it, reached by `sudo` as Debian's does it for
    root (env_reset, secure_path: test_box.sudo_env). Here the user is root already, so
    sudo is a shell function: no sudo here, and a real one's secure_path would not hold
    the test's folder."""
    if os.geteuid() != 0:
        pytest.skip("`lab` runs as root only (sudo, on a VM)")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sudo_env(lab_command(tmp)).items())
    return Shell(tmp / "user", login_env(tmp / "user", DEBIAN_USER_PATH),
                 prelude=f'sudo() {{ env -i {env} "$@"; }}\n')


READERS = {"root in the clone": root_in_the_clone, "WSL's root": wsl_root,
           "a VM's user": vm_user}
MARK = "@@typed-status@@"


def typed(shell: Shell, commands: list[Command], timeout: float = TIMEOUT
          ) -> list[tuple[int, str]]:
    """(exit status, output) of each command, typed one after another into one bash,
    stdin a pipe: bash reads it a line at a time, so a shell a command opens reads the
    lines after it, as from a terminal. Killed with all it started after TIMEOUT."""
    script = shell.prelude + "".join(f"{shell.fill(c.text)}\necho {MARK} $?\n"
                                     for c in commands)
    proc = subprocess.Popen(list(shell.argv), cwd=shell.cwd, env=shell.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(script, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0] + f"\n(killed after {timeout} s)"
    done = [(int(status), text) for text, status in re.findall(rf"(.*?){MARK} (\d+)\n", out,
                                                              re.S)]
    assert len(done) == len(commands), f"the session stopped early:\n{out[-3000:]}"
    return done


def sessions() -> list[tuple[str, str, list[Command]]]:
    """(page, reader, the page's commands that reader types, in order)."""
    found = {}
    for path in PAGES:
        for c in page_commands(path):
            if isinstance(e := entry(c), Typed):
                found.setdefault((rel(path), e.reader), []).append(c)
    return [(page, reader, commands) for (page, reader), commands in found.items()]


# --- the tests ---


def test_the_registry_lists_every_command_of_the_pages():
    unlisted, stale = unlisted_and_stale(PAGES, REGISTRY)
    assert not unlisted, ("commands of the pages that REGISTRY in tests/lab/test_typed.py "
                          "does not list (type them, name what runs them, or say why not):\n"
                          + "\n".join(unlisted))
    assert not stale, "REGISTRY lists commands no page gives any more:\n" + "\n".join(stale)


@pytest.mark.parametrize("page,reader,commands",
                         [pytest.param(*s, id=f"{s[0]} as {s[1]}") for s in sessions()])
def test_typed_as_the_page_gives_it(page, reader, commands, tmp_path):
    if any(c.text == "ls results/up.json" for c in commands) and \
            (ROOT / "results" / "up.json").exists():
        pytest.skip("a stage is up from this clone: lab 00 types this with none up")
    done = dict(zip((c.where for c in commands),
                    typed(READERS[reader](tmp_path), commands), strict=True))
    for c in commands:
        status, out = done[c.where]
        said = f"{c.where}: `{c.text}`, typed as {reader}"
        assert status == entry(c).status, f"{said} exited {status}:\n{out[-3000:]}"
        assert entry(c).shows in out, f"{said} did not print {entry(c).shows!r}:\n{out}"
    for where, _, block, captured in outputs(ROOT / page):
        if all(c.where in done for c in block):
            printed = "".join(done[c.where][1] for c in block).splitlines()
            missing = in_order(captured, printed)
            assert not missing, f"{where}: typed, it no longer prints {missing!r}:\n" + \
                "\n".join(printed)


def runs_verbatim(runner: str, command: str) -> bool:
    """Whether the runner holds the command as written: a line of a script, or a string
    of a test function."""
    path, _, function = runner.partition("::")
    text = (ROOT / path).read_text()
    if not function:
        return command in (line.strip() for line in text.splitlines())
    node = next((n for n in ast.walk(ast.parse(text))
                 if isinstance(n, ast.FunctionDef) and n.name == function), None)
    return node is not None and any(isinstance(s, ast.Constant) and s.value == command
                                    for s in ast.walk(node))


def test_what_another_runs_is_still_run_there_as_typed():
    run_by = [(page, text, e.runner) for page, entries in REGISTRY.items()
              for text, e in entries.items() if isinstance(e, RunBy)]
    assert run_by
    missing = [f"{page}: `{text}` is not in {runner}" for page, text, runner in run_by
               if not runs_verbatim(runner, text)]
    assert not missing, missing


def test_every_reader_is_known_and_every_page_has_commands():
    readers = {e.reader for entries in REGISTRY.values() for e in entries.values()
               if isinstance(e, Typed)}
    assert readers == set(READERS)
    assert all(page_commands(p) for p in PAGES)


def test_a_changed_command_is_unlisted_and_the_old_one_stale(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nmake lab STAGES=0,2   # two stages\nmake tests\n```\n"
                    "```text\nmake nothing\n```\n")
    registry = {rel(page): {"make lab STAGES=0,2": LOAD, "make test": CI}}
    assert unlisted_and_stale([page], registry) == ([f"{page}:3: `make tests`"],
                                                     [f"{page}: `make test`"])
    assert not runs_verbatim(".ci/run", "make tests")


def test_the_page_that_says_what_was_tried_points_here():
    text = " ".join((ROOT / "docs" / "laptops.md").read_text().split())
    assert "The pages' commands, as typed** (`tests/lab/test_typed.py`" in text
    assert "`REGISTRY`" in text and set(REGISTRY) == {rel(p) for p in PAGES}
