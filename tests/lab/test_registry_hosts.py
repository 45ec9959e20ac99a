"""No tracked file names a package registry's host: the box's own configuration says
where packages come from (setup/package_sources.py), never the code, a doc or a lock.
`git grep` over what is tracked, as a reader would run it; the pattern writes each
host's dots escaped, so that it does not match itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import skip_unless_a_git_clone

from benchmarks.stages import ROOT

# Package registries' hosts (and the hosts their files are served from), as `git grep -E`
# reads them: Python's, Debian's and Ubuntu's archives, container registries, the other
# languages' registries. A host is a whole name: `example.org`'s `le.org` is not matched.
HOSTS = "|".join([
    r"([a-z0-9-]+\.)*pypi\.(org|python\.org)", r"files\.pythonhosted\.org",
    r"download\.pytorch\.org", r"(conda|repo)\.anaconda\.(org|com)",
    r"(deb|ftp|ftp\.[a-z]{2}|security|snapshot|httpredir|archive|cdn-fastly\.deb)\.debian\.org",
    r"([a-z]{2}\.)?(archive|security|ports)\.ubuntu\.com", r"ppa\.launchpad(content)?\.net",
    r"(registry-1\.|index\.|auth\.)?docker\.io", r"quay\.io", r"ghcr\.io", r"([a-z]+\.)?gcr\.io",
    r"registry\.k8s\.io", r"download\.docker\.com", r"packages\.cloud\.google\.com",
    r"deb\.nodesource\.com", r"registry\.(npmjs\.org|yarnpkg\.com)",
    r"(index\.|static\.)?crates\.io", r"(proxy|sum)\.golang\.org", r"rubygems\.org",
    r"repo1?\.maven\.(org|apache\.org)", r"dl-cdn\.alpinelinux\.org",
])
PATTERN = rf"(^|[^a-z0-9-])({HOSTS})([^a-z0-9-]|$)"


def registry_hosts_in(repo: Path) -> list[str]:
    """`path:line: text` of each tracked line that names a registry's host."""
    done = subprocess.run(["git", "grep", "-n", "-I", "-i", "-E", "-e", PATTERN],
                          cwd=repo, capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr  # 1: nothing found
    return done.stdout.splitlines()


def test_no_tracked_file_names_a_registrys_host():
    skip_unless_a_git_clone()
    found = registry_hosts_in(ROOT)
    assert found == [], "\n".join(found[:20])


def test_the_pattern_finds_a_host_in_a_tracked_file_and_not_its_own_spelling(tmp_path):
    """In a repository made here: each way a host is written is found, in code, a URL
    and prose; an escaped pattern, a look-alike and a placeholder are not."""
    dot = "."
    named = [f"https://pypi{dot}org/simple", f"files{dot}pythonhosted{dot}org",
             f"URIs: http://deb{dot}debian{dot}org/debian", f"ftp{dot}de{dot}debian{dot}org",
             f"mirror {dot}: archive{dot}ubuntu{dot}com.", f"FROM docker{dot}io/library/debian",
             f"test{dot}PyPI{dot}org", f"ghcr{dot}io/owner/image"]
    clean = [r"re.search(r'pypi\.org')", f"notpypi{dot}org", f"pypi{dot}organic",
             "http://mirror.example/debian", "file:///opt/pypi/simple", "PyPI's hashes",
             f"wiki{dot}debian{dot}org/Mirrors", "http://10.0.2.2:8/opt/pypi/simple/"]
    for n, line in enumerate(named + clean):
        (tmp_path / f"f{n}.txt").write_text(f"before\n{line}\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\0" + named[0].encode())  # binary: not text
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    found = registry_hosts_in(tmp_path)
    assert sorted(line.split(":", 2)[2] for line in found) == sorted(named), found
    assert all(":2:" in line for line in found)
