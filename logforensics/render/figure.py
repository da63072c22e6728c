"""Plotly figures as plain JSON: the report's one way to build and embed a chart.

Why not ``plotly.graph_objects``: validating a figure object by object cost more than the
rest of a small ``diff`` (about 0.5 s for the report's three charts, plus 0.3 s for
``plotly.io``'s first call), and the report needs none of it: plotly.js draws the JSON.
What plotly's Python side still gives is its data: the ``plotly_white`` template and the
plotly.js bundle, read from its package files. Subplot domains follow ``make_subplots``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from markupsafe import Markup

CONFIG = {"displaylogo": False, "responsive": True}


@lru_cache(maxsize=1)
def _template() -> dict[str, Any]:
    """plotly's ``plotly_white`` template, as plotly itself ships it."""
    text = (resources.files("plotly") / "package_data" / "templates" / "plotly_white.json").read_text("utf-8")
    return dict(json.loads(text))


def plotly_js() -> str:
    """The plotly.js bundle, safe inside a <script> element."""
    text = (resources.files("plotly") / "package_data" / "plotly.min.js").read_text("utf-8")
    return text.replace("</script", "<\\/script")


def _axis_name(kind: str, index: int) -> str:
    return kind if index == 1 else f"{kind}{index}"


def _domains(n: int, spacing: float, weights: list[float] | None = None) -> list[tuple[float, float]]:
    """Start and end of n cells on [0, 1] separated by ``spacing``, in order (as make_subplots)."""
    w = weights or [1.0] * n
    room = 1.0 - spacing * (n - 1)
    out, start = [], 0.0
    for weight in w:
        size = room * weight / sum(w)
        out.append((start, start + size))
        start += size + spacing
    return out


@dataclass
class Figure:
    """A grid of subplots (rows x cols), its traces and its layout, as plotly.js reads them."""

    rows: int = 1
    cols: int = 1
    data: list[dict[str, Any]] = field(default_factory=list)
    layout: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def grid(cls, rows: int = 1, cols: int = 1, *, shared_x: bool = False, shared_y: bool = False,
             vertical_spacing: float = 0.3, horizontal_spacing: float = 0.2,
             column_widths: list[float] | None = None, titles: list[str] | None = None) -> Figure:
        """Subplots laid out as plotly's ``make_subplots`` does: row 1 on top, shared x axes
        matched to the bottom row's and shared y axes to the first column's, tick labels kept
        only there; a title over each cell."""
        fig = cls(rows, cols)
        ys = _domains(rows, vertical_spacing if rows > 1 else 0.0)
        xs = _domains(cols, horizontal_spacing if cols > 1 else 0.0, column_widths)
        annotations = []
        for r in range(1, rows + 1):
            y0, y1 = ys[rows - r]
            for c in range(1, cols + 1):
                i = (r - 1) * cols + c
                x0, x1 = xs[c - 1]
                xa: dict[str, Any] = {"anchor": _axis_name("y", i), "domain": [x0, x1]}
                ya: dict[str, Any] = {"anchor": _axis_name("x", i), "domain": [y0, y1]}
                if shared_x and r < rows:
                    xa.update(matches=_axis_name("x", (rows - 1) * cols + c), showticklabels=False)
                if shared_y and c > 1:
                    ya.update(matches=_axis_name("y", (r - 1) * cols + 1), showticklabels=False)
                fig.layout[_axis_name("xaxis", i)] = xa
                fig.layout[_axis_name("yaxis", i)] = ya
                if titles and i <= len(titles):
                    annotations.append({"font": {"size": 16}, "showarrow": False, "text": titles[i - 1],
                                        "x": (x0 + x1) / 2, "xanchor": "center", "xref": "paper",
                                        "y": y1, "yanchor": "bottom", "yref": "paper"})
        if annotations:
            fig.layout["annotations"] = annotations
        return fig

    def _index(self, row: int, col: int) -> int:
        return (row - 1) * self.cols + col

    def add(self, trace: dict[str, Any], row: int = 1, col: int = 1) -> None:
        """Add a trace (``{"type": "bar", ...}``) to a cell."""
        i = self._index(row, col)
        self.data.append({**trace, "xaxis": _axis_name("x", i), "yaxis": _axis_name("y", i)})

    def axis(self, kind: str, row: int = 1, col: int = 1, **props: Any) -> None:
        """Set properties of the x or y axis of a cell (``title`` as text)."""
        name = _axis_name(f"{kind}axis", self._index(row, col))
        title = props.pop("title", None)
        if title is not None:
            props["title"] = {"text": title}
        self.layout.setdefault(name, {}).update(props)

    def annotate(self, **props: Any) -> None:
        self.layout.setdefault("annotations", []).append(props)

    def vline(self, x: float, line: dict[str, Any]) -> None:
        """A vertical line across the first cell (plotly's ``add_vline``)."""
        self.layout.setdefault("shapes", []).append(
            {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain", "line": line})

    def to_dict(self) -> dict[str, Any]:
        """The figure as plotly.js reads it, with the template; non-finite numbers as null."""
        return {"data": _finite(self.data), "layout": {"template": _template(), **_finite(self.layout)}}

    def div(self, div_id: str) -> Markup:
        """The chart's <div> and the script that draws it (plotly.js is inlined once per page)."""
        figure = self.to_dict()
        ident, data, layout, config = (_script_json(v) for v in (div_id, figure["data"], figure["layout"], CONFIG))
        return Markup(
            f'<div style="height:100%; width:100%;"><div id={ident} class="plotly-graph-div" '
            f'style="height:100%; width:100%;"></div><script>if (document.getElementById({ident})) {{ '
            f"Plotly.newPlot({ident}, {data}, {layout}, {config}) }};</script></div>")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: '<', '>' and '/' escaped, as plotly does, so log
    text in hover labels stays data."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("/", "\\u002f")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
