"""The user-data `make vm-test` gives its VM: setup/cloud-init.yaml, its one line for a
room set (LAB_REPO=, a clone of this checkout that the test serves), and a second
cloud-config part with what a room adds to it: its users' SSH keys (the default
user's), its apt mirror and its pip indexes. The room's part names this box's own
configuration (its apt sources and Acquire settings, as setup/debian-base.sh copies them
into a tree; `pip config list`, files and PIP_* variables, read as
setup/package_sources.py reads them): no host name is typed here.
A local index or wheel folder (file:///opt/pypi/simple, /opt/wheels) is served over
HTTP on the host's loopback, which the VM reaches as 10.0.2.2 (QEMU's user network).

    python3 -m setup.vm_user_data --repo URL --key KEY.pub --apt-tree DIR \\
        --pip-config FILE --served-at http://10.0.2.2:PORT --www DIR > user-data

Stdlib only (the host's python3), run from the repository's root. The room's part is
JSON, which YAML reads as it is.
"""

from __future__ import annotations

import argparse
import json
import re
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path

from setup.package_sources import pip_settings

CLOUD_INIT = Path(__file__).resolve().parent / "cloud-init.yaml"
LAB_REPO = re.compile(r"^(\s*)LAB_REPO=.*$", re.M)
# cloud-init merges a second cloud-config part into the first by replacing its lists:
# this says to append (the room's write_files beside the file's own)
MERGE_HOW = [{"name": "list", "settings": ["append"]},
             {"name": "dict", "settings": ["no_replace", "recurse_list"]}]
ROOM_FILES = "/etc/ftl-room"  # where the room's CA bundle and pip constraints land


def with_repo(text: str, repo: str) -> str:
    """setup/cloud-init.yaml with LAB_REPO= set, its one line for a room."""
    changed, n = LAB_REPO.subn(lambda m: f"{m[1]}LAB_REPO={repo}", text)
    if n != 1:
        raise SystemExit(f"vm_user_data: {n} LAB_REPO= lines in the cloud-init file, not one")
    return changed


def served(value: str, url: str) -> tuple[str, list[str]]:
    """A pip value's local folders (file:///X, /X) as URLs under `url`; the folders."""
    words, folders = [], []
    for word in value.split():
        path = word.removeprefix("file://")
        if path.startswith("/"):
            folders.append(path.removesuffix("/simple").removesuffix("/simple/")
                           if path.rstrip("/").endswith("/simple") else path)
            word = url.rstrip("/") + path + ("/" if not path.endswith("/") else "")
        words.append(word)
    return " ".join(words), folders


def room_pip(settings: dict[str, str], url: str) -> tuple[str, list[dict], list[str]]:
    """(the VM's /etc/pip.conf, files it names, host folders to serve at `url`)."""
    lines, files, folders = ["[global]"], [], []
    for key, value in settings.items():
        if key in ("cert", "constraint"):
            path = f"{ROOM_FILES}/{key}"
            files.append({"path": path, "permissions": "0644",
                          "content": Path(value).read_text()})
            value = path
        elif key in ("index-url", "extra-index-url", "find-links"):
            value, more = served(value, url)
            folders += more
        lines.append(f"{key} = {value}")
    if folders:  # served over plain HTTP on QEMU's user network
        lines.append(f"trusted-host = {url.split('//')[1].split(':')[0]}")
    return "\n".join(lines) + "\n", files, sorted(set(folders))


def apt_files(tree: Path) -> list[dict]:
    """The room's apt configuration: each file of the tree at its path."""
    return [{"path": "/" + str(p.relative_to(tree)), "permissions": "0644",
             "content": p.read_text()} for p in sorted(tree.rglob("*")) if p.is_file()]


def room_part(key: str, apt: list[dict], pip_conf: str, pip_files: list[dict]) -> str:
    """The room's cloud-config: its users' keys (the default user's), apt, pip."""
    config = {"merge_how": MERGE_HOW, "ssh_authorized_keys": [key.strip()],
              "write_files": apt + pip_files + [
                  {"path": "/etc/pip.conf", "permissions": "0644", "content": pip_conf}]}
    return "#cloud-config\n" + json.dumps(config, indent=1) + "\n"


def multipart(parts: list[str]) -> str:
    """cloud-init's multi-part user-data: each part a text/cloud-config."""
    message = MIMEMultipart()
    for n, text in enumerate(parts):
        part = MIMEText(text, "cloud-config", "utf-8")
        part.add_header("Content-Disposition", "attachment", filename=f"part-{n}.yaml")
        message.attach(part)
    return message.as_string()


def link_folders(www: Path, folders: list[str]) -> None:
    """Each served folder at its own path under the web root (a symlink)."""
    for folder in folders:
        link = www / folder.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(folder)


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--repo", "--key", "--apt-tree", "--pip-config", "--served-at", "--www"):
        ap.add_argument(name, required=True)
    a = ap.parse_args()
    pip_conf, pip_files, folders = room_pip(
        pip_settings(Path(a.pip_config).read_text()), a.served_at)
    link_folders(Path(a.www), folders)
    room = room_part(Path(a.key).read_text(), apt_files(Path(a.apt_tree)), pip_conf, pip_files)
    print(multipart([with_repo(CLOUD_INIT.read_text(), a.repo), room]), end="")


if __name__ == "__main__":
    main()
