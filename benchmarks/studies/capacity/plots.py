"""The capacity study's picture: users against delivery p99, and memory a user, per stage.

`capacity.png` in the run folder: left, each stage's delivery p99 at each step (the
objective a dashed line; a step that broke drawn hollow); right, the real-time server's
PSS a connected user above its rest (KiB). Every repeat's points, so their spread shows.
"""

from __future__ import annotations

from pathlib import Path

PNG = "capacity.png"


def draw(run_dir: Path, rows: list[dict], objective_ms: float) -> Path:
    from matplotlib.ticker import FuncFormatter, NullFormatter  # only when drawing

    from benchmarks.analysis.drawing import figure, finish

    fig = figure(11, 4.2)
    p99, memory = fig.subplots(1, 2)
    for n, stage in enumerate(dict.fromkeys(r["stage"] for r in rows)):
        mine = [r for r in rows if r["stage"] == stage]
        color = f"C{n}"
        for r in mine:
            face = color if not r["broke"] else "none"
            if r["delivery_p99_ms"] is not None:
                p99.plot(r["users"], r["delivery_p99_ms"], "o", color=color, mfc=face)
            if r["pss_kib_per_user"] is not None:
                memory.plot(r["users"], r["pss_kib_per_user"], "o", color=color, mfc=face)
        p99.plot([], [], "o", color=color, label=stage)
    p99.axhline(objective_ms, color="#d62728", linestyle="--", linewidth=1,
                label=f"objective {objective_ms:g} ms")
    p99.set(xscale="log", yscale="log", xlabel="connected users",
            ylabel="delivery p99 (ms)", title="Delivery p99 (hollow: the step broke)")
    memory.set(xscale="log", xlabel="connected users", ylabel="KiB PSS a user",
               title="The real-time server's memory a user")
    memory.set_ylim(bottom=0)
    plain = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for axis in (p99.xaxis, p99.yaxis, memory.xaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())
    p99.legend(fontsize=8)
    out = run_dir / PNG
    finish(fig, "capacity", out)
    return out
