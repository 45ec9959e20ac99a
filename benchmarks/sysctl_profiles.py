"""The sysctl profiles (sysctl/NN-<name>.conf, sysctl.d format) as the lab reads them;
benchmarks/stages.py re-exports them (`stages.sysctl_profile`) beside the stages that
name the profiles.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.servers import ROOT


def sysctl_file(name: str) -> Path:
    """The file of profile `name` (`tuned`): sysctl/NN-<name>.conf, numbered in the
    order the lab applies the profiles, as /etc/sysctl.d applies them."""
    found = sorted((ROOT / "sysctl").glob(f"[0-9][0-9]-{name}.conf"))
    if len(found) != 1:
        raise FileNotFoundError(f"sysctl profile {name!r}: expected one sysctl/NN-{name}.conf, "
                                f"found {[p.name for p in found] or 'none'}")
    return found[0]


def sysctl_profile(name: str) -> dict[str, str]:
    """`key = value` lines of the profile's sysctl/NN-<name>.conf, in order (sysctl.d
    format)."""
    settings: dict[str, str] = {}
    for raw in sysctl_file(name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition("=")
        settings[key.strip()] = " ".join(value.split())
    return settings


def merged_profiles(names) -> dict[str, str]:
    """The profiles' files (sysctl/NN-<name>.conf), merged in order (later wins)."""
    merged: dict[str, str] = {}
    for name in names:
        merged.update(sysctl_profile(name))
    return merged
