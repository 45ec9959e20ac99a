"""A lock (`requirements.lock`, made by `make lock`) against its requirements file
(`requirements.txt`): what the lab asks for against what it gets.

    python3 setup/locks.py requirements.lock requirements-eventlet.lock

exits 1 with one line per stale lock before `make setup` installs anything. Standard
library only: it runs on the Python that makes the venvs, before they exist.

    .venv/bin/python setup/locks.py --leftovers requirements.lock

prints what that venv holds and the lock does not (a package an older requirements
file asked for), for `make setup` to uninstall: plain pip adds, it never removes.

    python3 setup/locks.py --subset requirements.lock requirements-app.txt gunicorn gevent

prints the lock's entries for what a requirements file pins and the packages named,
with everything they need (setup/python314-root.sh: the real-time server's packages).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

FIX = "make lock"
VENV_OWN = {"pip", "setuptools", "wheel"}  # `python -m venv` puts them there, no lock does
# `name[extras]==version ; markers \` at the start of a line
_PIN = re.compile(r"^([A-Za-z0-9][\w.-]*)(?:\[[^\]]*\])?\s*(?:==\s*([^\s;\\]+))?")


def normalize(name: str) -> str:
    """PEP 503: Flask_SocketIO and flask-socketio are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements_of(lock: Path) -> Path:
    """requirements.lock is made from requirements.txt (one definition of the pairing)."""
    return lock.with_suffix(".txt")


def requested(path: Path) -> dict[str, str | None]:
    """name -> pinned version (None if not pinned) of a requirements file, `-r` followed."""
    found: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            found.update(requested(path.parent / line.split(None, 1)[1]))
        elif (m := _PIN.match(line)):
            found[normalize(m[1])] = m[2]
    return found


def entries(lock: Path) -> list[dict]:
    """A lock's packages, as it lists them: name, version, marker ("" for every
    platform), how many hashes, whether a requirements file asked for it (uv's
    `# via -r FILE`), the packages that need it (uv's other `# via` names) and its
    lines as the lock has them."""
    found: list[dict] = []
    for line in lock.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            m = _PIN.match(line)
            marker = line.partition(";")[2].rstrip(" \\").strip()
            found.append({"name": normalize(m[1]), "version": m[2], "marker": marker,
                          "hashes": 0, "asked": False, "via": set(), "lines": []})
        if not found or (line.startswith("#") and not line[:1].isspace()):
            continue  # the lock's header
        found[-1]["lines"].append(line)
        if line.strip().startswith("--hash="):
            found[-1]["hashes"] += 1
        elif re.match(r"\s+#\s+(via\s+)?-r ", line):
            found[-1]["asked"] = True
        elif (via := re.match(r"\s+#\s+(?:via\s+)?([A-Za-z0-9][\w.-]*)\s*$", line)):
            found[-1]["via"].add(normalize(via[1]))
    return found


def locked(lock: Path) -> dict[str, dict]:
    """name -> {"versions": set, "hashes": count} of a lock; a name can be locked at two
    versions, each for its own Pythons (markers)."""
    found: dict[str, dict] = {}
    for e in entries(lock):
        entry = found.setdefault(e["name"], {"versions": set(), "hashes": 0})
        entry["versions"].add(e["version"])
        entry["hashes"] += e["hashes"]
    return found


def problems(lock: Path) -> list[str]:
    """What a lock gets wrong against its requirements file; [] when it agrees."""
    wanted = requirements_of(lock)
    if not lock.exists():
        return [f"{lock.name} is missing: {FIX}"]
    have, asked = locked(lock), requested(wanted)
    said = []
    for name, version in asked.items():
        if name not in have:
            said.append(f"{wanted.name} asks for {name}, {lock.name} lacks it")
        elif version and have[name]["versions"] != {version}:
            got = ", ".join(sorted(have[name]["versions"]))
            said.append(f"{wanted.name} pins {name}=={version}, {lock.name} has {got}")
    said += [f"{lock.name} has no hash for {n}" for n, e in have.items() if not e["hashes"]]
    said += [f"{lock.name} still has {e['name']}, which {wanted.name} no longer asks for"
             for e in entries(lock) if e["asked"] and e["name"] not in asked]
    return said


def subset(lock: Path, wanted: list[str]) -> str:
    """The lock's entries (pins and hashes, as the lock has them) of the packages `wanted`
    names and of every package they need, found through uv's `# via`: a requirements
    file (what it pins) or a package name each. A venv for one server installs it with
    --require-hashes: the lock's pins, and no more of them than that server imports."""
    names = set()
    for item in wanted:
        names |= set(requested(Path(item))) if item.endswith(".txt") else {normalize(item)}
    every = entries(lock)
    unknown = names - {e["name"] for e in every}
    if unknown:
        raise SystemExit(f"setup: {lock.name} has no {', '.join(sorted(unknown))}")
    while True:  # what the chosen need, until nothing more is
        more = {e["name"] for e in every if e["via"] & names} - names
        if not more:
            break
        names |= more
    return "".join(f"{line}\n" for e in every if e["name"] in names for line in e["lines"])


def leftovers(lock: Path) -> list[str]:
    """What the running Python's environment holds that `lock` does not."""
    have = locked(lock).keys() | VENV_OWN
    installed = {normalize(d.metadata["Name"]) for d in metadata.distributions()}
    return sorted(installed - have)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--subset"]:
        print(subset(Path(argv[1]), argv[2:]), end="")
        return 0
    if argv[:1] == ["--leftovers"]:
        print("\n".join(leftovers(Path(argv[1]))))
        return 0
    stale = [p for lock in argv for p in problems(Path(lock))]
    for line in stale:
        print(f"setup: stale lock: {line}: {FIX} (then commit the lock)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
