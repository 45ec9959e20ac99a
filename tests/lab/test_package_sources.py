"""setup/package_sources.py: the Python package index and the Debian mirror are read
from the box's own configuration (pip's, uv's, apt's), in the order pip, uv and apt
read it; where the box names none, one line says which setting to make."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.stages import ROOT
from setup import package_sources as sources

MIRROR = "http://mirror.example/pypi/simple/"


@pytest.fixture
def bare_box(monkeypatch, tmp_path):
    """No pip file, no uv file, no PIP_/UV_ variable: what the test sets is all."""
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")) or name == "DEBIAN_MIRROR":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "system"))
    return tmp_path


def pip_default() -> str:
    """pip's own default index, from pip's code (the function reads pip's help)."""
    from pip._internal.models.index import PyPI
    return PyPI.simple_url


def test_with_nothing_named_the_index_is_the_one_pip_itself_uses(bare_box):
    assert sources.package_index() == pip_default()


def test_pip_names_it_in_a_file_or_a_variable_the_variable_winning(bare_box, monkeypatch):
    conf = bare_box / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {MIRROR}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert sources.package_index() == MIRROR
    monkeypatch.setenv("PIP_INDEX_URL", "http://other.example/simple/")
    assert sources.package_index() == "http://other.example/simple/"


def test_uv_names_it_where_pip_does_not(bare_box, monkeypatch):
    user = bare_box / "user" / "uv"
    user.mkdir(parents=True)
    (user / "uv.toml").write_text(f'[[index]]\nurl = "{MIRROR}"\ndefault = true\n')
    assert sources.package_index() == MIRROR
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://uv.example/simple/")
    assert sources.package_index() == "http://uv.example/simple/"
    monkeypatch.setenv("PIP_INDEX_URL", "http://pip.example/simple/")  # pip installs
    assert sources.package_index() == "http://pip.example/simple/"


def test_a_box_whose_pip_has_no_index_stops_in_one_line(bare_box):
    done = subprocess.run([sys.executable, "setup/package_sources.py", "index"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PIP_NO_INDEX": "1"})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [sources.NO_INDEX]
    assert "PIP_INDEX_URL=URL" in sources.NO_INDEX


def test_pip_conf_is_pips_settings_the_variables_winning():
    said = sources.pip_settings("global.cert='/a.crt'\nglobal.find-links='/w'\n"
                                ":env:.find-links='/opt/wheels'\nnot a setting\n")
    assert said == {"cert": "/a.crt", "find-links": "/opt/wheels"}
    assert sources.pip_conf(said) == "[global]\ncert = /a.crt\nfind-links = /opt/wheels\n"
    assert sources.pip_conf({}) == ""


# --- apt ----------------------------------------------------------------------------------

DEBIAN = """Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""
# a third party's repository that keeps Debian's layout, without Debian's main
DOCKER_LIKE = ("deb [arch=amd64 signed-by=/k.asc] https://vendor.example/linux/debian "
               "bookworm stable\n")
DISABLED = ("Types: deb\nURIs: http://old.example/debian\nSuites: bookworm\n"
            "Components: main\nEnabled: no\n")
UBUNTU = ("deb http://ubuntu.example/ubuntu jammy main\n"
          "# deb http://x.example/debian bookworm main\n")


def apt_tree(root: Path, parts: dict[str, str], sources_list: str = "") -> Path:
    """An apt configuration (APT_CONFIG) whose sources are these files."""
    (root / "etc" / "sources.list.d").mkdir(parents=True)
    (root / "etc" / "sources.list").write_text(sources_list)
    for name, text in parts.items():
        (root / "etc" / "sources.list.d" / name).write_text(text)
    conf = root / "apt.conf"
    conf.write_text(f'Dir::Etc "{root}/etc/";\n')
    return conf


def apt(conf: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "DEBIAN_MIRROR"}
    return subprocess.run([sys.executable, "setup/package_sources.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={**clean, "APT_CONFIG": str(conf), **env})


def test_the_debian_mirror_is_the_first_source_with_debians_layout(tmp_path):
    conf = apt_tree(tmp_path, {"0-vendor.list": DOCKER_LIKE, "1-old.sources": DISABLED,
                               "debian.sources": DEBIAN, "ubuntu.list": UBUNTU})
    assert apt(conf, "debian-mirror").stdout == "http://mirror.example/debian\n"
    assert apt(conf, "debian-sources").stdout == f"{tmp_path}/etc/sources.list.d/debian.sources\n"
    said = apt(conf, "debian-mirror", DEBIAN_MIRROR="http://set.example/debian")
    assert said.stdout == "http://set.example/debian\n"


def test_one_line_sources_list_counts_too(tmp_path):
    line = "deb [signed-by=/k.gpg] http://line.example/debian bookworm main\n"
    conf = apt_tree(tmp_path, {}, line)
    assert apt(conf, "debian-mirror").stdout == "http://line.example/debian\n"
    assert apt(conf, "debian-sources").stdout == ""  # the base keeps sources.list.d's only


def test_a_box_whose_apt_names_no_debian_mirror_stops_in_one_line(tmp_path):
    """debian-base.sh's host_mirror (`make image-test`'s base, `make vm-test`'s disk):
    the setting to make, not a guessed host."""
    conf = apt_tree(tmp_path, {"ubuntu.list": UBUNTU, "vendor.list": DOCKER_LIKE})
    done = subprocess.run(["sh", "-c", "DEBIAN_BASE_FUNCTIONS=1 . setup/debian-base.sh && "
                           "host_mirror"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "APT_CONFIG": str(conf)})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [sources.NO_MIRROR]
    assert "DEBIAN_MIRROR=URL" in sources.NO_MIRROR
