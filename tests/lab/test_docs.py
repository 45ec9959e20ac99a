"""The exercises and the stage registry agree.

Every stage of benchmarks/stages.py has its lab (`exercises/NN-slug.md`),
and the lab starts it with `python -m benchmarks.lab up KEY` and shows the
server command the registry runs, character for character. Change a stage
without its lab and these tests fail. Every `python -m benchmarks.lab ...`
line in the exercises and the README parses with the lab's real argument
parser, every Locust command names user classes that exist, every relative
link resolves, and the index lists the labs in order.

Reads files only: nothing is started.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from benchmarks import lab, stages

ROOT = stages.ROOT
EXERCISES = ROOT / "exercises"
INDEX = EXERCISES / "README.md"
LOCUSTFILE = ROOT / "benchmarks" / "chat.py"
LAB_NAME = re.compile(r"^(\d\d)-[a-z0-9-]+\.md$")
# Written by another author in parallel: the index may list them before they exist.
PENDING: set[str] = set()  # exercises listed in the index but not written yet

PARENTS = [s for s in stages.STAGES if s.twin_of is None]
TWINS = [s for s in stages.STAGES if s.twin_of is not None]


def lab_path(stage: stages.Stage) -> Path:
    """exercises/01-builtin.md for stage 0, ... (the number is the key plus one)."""
    return EXERCISES / f"{int(stage.key) + 1:02d}-{stage.slug}.md"


def lab_files() -> list[Path]:
    return sorted(p for p in EXERCISES.glob("*.md") if LAB_NAME.match(p.name))


def docs() -> list[Path]:
    """Every Markdown file these checks read: the README, the index, the labs."""
    return [p for p in (ROOT / "README.md", INDEX, *lab_files()) if p.exists()]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


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


LAB_CALL = re.compile(r"python -m benchmarks\.lab\b")


def lab_commands() -> list[tuple[str, list[str]]]:
    """(where, argv after `python -m benchmarks.lab`) for every such command."""
    found = []
    for path in docs():
        for n, _kind, text in snippets(path):
            for m in LAB_CALL.finditer(text):
                argv = split_command(text[m.end():])
                found.append((f"{rel(path)}:{n}", argv))
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
    parent = stages.get(stage.twin_of) if stage.twin_of else stage
    command = " ".join(stage.server_command())
    assert command in lab_path(parent).read_text(), (
        f"{rel(lab_path(parent))} does not show stage {stage.key}'s server command "
        f"as benchmarks/stages.py runs it: {command}")


@pytest.mark.parametrize("stage", [s for s in PARENTS if s.front], ids=lambda s: s.key)
def test_lab_names_its_nginx_config(stage):
    text = lab_path(stage).read_text()
    assert f"nginx/{stage.front}" in text
    # where `lab up` renders it (benchmarks/runner.py running_stage + nginx_conf.render)
    assert f"results/up/{stage.dirname}/nginx/nginx.conf" in text


@pytest.mark.parametrize("twin", TWINS, ids=lambda s: s.key)
def test_twin_is_in_its_parents_lab(twin):
    parent = stages.get(twin.twin_of)
    text = lab_path(parent).read_text()
    assert re.search(rf"python -m benchmarks\.lab up {re.escape(twin.key)}(?![\w-])", text), (
        f"{rel(lab_path(parent))} does not show `python -m benchmarks.lab up {twin.key}`")


# --- commands in the docs are real commands ---


@pytest.mark.parametrize("where,argv", [pytest.param(w, a, id=w) for w, a in lab_commands()])
def test_lab_command_parses(where, argv):
    try:
        args = lab.build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: `python -m benchmarks.lab {shlex.join(argv)}` does not parse")
    if args.cmd == "up" and not is_placeholder(args.stage):
        stages.get(args.stage)  # KeyError names the known stages
    if args.cmd == "run" and not is_placeholder(args.stages):
        assert stages.select(args.stages), where
    if args.cmd == "exec" and not is_placeholder(" ".join(argv[1:])):
        assert args.command[:1] == ["--"], f"{where}: write `exec -- CMD` (as lab.py's help does)"


def test_docs_have_lab_commands():
    assert len(lab_commands()) > 50


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
