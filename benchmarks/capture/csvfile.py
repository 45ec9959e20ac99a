"""Reading a sampler.csv: the one reader for the metrics, the plots and the live views.

The sampler (benchmarks/capture/loop.py) writes one flushed row per interval, so
a file being written ends in at most one torn row: every reader here leaves out
a last line without its newline and a row with the wrong number of cells. A
cell is a number, or empty (a component not running): empty cells are left
out of a row. `rows` gives them all (or the last few, from the file's tail
only, for a live view), `first_row` and `latest` one, `peaks` each column's
largest value.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from pathlib import Path

Cell = int | float
Row = dict[str, Cell]


def number(text: str) -> Cell:
    """A cell as written: an int if it is one, else a float (ValueError if neither)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _read(path: str | os.PathLike, cast: Callable[[str], Cell], tail_bytes: int | None,
          missing_ok: bool) -> tuple[list[str], list[Row]]:
    """(the header's columns, the complete rows, oldest first)."""
    try:
        with open(Path(path), "rb") as f:
            header = f.readline().decode()
            size = os.fstat(f.fileno()).st_size
            if tail_bytes and size > tail_bytes:
                f.seek(size - tail_bytes)
                f.readline()  # a partial line
            body = f.read().decode(errors="replace")
    except FileNotFoundError:
        if missing_ok:
            return [], []
        raise
    if not body.endswith("\n"):  # the row being written
        body = body[: body.rfind("\n") + 1]
    names = next(csv.reader([header]), [])
    rows = []
    for cells in csv.reader(io.StringIO(body)):
        if len(cells) != len(names):
            continue
        row = {}
        for name, cell in zip(names, cells, strict=True):
            if cell:
                try:
                    row[name] = cast(cell)
                except ValueError:
                    continue
        rows.append(row)
    return names, rows


def rows(path: str | os.PathLike, last: int | None = None, tail_bytes: int | None = None,
         cast: Callable[[str], Cell] = float) -> list[Row]:
    """The sampler's rows as numbers (floats unless `cast` says), oldest first; [] if
    there is no file. `last`: only the last so many; `tail_bytes`: read only that much
    of the file's end (a live view's window)."""
    found = _read(path, cast, tail_bytes, missing_ok=True)[1]
    return found[-last:] if last else found


def first_row(path: str | os.PathLike) -> dict[str, float]:
    """The sampler's first row as floats: what was there when the load started."""
    found = _read(path, float, None, missing_ok=False)[1]
    if not found:
        raise ValueError(f"{path}: the sampler wrote no row")
    return found[0]


def latest(path: str | os.PathLike) -> Row | None:
    """The last complete row, each cell as written (ints stay ints); None before one."""
    found = rows(path, last=1, tail_bytes=64 * 1024, cast=number)
    return found[-1] if found else None


def peaks(csv_path: str | os.PathLike) -> dict[str, Cell | None]:
    """Column -> its largest value in the sampler's CSV (None: never a value)."""
    names, found = _read(csv_path, number, None, missing_ok=False)
    best: dict[str, Cell | None] = dict.fromkeys(names)
    for row in found:
        for col, value in row.items():
            top = best[col]
            if top is None or value > top:
                best[col] = value
    return best


def table(path: str | os.PathLike) -> tuple[list[str], list[Row]]:
    """(the header's columns, every row with its cells as written), for a data frame;
    ([], []) if there is no file."""
    return _read(path, number, None, missing_ok=True)
