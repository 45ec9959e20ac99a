"""The exercises and the stage registry agree, and every command in them works.

Every stage of benchmarks/stages.py has its lab (`exercises/NN-slug.md`),
and the lab starts it with `python -m benchmarks.lab up KEY` and shows the
server command the registry runs, character for character. Change a stage
without its lab and these tests fail. Every `python -m benchmarks.X ...` in
the exercises and the README (fenced or inline) parses with that module's
real argument parser, every Locust command names user classes that exist,
every relative link resolves, and the index lists the labs in order.

Commands and output. The docs use two fences: ```bash holds commands to paste
(no `$ ` prompt, `#` comments allowed) and ```text holds what a command
printed (captured output: never run, never parsed). Any other fence, a bare
``` included, fails test_fences_are_commands_or_output until it says which it
is. Every command of every ```bash block (backslash continuations, open quotes and
here-documents taken with it) is classified by RULES, below, as

- RUN: safe unattended here, with no stage up and no root side effect. The
  test runs it with bash from the repository root, the venv first on PATH,
  the `export`s of its block before it, /tmp/ in it replaced by the test's own
  temporary folder, and a timeout; it must exit as the lab shows (0 unless
  the rule says) and print something unless the rule says it may not.
- PARSE: needs a stage, root namespaces, minutes of load or a terminal. The
  test parses it: `bash -n`, then the real parser of what it calls
  (PARSERS: a benchmark module's build_parser(), the Makefile's targets and
  variables, Locust's own parser in a process of its own, gunicorn's, the
  app's click commands, wrk's flags) and, through `lab exec --`, Locust's.

A command no rule names fails test_command_is_classified_and_parses until it
is classified in RULES. Nothing is started but the RUN commands, and each is
waited for (or killed with its process group).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import click
import flask.cli
import gunicorn.config
import pytest

from app import seed
from benchmarks import lab, stages

RUN, PARSE = "RUN", "PARSE"


class Rule(NamedTuple):
    pattern: str  # re.match'ed against the command, leading `time` and VAR=value left out
    verdict: str  # RUN or PARSE
    why: str
    status: int = 0  # RUN: the exit status the docs show
    prints: bool = True  # RUN: it must print something
    shows: str = ""  # RUN: text its output must hold
    port: int | None = None  # RUN: a 127.0.0.1 port it binds (skipped while another holds it)


# How each command of a ```bash block is checked: the first rule that matches wins.
# RUN only what is safe to run here unattended, with no stage up and no root side effect.
RULES = [
    # the lab and its tools
    Rule(r"python -m benchmarks\.lab list$", RUN, "prints the stage registry; starts nothing"),
    Rule(r"python -m benchmarks(\.\w+)+ (-h|--help)$", RUN, "prints help; starts nothing"),
    Rule(r"sudo lab\b", PARSE,
         "a VM's way into the lab (setup/lab.sh, which lab-ready installs): test_typed.py "
         "types it as the VM's user; `sudo lab up 2` holds a stage up"),
    Rule(r"exit(\s+#.*)?$", PARSE, "leaves the shell `sudo lab` opened (test_typed.py types it)"),
    Rule(r"python -m benchmarks\.lab ", PARSE,
         "up, run, book and exec need root namespaces, a stage and load; clean deletes "
         "namespaces and processes of dead labs and restores host sysctls"),
    Rule(r"python -m benchmarks\.studies\."
         r"(fd_limit|sweep|crosscheck|omission|slow_call|capacity)\b", PARSE,
         "minutes of load on root network namespaces"),
    Rule(r"python -m benchmarks\.studies\.(instruments|recycling)\b", PARSE,
         "minutes of a core busy: a redis-server, the app in-process or gunicorn under "
         "load (lab 17's studies)"),
    Rule(r"python -m benchmarks\.studies\.floor\b", PARSE,
         "starts a redis-server and keeps a core busy for about a minute; --into rewrites "
         "a lab run's report"),
    Rule(r"python -m benchmarks\.analysis\.report ", PARSE,
         "reads a lab run's folder (results/ is not in git) and rewrites its report.md"),
    Rule(r"python - .*<<", PARSE, "a script over the CSVs of a run made before"),
    Rule(r"python -c \"from pathlib import Path; from benchmarks.sandbox import nginx_conf; ", RUN,
         "renders a stage's Nginx config into a folder under /tmp"),
    Rule(r"make ", PARSE, "setup installs packages; test, lab and book run for minutes"),
    Rule(r"sh setup/python314-root\.sh results/python-roots$", PARSE,
         "debootstraps a root of Debian forky (a minute, the mirror): test_capacity's "
         "rooted run uses the one it makes"),
    Rule(r"sh setup/ready-lab\.sh [\w,]+ \d+$", PARSE,
         "a short strict lab (make lab ... LAB_ARGS=--strict): a minute of load"),
    # servers and load
    Rule(r"(gunicorn |flask --app app run )", PARSE,
         "the server command a stage runs, shown beside `lab up`, which starts it"),
    Rule(r"flask --app app seed-users ", PARSE, "writes users into a Redis that runs"),
    Rule(r"locust .*--(list|help)\b", RUN, "lists the user classes or prints help; no load"),
    Rule(r"(locust|wrk|siege)\b", PARSE, "load"),
    Rule(r"(jupyter|ssh) ", PARSE, "interactive: a notebook server, a tunnel from a laptop"),
    Rule(r"(gzip|gunzip) ", PARSE, "packs or unpacks an image made before"),
    Rule(r"(docker|podman|limactl|multipass) ", PARSE,
         "the attendee's laptop: a container or a VM (make image-test tries the image here)"),
    Rule(r"apt-get update && apt-get install -y [a-z0-9 .-]+$", PARSE,
         "installs system packages (a new WSL Debian's first step)"),
    Rule(r"git clone \S+ /lab && cd /lab$", PARSE, "clones the room's repository"),
    Rule(r"mkdir -p results$", PARSE, "the folder a container's results are mounted from"),
    Rule(r"(sudo )?sysctl -w ", PARSE, "would change the machine's sysctls"),
    Rule(r"sysctl (-n )?[a-z][\w.]*( [a-z][\w.]*)*$", RUN, "reads sysctls (`=` would write)"),
    Rule(r"sleep ", PARSE, "waits out TIME_WAIT: a minute of nothing"),
    Rule(r"taskset -c \d+ timeout \d+ sh -c 'while :; do :; done' &$", PARSE,
         "a busy neighbour on a core for 100 s (lab 00): it would slow the suite"),
    # reading
    Rule(r"\w+=\$\(", PARSE, "finds a process that another terminal runs"),
    Rule(r"pkill -9 -P \$\(pgrep ", PARSE, "kills a worker of a stage another terminal runs"),
    Rule(r"(ls|cat|grep|head|tail|sed -n)\b.*(/proc/\$|\bresults/)", PARSE,
         "reads a process another terminal runs, or what a lab run wrote"),
    Rule(r"(ls|cat|grep|head|tail) [^>]*$", RUN, "reads /proc, /etc or the repository"),
    Rule(r"ip netns list$", RUN, "lists network namespaces (none when no lab runs)",
         prints=False),
    # the shell
    # (parsed, not run: run alone they cannot fail; the commands after them get their
    # effect, the venv's PATH and the exported variables, when they run)
    Rule(r"source \.venv(-notebooks)?/bin/activate$", PARSE, "puts the venv first on PATH"),
    Rule(r"export \w+=", PARSE, "sets variables for the commands after it"),
    Rule(r"bash -c 'ulimit -n 64; ", RUN, "fails on purpose: EMFILE in its own subshell",
         status=1, shows="Too many open files"),
    Rule(r"bash -c 'ulimit -n 1024; nginx -t ", RUN,
         "checks the config rendered just before it (nginx -t binds its listen address)",
         port=8080),
    Rule(r"bash -c '(echo|ulimit) ", RUN, "changes the limits of its own subshell only"),
]

ROOT = stages.ROOT
EXERCISES = ROOT / "exercises"
INDEX = EXERCISES / "README.md"
LAYOUT = ROOT / "docs" / "results.md"  # the repository's layout table
LOCUSTFILE = ROOT / "benchmarks" / "chat.py"
LAB_NAME = re.compile(r"^(\d\d)-[a-z0-9-]+\.md$")
# Written by another author in parallel: the index may list them before they exist.
PENDING: set[str] = set()  # exercises listed in the index but not written yet

PARENTS = [s for s in stages.STAGES if s.twin_of is None]
TWINS = [s for s in stages.STAGES if s.twin_of is not None]


# stages taught in a lab named otherwise than after their slug: stage 9 in lab 15, where
# the floor says what a server costs and stage 9 tries a cheaper one
STAGE_LABS = {"9": "how-close-to-the-floor"}


def lab_path(stage: stages.Stage) -> Path:
    """exercises/01-builtin.md for stage 0, 10-scale-out.md for stage 6: the lab named
    after the stage's slug (`NN-<slug>.md`), or as STAGE_LABS says."""
    slug = STAGE_LABS.get(stage.key, stage.slug)
    found = sorted(EXERCISES.glob(f"[0-9][0-9]-{slug}.md"))
    return found[0] if found else EXERCISES / f"NN-{slug}.md"


FAILURES_LAB = "when-it-breaks"  # the lab of every failure twin (stages.FAILURES)


# sets whose twins are taught in a lab of their own, not in their base stage's
SET_LABS = {"failures": FAILURES_LAB, "today": "todays-stack", "realtime": "how-many-users",
            "watched": "what-watching-costs"}


def twin_lab(twin: stages.Stage) -> Path:
    """The lab that shows a twin: its base stage's, or its set's own (lab 11 for a
    failure twin, lab 13 for today's workers)."""
    if twin.set_name in SET_LABS:
        slug = SET_LABS[twin.set_name]
        found = sorted(EXERCISES.glob(f"[0-9][0-9]-{slug}.md"))
        return found[0] if found else EXERCISES / f"NN-{slug}.md"
    return lab_path(stages.get(twin.twin_of))


def lab_files() -> list[Path]:
    return sorted(p for p in EXERCISES.glob("*.md") if LAB_NAME.match(p.name))


def pages() -> list[Path]:
    """The reference pages the README links: docs/*.md."""
    return sorted((ROOT / "docs").glob("*.md"))


def docs() -> list[Path]:
    """Every Markdown file these checks read: the README, its pages, the index, the labs
    and the instructor's page."""
    return [p for p in (ROOT / "README.md", *pages(), INDEX, *lab_files(),
                        EXERCISES / "INSTRUCTOR.md") if p.exists()]


def rel(path: Path) -> str:
    """README.md, exercises/01-builtin.md, ... (a file elsewhere: its own path)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


FENCE = re.compile(r"^```(\w*)\s*$")


def snippets(path: Path) -> list[tuple[int, str, str]]:
    """(line, kind, text): each logical line of a fenced block (kind = the fence's
    language; backslash continuations joined) and each inline code span of the
    prose (kind = "inline"; a span may wrap onto the next line)."""
    found = []
    prose: list[tuple[int, str]] = []
    lang = None
    pending, pending_line = "", 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence:
            lang = None if lang is not None else (fence.group(1) or "plain")
            continue
        if lang is None:
            prose.append((n, line))
            continue
        if not pending:
            pending_line = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        found.append((pending_line, lang, pending + line))
        pending = ""
    text = "\n".join(line for _, line in prose)
    starts = [n for n, _ in prose]
    for m in re.finditer(r"`([^`]+)`", text):
        found.append((starts[text.count("\n", 0, m.start())], "inline",
                      m.group(1).replace("\n", " ")))
    return found


def split_command(text: str) -> list[str]:
    """argv of the first command in `text` (up to a pipe, `&&`, `;` or a redirect)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    argv = []
    for token in lexer:
        if token and all(c in lexer.punctuation_chars for c in token):
            break
        argv.append(token)
    return argv


MODULE_CALL = re.compile(r"python -m benchmarks\.(\w+(?:\.\w+)*)\b")


def module_commands() -> list[tuple[str, str, list[str]]]:
    """(where, module, argv after `python -m benchmarks.MODULE`) for every such command
    outside ```bash blocks (prose, captured output): those of a bash block are checked
    with the block (test_command_is_classified_and_parses)."""
    found = []
    for path in docs():
        for n, kind, text in snippets(path):
            if kind == "bash":
                continue
            for m in MODULE_CALL.finditer(text):
                argv = split_command(text[m.end():])
                found.append((f"{rel(path)}:{n}", m.group(1), argv))
    return found


def locust_commands() -> list[tuple[str, str, list[str]]]:
    """(where, kind, argv) for every `locust -f benchmarks/chat.py ...` (or kv.py) command."""
    found = []
    for path in docs():
        for n, kind, text in snippets(path):
            for m in re.finditer(r"(?<![\w/.-])locust -f benchmarks/(chat|kv)\.py\b", text):
                found.append((f"{rel(path)}:{n}", kind, split_command(text[m.start():])))
    return found


def user_classes(locustfile: Path = LOCUSTFILE) -> set[str]:
    """Concrete Locust user classes of a locustfile, read with ast (importing
    locust here would monkey-patch this process with gevent)."""
    tree = ast.parse(locustfile.read_text())
    bases, abstract = {}, set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
            for item in node.body:
                if (isinstance(item, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "abstract" for t in item.targets)
                        and isinstance(item.value, ast.Constant) and item.value.value is True):
                    abstract.add(node.name)

    def is_user(name: str) -> bool:
        return any(b in ("User", "HttpUser", "FastHttpUser") or (b in bases and is_user(b))
                   for b in bases.get(name, []))

    return {name for name in bases if is_user(name) and name not in abstract}


def index_entries() -> list[str]:
    """Lab file names the index links to, in the order it lists them."""
    names = re.findall(r"\]\(([^)\s#]+)\)", INDEX.read_text())
    return [n for n in names if LAB_NAME.match(n)]


def is_placeholder(word: str) -> bool:
    """KEY, STAGE, ... in a command that shows a pattern rather than a value."""
    return word.isupper()


# --- every stage has its lab, and the lab runs what the registry runs ---


@pytest.mark.parametrize("stage", PARENTS, ids=lambda s: s.key)
def test_every_stage_has_its_lab(stage):
    path = lab_path(stage)
    assert path.exists(), f"stage {stage.key} ({stage.slug}) has no {rel(path)}"


@pytest.mark.parametrize("stage", PARENTS, ids=lambda s: s.key)
def test_lab_starts_its_stage(stage):
    text = lab_path(stage).read_text()
    assert re.search(rf"python -m benchmarks\.lab up {re.escape(stage.key)}(?![\w-])", text), (
        f"{rel(lab_path(stage))} never says `python -m benchmarks.lab up {stage.key}`")


@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: s.key)
def test_lab_shows_the_server_command_of_the_registry(stage):
    lab = twin_lab(stage) if stage.twin_of else lab_path(stage)
    command = " ".join(stage.server_command())
    assert command in lab.read_text(), (
        f"{rel(lab)} does not show stage {stage.key}'s server command "
        f"as benchmarks/stages.py runs it: {command}")


@pytest.mark.parametrize("stage", [s for s in PARENTS if s.front], ids=lambda s: s.key)
def test_lab_names_its_nginx_config(stage):
    text = lab_path(stage).read_text()
    assert f"nginx/{stage.front}" in text
    # where `lab up` renders the main file and the stage's conf.d file it includes
    # (benchmarks/run/runner.py running_stage + nginx_conf.render)
    assert f"results/up/{stage.dirname}/nginx/nginx.conf" in text
    assert f"results/up/{stage.dirname}/nginx/{stage.front}" in text


@pytest.mark.parametrize("twin", TWINS, ids=lambda s: s.key)
def test_twin_is_in_its_parents_lab(twin):
    text = twin_lab(twin).read_text()
    assert re.search(rf"python -m benchmarks\.lab up {re.escape(twin.key)}(?![\w-])", text), (
        f"{rel(twin_lab(twin))} does not show `python -m benchmarks.lab up {twin.key}`")


# --- commands in the docs are real commands ---


@pytest.mark.parametrize("where,module,argv",
                         [pytest.param(w, m, a, id=w) for w, m, a in module_commands()])
def test_module_command_parses(where, module, argv):
    why = module_problem(module, argv)
    assert not why, (f"{where}: `python -m benchmarks.{module} {shlex.join(argv)}` "
                     f"does not parse: {why}")


def test_docs_have_lab_commands():
    assert len([m for _, m, _ in module_commands() if m == "lab"]) > 20


def test_make_lab_stages_exist():
    for path in docs():
        for m in re.finditer(r"make lab STAGES=(\S+)", path.read_text()):
            value = m.group(1).strip("`")
            if not is_placeholder(value):
                assert stages.select(value), f"{rel(path)}: STAGES={value}"


@pytest.mark.parametrize("where,kind,argv",
                         [pytest.param(w, k, a, id=w) for w, k, a in locust_commands()])
def test_locust_command_names_real_user_classes(where, kind, argv):
    locustfile = ROOT / argv[argv.index("-f") + 1].split(",")[0]
    known = user_classes(locustfile)
    named = [a for a in argv if re.fullmatch(r"[A-Z][a-z]\w*", a)]
    unknown = [a for a in named if a not in known]
    assert not unknown, f"{where}: no user class {unknown} in {rel(locustfile)} ({sorted(known)})"
    if kind == "bash" and where.startswith("exercises/"):
        assert named, f"{where}: name the user classes to run (all three run otherwise)"


def test_user_classes_are_found():
    # chat traffic only in chat.py (`locust -f benchmarks/chat.py` runs no benchmark URL)
    assert user_classes() == {"ChatUser", "SocketIOChatUser"}
    assert user_classes(ROOT / "benchmarks" / "kv.py") == {"KeyValueUser"}


# --- links and the index ---


@pytest.mark.parametrize("path", docs(), ids=rel)
def test_relative_links_resolve(path):
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0]
        resolved = (path.parent / file).resolve()
        if not resolved.exists() and Path(file).name in PENDING:
            continue  # another author's lab, not written yet
        assert resolved.exists(), f"{rel(path)} links to {target}, which does not exist"


def test_index_lists_every_lab_in_order():
    listed = index_entries()
    assert listed == sorted(listed), f"exercises/README.md lists the labs out of order: {listed}"
    assert len(listed) == len(set(listed)), "a lab is listed twice"
    numbers = [int(LAB_NAME.match(n).group(1)) for n in listed]
    assert numbers == list(range(len(numbers))), f"labs are numbered 00, 01, ...: {listed}"
    missing = [p.name for p in lab_files() if p.name not in listed]
    assert not missing, f"exercises/README.md does not list {missing}"


@pytest.mark.parametrize("name", index_entries())
def test_index_entry_exists(name):
    if not (EXERCISES / name).exists() and name in PENDING:
        pytest.skip(f"{name} is being written by another author")
    assert (EXERCISES / name).exists()


# --- every lab has the parts a newcomer relies on ---


@pytest.mark.parametrize("path", lab_files(), ids=lambda p: p.name)
def test_lab_has_next_verification_and_output(path):
    text = path.read_text()
    assert re.search(r"^Next: \[.+\]\(.+\)\s*$", text, re.M), f"{path.name}: no `Next:` link"
    assert re.search(r"^#+ Verification\s*$", text, re.M), f"{path.name}: no Verification section"
    assert re.search(r"^```text\s*$", text, re.M), f"{path.name}: no captured output (```text)"


def test_last_lab_links_back_to_the_index():
    last = EXERCISES / index_entries()[-1]
    if not last.exists():
        pytest.skip(f"{last.name} is not written yet")
    assert re.search(r"^Next: \[.+\]\((README\.md|\./README\.md)\)", last.read_text(), re.M)


@pytest.mark.parametrize("path", lab_files(), ids=lambda p: p.name)
def test_bash_blocks_paste_as_one_unit(path):
    """A continued line is followed by more command, not by the end of the block."""
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines[:-1], 1):
        if line.rstrip().endswith("\\"):
            following = lines[n].strip()
            assert following and not following.startswith("```"), (
                f"{path.name}:{n}: a `\\` continuation runs into the end of its block")


# --- every command of every ```bash block: classified by RULES, then run or parsed ---

COMMAND_FENCES, OUTPUT_FENCES = ("bash",), ("text",)
# what a Windows attendee types into PowerShell (docs/laptops.md): checked on their own
POWERSHELL_FENCES = ("powershell",)
POWERSHELL_TOOLS = ("wsl", "docker", "multipass")
LOCUST_ARGV = Path(__file__).with_name("locust_argv.py")  # Locust's parser, in its own process
RUN_TIMEOUT = 60  # seconds, per RUN command
PREFIX = re.compile(r"^(?:time\s+|[A-Z_][A-Z0-9_]*=[^\s$'\"]*\s+)*")  # time, VAR=value
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


@dataclass(frozen=True)
class Command:
    """One command of a ```bash block, as an attendee pastes it."""

    where: str  # file:line of its first line
    block: str  # file:line of its block's opening fence
    text: str  # continuations joined; an open quote's or a here-document's lines kept
    env: tuple[tuple[str, str], ...] = ()  # what the `export`s before it in its block set

    @property
    def bare(self) -> str:
        """What a rule sees: the command without a leading `time` or VAR=value."""
        return PREFIX.sub("", self.text)

    @property
    def argv(self) -> list[str]:
        return split_command(self.bare)

    @property
    def environment(self) -> dict[str, str]:
        """Its block's exports and its own VAR=value prefixes."""
        own = re.findall(r"([A-Z_][A-Z0-9_]*)=(\S*)\s", PREFIX.match(self.text).group(0))
        return {**dict(self.env), **dict(own)}


def fenced_blocks(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line of the opening fence, its language, the lines inside). A block indented in
    a list item loses that indentation."""
    found, current, indent = [], None, 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence and current is None:
            current, indent = (n, fence.group(1), []), len(line) - len(line.lstrip())
        elif fence:
            found.append(current)
            current = None
        elif current is not None:
            current[2].append(line[indent:] if not line[:indent].strip() else line.lstrip())
    return found


def closed(text: str) -> bool:
    """No quote is left open (an open one goes on on the next line)."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def exported(text: str) -> dict[str, str]:
    """NAME=value of an `export` line."""
    if not text.startswith("export "):
        return {}
    return dict(w.split("=", 1) for w in shlex.split(text)[1:] if "=" in w)


def block_commands(path: Path, fence: int, lines: list[str]) -> list[Command]:
    """The commands of one ```bash block; blank and comment lines left out."""
    commands, env, i = [], {}, 0
    while i < len(lines):
        start, text = i, lines[i].rstrip()
        while i + 1 < len(lines) and (text.endswith("\\") or not closed(text)):
            i += 1
            text = (text[:-1] + " " + lines[i].strip() if text.endswith("\\")
                    else text + "\n" + lines[i]).rstrip()
        heredoc = HEREDOC.search(text)
        while heredoc and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
            if lines[i].strip() == heredoc.group(2):
                break
        i += 1
        if text.strip() and not text.lstrip().startswith("#"):
            commands.append(Command(f"{rel(path)}:{fence + 1 + start}", f"{rel(path)}:{fence}",
                                    text.strip(), tuple(env.items())))
            env.update(exported(text.strip()))
    return commands


def doc_commands(path: Path) -> list[Command]:
    return [c for n, lang, lines in fenced_blocks(path) if lang in COMMAND_FENCES
            for c in block_commands(path, n, lines)]


def unlabelled_fences(path: Path) -> list[str]:
    """Blocks that do not say whether they hold commands or output."""
    return [f"{rel(path)}:{n}: ```{lang}" for n, lang, _ in fenced_blocks(path)
            if lang not in COMMAND_FENCES + OUTPUT_FENCES + POWERSHELL_FENCES]


def classify(command: Command) -> Rule | None:
    return next((r for r in RULES if re.match(r.pattern, command.bare)), None)


# PARSE: how each command is parsed (after `bash -n`). "" means it parses.


def parsed(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | str:
    """parser.parse_args(argv), or the error it exits with ("" for --help)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            return parser.parse_args(argv)
    except SystemExit as e:
        return "" if e.code == 0 else out.getvalue().strip().splitlines()[-1]


def module_problem(name: str, argv: list[str]) -> str:
    """`python -m benchmarks.NAME ARGV` (NAME may be dotted: `studies.sweep`) against
    that module's own build_parser()."""
    path = f"benchmarks/{name.replace('.', '/')}.py"
    try:
        spec = importlib.util.find_spec(f"benchmarks.{name}")
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        return f"there is no {path}"
    if argv in (["--help"], ["-h"]):
        # run, not imported: a locustfile (benchmarks.chat) would gevent-patch this process
        done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        return "" if done.returncode == 0 and done.stdout else done.stderr[-500:] or "no help"
    # a package's command is its __main__, which runs only as a program
    command = f"benchmarks.{name}.__main__" if spec.submodule_search_locations else \
        f"benchmarks.{name}"
    module = importlib.import_module(command)
    if not hasattr(module, "build_parser"):
        return f"{path} has no build_parser() to check its arguments with"
    args = parsed(module.build_parser(), argv)
    if isinstance(args, str):
        return args
    return lab_problem(args, argv) if name == "lab" else ""


def lab_problem(args: argparse.Namespace, argv: list[str]) -> str:
    """What the lab's parser lets through and the lab then refuses."""
    try:
        if args.cmd == "up" and not is_placeholder(args.stage):
            stages.get(args.stage)
        if args.cmd == "run" and not is_placeholder(args.stages):
            stages.select(args.stages)
    except KeyError as e:
        return e.args[0]
    if args.cmd == "exec" and args.command[:1] != ["--"] and not is_placeholder(
            " ".join(argv[1:])):
        return "write `exec -- CMD` (as lab.py's help does)"
    return ""


def script_problem(command: Command) -> str:
    """A `python - <<'EOF'` script compiles."""
    body = "\n".join(command.text.splitlines()[1:-1])
    try:
        compile(body, command.where, "exec")
    except SyntaxError as e:
        return f"its script, line {e.lineno}: {e.msg}"
    return ""


def make_problem(words: list[str]) -> str:
    """Targets the Makefile has, variables it reads, stages that exist."""
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", text, re.M))
    variables = set(re.findall(r"^(\w+) \?=", text, re.M))
    for word in words:
        name, is_variable, value = word.partition("=")
        if is_variable and name not in variables:
            return f"the Makefile reads no {name} (it reads {', '.join(sorted(variables))})"
        if not is_variable and word not in targets:
            return f"the Makefile has no target {word} ({', '.join(sorted(targets))})"
        if name == "STAGES" and is_variable and not is_placeholder(value):
            try:
                stages.select(value)
            except KeyError as e:
                return e.args[0]
    return ""


def gunicorn_problem(words: list[str]) -> str:
    """gunicorn's own parser, a config file that exists (`-c`, from the repository
    root, where the docs run it) and an app module that exists."""
    args = parsed(gunicorn.config.Config().parser(), words)
    if isinstance(args, str):
        return args
    if args.config and not (ROOT / args.config).is_file():
        return f"-c {args.config}: no such file"
    missing = [a for a in args.args if importlib.util.find_spec(a.split(":")[0]) is None]
    return f"no module {missing}" if missing else ""


FLASK_COMMANDS = {"run": flask.cli.run_command, "seed-users": seed.seed_users_command}


def flask_problem(words: list[str]) -> str:
    """`flask --app app CMD ...`: the click command's own parser."""
    if words[:1] == ["--app"]:
        if importlib.util.find_spec(words[1]) is None:
            return f"--app {words[1]}: no such module"
        words = words[2:]
    if not words or words[0] not in FLASK_COMMANDS:
        return f"not a command of the app's CLI: {words[:1]} ({', '.join(FLASK_COMMANDS)})"
    try:
        FLASK_COMMANDS[words[0]].make_context(f"flask {words[0]}", words[1:])
    except click.ClickException as e:
        return e.format_message()
    return ""


WRK_VALUES = {"-c": r"\d+[kKmMgG]?", "--connections": r"\d+[kKmMgG]?", "-t": r"\d+",
              "--threads": r"\d+", "-d": r"\d+[smhd]?", "--duration": r"\d+[smhd]?",
              "--timeout": r"\d+[smh]?", "-s": r".+\.lua", "--script": r".+\.lua",
              "-H": r".+", "--header": r".+"}


def wrk_problem(words: list[str]) -> str:
    """wrk's flags (`wrk --help`), each with a value of the right form, and one URL."""
    words, urls = list(words), []
    while words:
        word = words.pop(0)
        joined = re.fullmatch(r"(-[a-zA-Z])(.+)", word)  # -t2, -c100
        if joined and joined.group(1) in WRK_VALUES:
            word, words = joined.group(1), [joined.group(2), *words]
        if word in ("--latency", "-v", "--version"):
            continue
        if word in WRK_VALUES:
            value = words.pop(0) if words else ""
            if not re.fullmatch(WRK_VALUES[word], value):
                return f"wrk {word} {value!r}: expected {WRK_VALUES[word]}"
        elif re.match(r"https?://", word):
            urls.append(word)
        else:
            return f"wrk has no option {word}"
    return "" if len(urls) == 1 else f"wrk takes one URL, not {urls}"


def sleep_problem(words: list[str]) -> str:
    ok = len(words) == 1 and re.fullmatch(r"\d+(\.\d+)?[smhd]?", words[0])
    return "" if ok else f"sleep takes one duration, not {words}"


def sudo_problem(words: list[str]) -> str:
    """`sudo lab ARGS`: setup/lab.sh runs `python -m benchmarks.lab ARGS`, so the lab's
    parser; `sudo lab` alone opens a shell."""
    if words[:1] != ["lab"]:
        return f"the pages give `sudo lab` only, not sudo {' '.join(words)}"
    return module_problem("lab", words[1:]) if words[1:] else ""


PARSERS = {"make": make_problem, "gunicorn": gunicorn_problem, "flask": flask_problem,
           "wrk": wrk_problem, "sleep": sleep_problem, "sudo": sudo_problem}


def shell_syntax(text: str) -> str:
    """bash's own parse of the command (`bash -n`)."""
    out = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
    return out.stderr.strip() if out.returncode else ""


def parse_problem(command: Command) -> str:
    """Why a PARSE command would not run as written, or "" (Locust: check_locust)."""
    argv = command.argv
    if argv[:2] == ["python", "-m"] and argv[2].startswith("benchmarks."):
        return module_problem(argv[2].removeprefix("benchmarks."), argv[3:])
    if argv[:2] == ["python", "-"]:
        return script_problem(command)
    return PARSERS[argv[0]](argv[1:]) if argv and argv[0] in PARSERS else ""


def locust_argv(command: Command) -> list[str] | None:
    """Locust's arguments when the command runs Locust, itself or through `lab exec`."""
    argv = command.argv
    if argv[:4] == ["python", "-m", "benchmarks.lab", "exec"]:
        args = parsed(lab.build_parser(), argv[3:])
        if isinstance(args, str):
            return None  # module_problem reports it
        argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    return argv[1:] if argv[:1] == ["locust"] else None


def locustfiles(argv: list[str]) -> str:
    for flag in ("-f", "--locustfile"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1]
    return ""  # pyproject.toml's


def check_locust(commands: list[Command]) -> dict[str, str]:
    """{where: why Locust refuses it ("" when it does not)} for every command that runs
    Locust, from Locust's own parser (tests/lab/locust_argv.py), one process per
    locustfile set and environment: a step shape reads its STEP_* variables."""
    groups = defaultdict(list)
    for c in commands:
        argv = locust_argv(c)
        if argv is not None:
            groups[(locustfiles(argv), tuple(sorted(c.environment.items())))].append((c, argv))
    found = {}
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    for (_files, env), calls in groups.items():
        argvs = json.dumps([argv for _, argv in calls])
        out = subprocess.run([sys.executable, str(LOCUST_ARGV)], cwd=ROOT, input=argvs,
                             env={**base, **dict(env)}, capture_output=True, text=True,
                             timeout=RUN_TIMEOUT)
        answers = json.loads(out.stdout) if out.returncode == 0 else [out.stderr] * len(calls)
        found.update({c.where: why for (c, _), why in zip(calls, answers, strict=True)})
    return found


def problem(command: Command, refused_by_locust: dict[str, str]) -> str:
    """What is wrong with a command of the docs, or "": no rule classifies it, or
    (PARSE) it does not parse."""
    rule = classify(command)
    if rule is None:
        return (f"{command.where}: `{command.text}`: no rule says whether to RUN or PARSE it; "
                "classify it in RULES at the top of tests/lab/test_docs.py")
    if rule.verdict == RUN:
        return ""  # test_run_commands_work runs it
    why = (shell_syntax(command.text) or parse_problem(command)
           or refused_by_locust.get(command.where, ""))
    return f"{command.where}: `{command.text}` does not parse: {why}" if why else ""


# RUN: run as pasted, in a process group of its own


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def run(command: Command, tmp: Path) -> tuple[int, str]:
    """(exit status, stdout and stderr) of the command, run with bash as pasted; killed,
    with everything it started, after RUN_TIMEOUT."""
    env = {**os.environ, **command.environment,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", "-c", command.text.replace("/tmp/", f"{tmp}/")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -1, f"{out}\n(killed after {RUN_TIMEOUT} s)"
    return proc.returncode, out


COMMANDS = [c for path in docs() for c in doc_commands(path)]


def run_blocks() -> list[tuple[str, list[tuple[Command, Rule]]]]:
    """(block, its RUN commands in order) for each block that has one: run one after
    another, as pasted, so a command finds what the one before it wrote."""
    blocks = defaultdict(list)
    for c in COMMANDS:
        rule = classify(c)
        if rule and rule.verdict == RUN:
            blocks[c.block].append((c, rule))
    return list(blocks.items())


@pytest.fixture(scope="module")
def refused_by_locust():
    return check_locust(COMMANDS)


@pytest.mark.parametrize("path", docs(), ids=rel)
def test_fences_are_commands_or_output(path):
    assert not unlabelled_fences(path), (
        f"label these ```bash (commands) or ```text (output): {unlabelled_fences(path)}")


def test_powershell_blocks_paste_into_powershell():
    """One command a line (PowerShell's continuation is a backtick, not `\\`), only the
    Windows tools the pages name, no cmd-only or bash-only syntax, and no current
    folder: the clone is in WSL, PowerShell's folder a Windows one."""
    found = 0
    for path in docs():
        for n, lang, lines in fenced_blocks(path):
            if lang not in POWERSHELL_FENCES:
                continue
            for line in filter(str.strip, lines):
                found += 1
                where = f"{rel(path)}:{n}: {line}"
                assert line.split()[0] in POWERSHELL_TOOLS, where
                assert not line.rstrip().endswith(("\\", "`")), where
                # the clone is in WSL (docs/laptops.md): PowerShell's folder is Windows'
                assert "PWD" not in line and "%CD%" not in line, where
    assert found >= 2


# A port mapping of Locust's UI (no login) that says no address: `docker run -p 8089:8089`
# publishes it on every interface of the laptop, the room's network included.
OPEN_MAPPING = re.compile(r"(?:-p|--publish)[ =](?!127\.0\.0\.1:)[\d.:]*8089\b")


def mapping_files() -> list[Path]:
    """Where a reader or a maintainer finds a `docker run` line: the docs, the
    Containerfile, the dev container, setup/ and the lab's code."""
    return [*docs(), ROOT / "Containerfile", ROOT / ".devcontainer" / "devcontainer.json",
            *sorted(p for p in (ROOT / "setup").iterdir() if p.is_file()),
            *sorted((ROOT / "benchmarks").rglob("*.py"))]


def test_every_port_mapping_of_the_ui_is_on_the_laptops_loopback():
    """`-p 127.0.0.1:8089:8089`, never `-p 8089:8089`, wherever a mapping is written."""
    found = [f"{rel(path)}:{n}: {line.strip()}" for path in mapping_files()
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if OPEN_MAPPING.search(line)]
    assert not found, found
    assert OPEN_MAPPING.search("docker run -p 8089:8089 x")
    assert OPEN_MAPPING.search("docker run --publish=0.0.0.0:8089:8089 x")
    assert not OPEN_MAPPING.search("docker run -p 127.0.0.1:8089:8089 x")


@pytest.mark.parametrize("command", [pytest.param(c, id=c.where) for c in COMMANDS])
def test_command_is_classified_and_parses(command, refused_by_locust):
    why = problem(command, refused_by_locust)
    assert not why, why


@pytest.mark.parametrize("block,runs", [pytest.param(b, r, id=b) for b, r in run_blocks()])
def test_run_commands_work(block, runs, tmp_path):
    for command, rule in runs:
        if rule.port and port_taken(rule.port):
            pytest.skip(f"{command.where}: 127.0.0.1:{rule.port} is held by another process")
        status, out = run(command, tmp_path)
        said = f"{command.where}: `{command.text}`"
        assert status == rule.status, (
            f"{said} exited {status}, the docs show {rule.status}:\n{out[-3000:]}")
        assert out.strip() or not rule.prints, f"{said} printed nothing"
        assert rule.shows in out, f"{said} did not print {rule.shows!r}:\n{out[-3000:]}"


def test_docs_have_commands_of_both_kinds():
    verdicts = [classify(c).verdict for c in COMMANDS if classify(c)]
    assert verdicts.count(RUN) >= 10 and verdicts.count(PARSE) > 100, verdicts


def test_unknown_and_broken_commands_are_reported(tmp_path):
    doc = tmp_path / "lab.md"
    doc.write_text("\n".join([
        "```bash",
        "frobnicate --all",                                              # 2: unknown
        "python -m benchmarks.lab up 2 --no-such-flag",                  # 3
        "python -m benchmarks.lab up 99",                                # 4
        "make lab STAGES=98",                                            # 5
        "python -m benchmarks.lab exec -- locust -f benchmarks/chat.py -t soon ChatUser",
        "locust -f benchmarks/kv.py --headless -u 5 ChatUser",           # 7
        "wrk -t2 -c10 -z 5 http://198.18.0.30:8000/kv/1",                # 8
        "python -m benchmarks.studies.sweep --workers 0",                # 9
        "gunicorn -c gunicorn/no-such.conf.py -b 127.0.0.1:8000 app.wsgi:app",  # 10
        "wrk -t2 -c100 -d30s --latency http://198.18.0.30:8000/kv/1",    # 11: fine
        "python -m benchmarks.lab exec -- locust --headless -u 20 -r 20 -t 10s",  # 12: fine
        "```",
        "```console",
        "$ python -m benchmarks.lab list",
        "```",
    ]) + "\n")
    commands = doc_commands(doc)
    refused = check_locust(commands)
    found = [problem(c, refused) for c in commands]
    assert found[0].startswith(f"{doc}:2: `frobnicate --all`: no rule"), found[0]
    expected = {3: "unrecognized arguments: --no-such-flag", 4: "unknown stage '99'",
                5: "unknown stage '98'", 6: "argument -t/--run-time", 7: "no user class",
                8: "wrk has no option -z", 9: "worker counts must be integers >= 1",
                10: "-c gunicorn/no-such.conf.py: no such file"}
    for line, why in expected.items():
        assert f"{doc}:{line}: " in found[line - 2] and why in found[line - 2], found[line - 2]
    assert found[-2:] == ["", ""]
    assert unlabelled_fences(doc) == [f"{doc}:14: ```console"]


def test_docs_name_every_package_make_setup_installs():
    """README and lab 00 list what `make setup` installs: the Makefile's SYSTEM_TOOLS,
    BROWSER_TOOLS and METRICS_TOOLS."""
    lines = [ln for ln in (ROOT / "Makefile").read_text().splitlines()
             if ln.startswith(("SYSTEM_TOOLS :=", "BROWSER_TOOLS :=", "METRICS_TOOLS :="))]
    packages = [pair.split(":")[1] for ln in lines for pair in ln.split(":=", 1)[1].split()]
    assert len(lines) == 3 and len(packages) >= 13, packages
    for path in (ROOT / "README.md", EXERCISES / "00-setup.md"):
        text = path.read_text()
        missing = [p for p in packages if f"`{p}`" not in text]
        assert not missing, f"{rel(path)} does not name {missing}"


def test_layout_names_every_module_of_benchmarks():
    """The layout table (docs/results.md): a row per folder of benchmarks/, naming each of
    its modules and sub-folders, so a newcomer finds every file from the README."""
    text = LAYOUT.read_text()
    layout = text[text.index("## Layout"):]
    rows = dict(re.findall(r"^\| `(benchmarks/[\w/]*)` \| (.*) \|$", layout, re.M))
    folders = [ROOT / "benchmarks", *sorted(
        p for p in (ROOT / "benchmarks").iterdir()
        if p.is_dir() and (p / "__init__.py").exists())]
    for folder in folders:
        row = rows.get(rel(folder) + "/")
        assert row is not None, f"{rel(LAYOUT)}'s layout has no row for {rel(folder)}/"
        names = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
        names += [p.name + "/" for p in folder.iterdir()
                  if p.is_dir() and p.name != "__pycache__" and folder.name != "benchmarks"]
        missing = sorted(n for n in names if f"`{n}`" not in row)
        assert not missing, f"{rel(LAYOUT)}'s layout row for {rel(folder)}/ lacks {missing}"



def test_layout_names_every_config_file():
    """The layout rows of gunicorn/, nginx/ and sysctl/ name every file in them."""
    rows = dict(re.findall(r"^\| `(\w+/)` \| (.*) \|$", LAYOUT.read_text(), re.M))
    for folder in ("gunicorn", "nginx", "sysctl"):
        files = [p.relative_to(ROOT / folder).as_posix()
                 for p in (ROOT / folder).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]  # gunicorn's, after a run
        missing = sorted(f for f in files if f"`{f}`" not in rows[folder + "/"])
        assert not missing, f"{rel(LAYOUT)}'s row for {folder}/ does not name {missing}"


README_MAX_LINES = 250


def test_the_readme_is_a_front_door():
    """At most 250 lines; it links every docs/ page and every lab, so nothing moved out of
    it is lost."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    unlinked = [rel(p) for p in (*pages(), *lab_files(), EXERCISES / "INSTRUCTOR.md")
                if f"]({rel(p)})" not in text]
    assert not unlinked, f"README.md does not link {unlinked}"
    assert len(pages()) >= 5


LAB_MAX_WORDS = 3000  # a slot of the day: reference (a run's tables, derivations) lives in docs/


def words(path: Path) -> int:
    """Words as `wc -w` counts them in a UTF-8 locale: runs of non-whitespace."""
    return len(path.read_text().split())


def test_every_lab_fits_its_slot():
    """No lab over 3,000 words (`wc -w exercises/[0-9]*.md`)."""
    over = {p.name: words(p) for p in sorted(EXERCISES.glob("[0-9]*.md"))
            if words(p) > LAB_MAX_WORDS}
    assert not over, f"over {LAB_MAX_WORDS:,} words (move reference to docs/): {over}"


def test_words_are_counted_as_wc_counts_them():
    labs = sorted(EXERCISES.glob("[0-9]*.md"))
    done = subprocess.run(["wc", "-w", *map(str, labs)], capture_output=True, text=True,
                          check=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    counted = [int(line.split()[0]) for line in done.stdout.splitlines()[:len(labs)]]
    assert counted == [words(p) for p in labs]
