"""Where this box gets packages, read from its own configuration; no host is named here.

- The Python package index: pip's `index-url` (its files, or PIP_INDEX_URL), else uv's
  default index (UV_DEFAULT_INDEX, UV_INDEX_URL, its user or system uv.toml), else the
  default pip itself says it uses (`pip install --help`). `make lock` compiles against it,
  `make arm64-check` asks it.
- pip's settings as one pip.conf (files, then PIP_* variables winning, as pip reads them):
  `make image-test` gives them to the image's build, `make vm-test` to its VM.
- The Debian mirror: DEBIAN_MIRROR, else the first of apt's sources whose path has a
  `debian` folder and whose components have `main` (Debian's archive layout: a mirror or
  a caching proxy keeps it; a third party's repository is not it). debootstrap makes the
  image's base and the VM's disk from it; the sources of that kind are the ones the base
  keeps.

Where the box names none, the command stops with one line saying which setting to make.

    python3 setup/package_sources.py index [--python PY]
    python3 setup/package_sources.py pip-conf [--python PY]
    python3 setup/package_sources.py debian-mirror
    python3 setup/package_sources.py debian-sources   # those files of sources.list.d

Standard library only: it runs on the host's python3, before any venv exists.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

TRUE = {"1", "true", "yes", "on"}
NO_INDEX = ("setup: this box names no Python package index (pip's no-index is set): set "
            "one (`pip config set global.index-url URL`, or PIP_INDEX_URL=URL), then run again")
NO_MIRROR = ("setup: this box's apt names no Debian mirror (a source with a /debian path "
             "and main): set DEBIAN_MIRROR=URL of one, then run again")


# --- pip and uv ---------------------------------------------------------------------------

def pip_settings(config_list: str) -> dict[str, str]:
    """`pip config list` as pip reads it: the files', then PIP_* variables winning."""
    files, env = {}, {}
    for line in config_list.splitlines():
        m = re.match(r"^(:env:|[\w-]+)\.([\w-]+)='(.*)'$", line)
        if m:
            (env if m[1] == ":env:" else files)[m[2]] = m[3]
    return {**files, **env}


def pip_says(python: str, *args: str) -> str | None:
    """What `python -m pip ARGS` prints, None if that Python has no pip."""
    try:
        done = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True,
                              timeout=60)
    except FileNotFoundError:
        return None
    return done.stdout if done.returncode == 0 else None


def box_pip_settings(python: str = sys.executable) -> dict[str, str]:
    """This box's pip settings, as `python`'s pip reads them ({} without a pip)."""
    return pip_settings(pip_says(python, "config", "list") or "")


def pip_conf(settings: dict[str, str]) -> str:
    """Those settings as one pip.conf ("" for none)."""
    lines = [f"{key} = {value}\n" for key, value in settings.items()]
    return "".join(["[global]\n", *lines]) if lines else ""


def uv_config_files() -> list[Path]:
    """uv's user, then system configuration (the first system file found, as uv does)."""
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    system = [Path(d) / "uv" / "uv.toml" for d in
              (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    system.append(Path("/etc/uv/uv.toml"))
    return [home / "uv" / "uv.toml", *[p for p in system if p.is_file()][:1]]


def uv_default_index() -> str | None:
    """The default index uv is configured with: its variables, then its files."""
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if os.environ.get(name):
            return os.environ[name]
    for path in uv_config_files():
        if path.is_file():
            config = tomllib.loads(path.read_text())
            default = [i["url"] for i in config.get("index", []) if i.get("default")]
            found = config.get("pip", {}).get("index-url") or config.get("index-url")
            if default or found:
                return default[0] if default else found
    return None


def package_index(python: str = sys.executable) -> str:
    """The index this box installs Python packages from (see the module's docstring)."""
    settings = box_pip_settings(python)
    # PIP_INDEX_URL is among the settings; read here too for a `python` without pip
    found = settings.get("index-url") or os.environ.get("PIP_INDEX_URL") or uv_default_index()
    if found:
        return found
    if settings.get("no-index", "").lower() in TRUE:
        raise SystemExit(NO_INDEX)
    m = re.search(r"--index-url.*?\(default\s+(\S+?)\)", pip_says(python, "install", "--help")
                  or "", re.S)
    if not m:
        raise SystemExit(f"setup: no Python package index named, and `{python} -m pip` does "
                         "not say its own: set PIP_INDEX_URL=URL, then run again")
    return m[1]


# --- apt ----------------------------------------------------------------------------------

def apt_source_files() -> tuple[Path, list[Path]]:
    """apt's sources.list and its sources.list.d files, where apt-config says they are."""
    where = {"LIST": "/etc/apt/sources.list", "PARTS": "/etc/apt/sources.list.d/"}
    try:
        said = subprocess.run(["apt-config", "shell", "LIST", "Dir::Etc::sourcelist/f",
                               "PARTS", "Dir::Etc::sourceparts/d"], capture_output=True,
                              text=True, timeout=30).stdout
        where.update(re.findall(r"^(LIST|PARTS)='(.*)'$", said, re.M))
    except FileNotFoundError:
        pass
    parts = Path(where["PARTS"])
    found = sorted(p for p in parts.glob("*") if p.suffix in (".list", ".sources"))
    return Path(where["LIST"]), found


def apt_entries(path: Path) -> list[tuple[str, list[str]]]:
    """(URI, components) of each binary (`deb`) source a file enables, in its order."""
    if not path.is_file():
        return []
    text = path.read_text()
    if path.suffix != ".sources":  # one-line style: deb [options] URI suite components
        lines = (re.sub(r"\[[^]]*\]", "", ln.split("#", 1)[0]).split()
                 for ln in text.splitlines())
        return [(w[1], w[3:]) for w in lines if len(w) >= 3 and w[0] == "deb"]
    entries = []
    for stanza in re.split(r"\n\s*\n", text):  # deb822: fields, continued by indented lines
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:  # a field's next line
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        enabled = fields.get("enabled", "yes").lower() != "no"
        if enabled and "deb" in fields.get("types", "").split():
            entries += [(uri, fields.get("components", "").split())
                        for uri in fields.get("uris", "").split()]
    return entries


def debian_archive(uri: str, components: list[str], exact: bool = True) -> bool:
    """Is it Debian's archive (a `debian` folder, main), or beside it (debian-security)?"""
    folders = urlsplit(uri).path.split("/")
    return "main" in components and any(
        f == "debian" if exact else f.startswith("debian") for f in folders)


def debian_mirror(files: list[Path]) -> str:
    """DEBIAN_MIRROR, else the first Debian archive the box's apt names."""
    if os.environ.get("DEBIAN_MIRROR"):
        return os.environ["DEBIAN_MIRROR"]
    for path in files:
        for uri, components in apt_entries(path):
            if debian_archive(uri, components):
                return uri
    raise SystemExit(NO_MIRROR)


def debian_source_files(parts: list[Path]) -> list[Path]:
    """The sources.list.d files that hold Debian's archive (the base has its keys)."""
    return [p for p in parts if any(debian_archive(uri, components, exact=False)
                                    for uri, components in apt_entries(p))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["index", "pip-conf", "debian-mirror", "debian-sources"])
    ap.add_argument("--python", default=sys.executable, help="whose pip to ask")
    a = ap.parse_args()
    if a.what == "index":
        print(package_index(a.python))
    elif a.what == "pip-conf":
        print(pip_conf(box_pip_settings(a.python)), end="")
    elif a.what == "debian-mirror":
        main_list, parts = apt_source_files()
        print(debian_mirror([main_list, *parts]))
    else:
        print("".join(f"{p}\n" for p in debian_source_files(apt_source_files()[1])), end="")


if __name__ == "__main__":
    main()
