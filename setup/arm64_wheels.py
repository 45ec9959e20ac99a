"""Does every locked package install on Linux aarch64 (an arm64 laptop's VM or image,
Debian 12: CPython 3.11.2, glibc 2.36)? Asks the package index this box is configured
with (setup/package_sources.py), prints one line per package:

    .venv/bin/python -m setup.arm64_wheels requirements.lock requirements-eventlet.lock

the wheel that fits, or "sdist only: builds with gcc and Python headers" (the image's
build-essential and python3-dev; not tried here: nothing here runs arm64), or "no aarch64
wheel and no sdist". Exit 1 only for the last. A package the lock keeps for other
platforms or Pythons (a marker false on that box) is listed with its marker, not asked.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

from packaging.markers import Marker
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)

from setup import locks, package_sources

PYTHON = (3, 11)
# Debian 12 arm64: glibc 2.36, so manylinux_2_17 ... manylinux_2_36 fit; musllinux is
# for Alpine's musl and does not.
PLATFORMS = [f"manylinux_2_{minor}_aarch64" for minor in range(36, 16, -1)] + [
    "manylinux2014_aarch64", "linux_aarch64"]
# best first: cp311-cp311, then abi3, then py3-none-any (the order pip prefers them)
TAGS = [*cpython_tags(PYTHON, ["cp311"], PLATFORMS), *compatible_tags(PYTHON, "cp311",
                                                                        PLATFORMS)]
RANK = {tag: i for i, tag in enumerate(TAGS)}
BOX = {"python_version": "3.11", "python_full_version": "3.11.2", "implementation_version":
       "3.11.2", "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
       "platform_machine": "aarch64", "implementation_name": "cpython",
       "platform_python_implementation": "CPython"}
SDIST = "sdist only: builds with gcc and Python headers"
NOTHING = "no aarch64 wheel and no sdist"
# PEP 691's JSON form, else PEP 503's HTML page (what an older mirror serves)
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
TIMEOUT_S = 20


def best_wheel(filenames: list[str]) -> str | None:
    """The wheel of these that pip would pick on the box, or None."""
    ranked = []
    for name in filenames:
        try:
            tags = parse_wheel_filename(name)[3]
        except InvalidWheelFilename:
            continue
        fits = [RANK[t] for t in tags if t in RANK]
        if fits:
            ranked.append((min(fits), name))
    return min(ranked)[1] if ranked else None


def verdict(filenames: list[str]) -> str:
    """One release's files -> what the box installs: a wheel's name, SDIST or NOTHING."""
    wheel = best_wheel(filenames)
    if wheel:
        return wheel
    return SDIST if any(n.endswith((".tar.gz", ".zip")) for n in filenames) else NOTHING


class _Links(HTMLParser):
    """A PEP 503 project page's files: each link's text, and whether it is yanked."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[dict] = []
        self.in_link = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "a":
            self.files.append({"filename": "", "yanked": "data-yanked" in dict(attrs)})
            self.in_link = True

    def handle_endtag(self, tag: str) -> None:
        self.in_link = self.in_link and tag != "a"

    def handle_data(self, data: str) -> None:
        if self.in_link:
            self.files[-1]["filename"] += data.strip()


def project_files(index: str, name: str) -> list[dict]:
    """The files an index lists for a project: [{"filename", "yanked"}, ...]."""
    ask = urllib.request.Request(f"{index.rstrip('/')}/{name}/", headers={"Accept": ACCEPT})
    with urllib.request.urlopen(ask, timeout=TIMEOUT_S) as answer:
        if "json" in answer.headers.get("Content-Type", ""):
            return json.load(answer)["files"]
        page = _Links()
        page.feed(answer.read().decode())
        return page.files


def release_files(index: str, name: str, version: str) -> list[str]:
    """The file names the index has for name==version."""
    wanted = canonicalize_version(version)
    return [f["filename"] for f in project_files(index, name) if not f.get("yanked")
            and file_version(f["filename"]) == wanted]


def file_version(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return canonicalize_version(parse_wheel_filename(filename)[1])
        return canonicalize_version(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def on_the_box(lock_paths: list[Path]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(name, version) the box installs from these locks; "name==version" -> marker of
    those it does not."""
    pins, left_out = set(), {}
    for path in lock_paths:
        for e in locks.entries(path):
            if e["marker"] and not Marker(e["marker"]).evaluate(BOX):
                left_out[f"{e['name']}=={e['version']}"] = e["marker"]
            else:
                pins.add((e["name"], e["version"]))
    return sorted(pins), left_out


def main(argv: list[str]) -> int:
    started = time.monotonic()
    index = package_sources.package_index()  # or one line saying which setting to make
    pins, left_out = on_the_box([Path(a) for a in argv])
    with ThreadPoolExecutor(16) as pool:
        said = list(pool.map(lambda pin: verdict(release_files(index, *pin)), pins))
    lines = {f"{n}=={v}": line for (n, v), line in zip(pins, said, strict=True)}
    lines.update({pin: f"not installed there: {m}" for pin, m in left_out.items()})
    width = max(map(len, lines))
    for pin in sorted(lines):
        print(pin.ljust(width), lines[pin])
    sdists = [n for (n, _), line in zip(pins, said, strict=True) if line == SDIST]
    nothing = sum(line == NOTHING for line in said)
    print(f"arm64: {len(pins)} packages for Linux aarch64, CPython 3.11: "
          f"{len(pins) - len(sdists) - nothing} wheels, {len(sdists)} sdist only "
          f"({', '.join(sdists) or 'none'}), {nothing} with neither; {len(left_out)} lock entries "
          f"for other platforms or Pythons left out; {time.monotonic() - started:.1f} s")
    return 1 if nothing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
