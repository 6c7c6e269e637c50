"""What a report figure plots, read back from its matplotlib Figure: a PNG's size says nothing
of its data (an empty axes with a title and a legend is over 1,000 B), its series do.

`captured()` records every Figure as it is saved (analysis/figures.py saves and closes each
one; a closed Figure keeps its artists), by the saved file's stem; `series(ax)` is each
labelled series on an axes as (x, y) points: lines, error bars (their data line; unlabelled
ones by position) and scatter points. Guides (axvline/axhline) carry no label and are left
out; `traces(ax)` is every line of more than a guide's two points, labelled or not."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from matplotlib.axes import Axes
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure


@contextmanager
def captured() -> Iterator[dict[str, Figure]]:
    """Every Figure saved inside the block, by file stem (its first save: PNG and SVG share it)."""
    figures: dict[str, Figure] = {}
    original = Figure.savefig

    def savefig(self: Figure, fname: Any, *args: Any, **kwargs: Any) -> None:
        figures.setdefault(Path(str(fname)).stem, self)
        original(self, fname, *args, **kwargs)

    with mock.patch.object(Figure, "savefig", savefig):
        yield figures


def panels(figure: Figure) -> list[Axes]:
    """The visible axes (panel_grid hides the unused cells of its grid)."""
    return [ax for ax in figure.axes if ax.get_visible()]


def series(ax: Axes) -> dict[str, np.ndarray]:
    """Each labelled series on `ax`: its points as an (n, 2) array of finite (x, y)."""
    out: dict[str, np.ndarray] = {}
    for i, container in enumerate(ax.containers):
        if isinstance(container, ErrorbarContainer) and container.lines[0] is not None:
            label = container.get_label()
            out[str(label) if label else f"_errorbar{i}"] = container.lines[0].get_xydata()
    for line in ax.lines:
        if not line.get_label().startswith("_"):
            out[line.get_label()] = line.get_xydata()
    for collection in ax.collections:
        label = str(collection.get_label())
        if not label.startswith("_") and hasattr(collection, "get_offsets"):
            out[label] = np.asarray(collection.get_offsets())
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def traces(ax: Axes) -> list[np.ndarray]:
    """Every line's points, labelled or not, but guides: an axvline/axhline has two points."""
    return [np.asarray(line.get_xydata(), dtype=float) for line in ax.lines if len(line.get_xydata()) > 2]


def finite(points: np.ndarray) -> np.ndarray:
    return points[np.isfinite(points).all(axis=1)]


def y_span(points: np.ndarray) -> tuple[float, float]:
    kept = finite(points)
    return float(kept[:, 1].min()), float(kept[:, 1].max())
