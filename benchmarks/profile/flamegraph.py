"""A flame graph (SVG) of collapsed stacks: Brendan Gregg's picture, drawn in a page
of code so the lab needs no Perl.

Each box is a frame, as wide as its share of the samples, its callers below it.
The workers' own process frames are merged (`process:"gunicorn ..."`), so four
workers doing the same work make one tower, not four thin ones. Boxes narrower
than MIN_PX are left out; hover a box for its samples and share.
"""

from __future__ import annotations

import html
import zlib
from pathlib import Path

from benchmarks.profile import folded

WIDTH, ROW, TOP = 1200, 16, 24  # px: the picture, a frame's height, the title's band
MIN_PX = 0.3
CHAR_PX = 7  # about one character of the 12 px monospace label


def tree(stacks: list[tuple[list[str], int]]) -> dict:
    """{frame: [samples, {callee: [...]}]} with every process frame's pid dropped."""
    root: dict = {}
    for frames, count in stacks:
        level = root
        for frame in frames:
            name = folded.PROCESS.sub('process:"', frame)
            node = level.setdefault(name, [0, {}])
            node[0] += count
            level = node[1]
    return root


def _boxes(level: dict, x: float, depth: int, scale: float, out: list) -> None:
    for name, (count, callees) in sorted(level.items()):
        width = count * scale
        if width >= MIN_PX:
            out.append((x, depth, width, name, count))
            _boxes(callees, x, depth + 1, scale, out)
        x += width


def _color(name: str) -> str:
    """A warm colour that stays the same for a frame from one graph to the next."""
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{80 + (h >> 8) % 150},{40 + (h >> 16) % 40})"


def svg(stacks: list[tuple[list[str], int]], title: str) -> str:
    total = sum(count for _, count in stacks)
    boxes: list = []
    _boxes(tree(stacks), 0.0, 0, WIDTH / max(1, total), boxes)
    height = TOP + ROW * (1 + max((b[1] for b in boxes), default=0))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="monospace" font-size="12">',
             '<rect width="100%" height="100%" fill="#f8f8f0"/>',
             f'<text x="4" y="16">{html.escape(title)} ({total} samples)</text>']
    for x, depth, width, name, count in boxes:
        y = height - ROW * (depth + 1)
        label = name if len(name) * CHAR_PX < width - 4 else name[:int((width - 4) / CHAR_PX) - 2]
        text = (f'<text x="{x + 2:.1f}" y="{y + 12}">{html.escape(label)}'
                f'{".." if label != name else ""}</text>' if len(label) >= 3 else "")
        parts.append(f'<g><title>{html.escape(name)} ({count} samples, '
                     f'{100 * count / total:.1f}%)</title>'
                     f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 1}" '
                     f'fill="{_color(name)}"/>{text}</g>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write(stacks_path: Path, svg_path: Path) -> None:
    """The flame graph of a collapsed-stacks file, titled with its folder."""
    title = f"{Path(stacks_path).parent.name}: where the app server's CPU went"
    Path(svg_path).write_text(svg(folded.read(stacks_path), title))
