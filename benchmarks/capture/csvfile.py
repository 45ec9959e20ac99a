"""Reading a sampler.csv: the one reader for the report, the plots and the live view."""

from __future__ import annotations

import csv
import os


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def peaks(csv_path: str | os.PathLike) -> dict[str, int | float | None]:
    """Column -> its largest value in the sampler's CSV (None: never a value).

    Empty cells (a component not running) and a torn last line are skipped.
    """
    with open(csv_path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            return {}
        best: dict[str, int | float | None] = dict.fromkeys(header)
        for row in reader:
            if len(row) != len(header):
                continue
            for col, cell in zip(header, row, strict=True):
                if cell:
                    try:
                        value = _number(cell)
                    except ValueError:
                        continue
                    top = best[col]
                    if top is None or value > top:
                        best[col] = value
    return best


