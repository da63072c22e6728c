"""The report's pictures of a run's state (render/pool_charts.py): each pool's use over the
log and a hang's per-rank progress, with the lines they rest on as visible text.

Real excerpts where they exist: fixtures/real 145 and 007 (batch lines with per-pool use),
141, 143 and 043 (pool sizes and the invariant checker's state, no use), the real pairs
001 and 005 (pools on both sides of a diff), 109 and fixtures/real-unseen 204 (a rank's
collective sequence numbers), 147 and 149 (watchdog hangs without sequence numbers). A
retraction and a hang with a rank that differs are built from SGLang's and PyTorch's own
format strings (tests/test_pools.py, tests/test_hang.py): no public log shows them.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from test_hang import FAILURE, TIMEOUT
from test_pools import SWA_BOUND

from logforensics.pipeline import diagnose_files
from logforensics.render.html import build_context, render_html
from logforensics.render.pool_charts import INITIATOR_COLOUR, RANK_COLOUR

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
PAIRS = ROOT / "fixtures" / "real-pairs"


def real(prefix: str, where: Path = REAL) -> Path:
    [path] = where.glob(f"{prefix}-*.log")
    return path


def figure(markup: str, div_id: str) -> dict[str, Any]:
    """The data and layout plotly is given for the chart ``div_id`` of a page."""
    at = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div_id) + r'",\s*', markup)
    assert at is not None, f"no chart {div_id}"
    dec = json.JSONDecoder()
    data, end = dec.raw_decode(markup, at.end())
    layout, _ = dec.raw_decode(markup, markup.index("{", end))
    return {"data": data, "layout": layout}


class _Text(HTMLParser):
    """The visible text of one element (by id) of a page, scripts left out."""

    def __init__(self, element_id: str) -> None:
        super().__init__()
        self.id, self.depth, self.skip, self.parts = element_id, 0, 0, []  # type: ignore[var-annotated]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth:
            self.depth += 1
            self.skip += tag in ("script", "style")
        elif dict(attrs).get("id") == self.id:
            self.depth = 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.skip -= tag in ("script", "style") and self.skip > 0
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth and not self.skip:
            self.parts.append(data)


def section_text(page: str, element_id: str) -> str:
    p = _Text(element_id)
    p.feed(page)
    return " ".join(" ".join(p.parts).split())


def traces(fig: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The traces of one kind (``series``, ``peak``, ``last``, ``retraction``, ``rank``) by pool or rank."""
    return {t["meta"].split(":", 1)[1]: t for t in fig["data"] if str(t.get("meta", "")).startswith(kind + ":")}


# ---------------------------------------------------------------------------- pools
def test_pool_use_over_time_of_a_real_hybrid_log() -> None:
    """145: five prefill lines, full-attention usage 0.14 -> 0.40 and Mamba usage 0.20 -> 0.60."""
    log = real("145")
    page = render_html(diagnose_files(str(log), None))
    fig = figure(page, "pool-chart")
    series = traces(fig, "series")
    assert set(series) == {"full", "mamba"}
    assert series["full"]["x"] == [1, 2, 3, 4, 5]
    assert series["full"]["y"] == pytest.approx([14, 20, 27, 33, 40])
    assert series["mamba"]["y"] == pytest.approx([20, 30, 40, 50, 60])
    assert {p: t["x"] for p, t in traces(fig, "peak").items()} == {"full": [5], "mamba": [5]}
    assert "full-attention KV pool" in series["full"]["name"] and "Mamba state pool" in series["mamba"]["name"]
    # the x axis reads as time: the points' stamps under their lines
    assert "line 1<br>04:31:24" in fig["layout"]["xaxis"]["ticktext"]
    text = section_text(page, "pools")
    assert "full-attention KV" in text and "Mamba state" in text
    assert f"40 % {log.name}:5 (TP0)" in text and f"60 % {log.name}:5 (TP0)" in text
    assert "SGLang's GB being GiB" in text


def test_one_panel_per_side_of_a_diff() -> None:
    """Real pair 005: both launches print full and SWA use; each side is a panel of its own."""
    pair = PAIRS / "005-rdna4-tp2-gemma4-26b-abort-while-serving"
    page = render_html(diagnose_files(str(pair / "failing.log"), str(pair / "baseline.log")))
    fig = figure(page, "pool-chart")
    series = [t for t in fig["data"] if str(t.get("meta", "")).startswith("series:")]
    assert sorted((t["meta"], t.get("xaxis", "x")) for t in series) == [
        ("series:full", "x"), ("series:full", "x2"), ("series:swa", "x"), ("series:swa", "x2")]
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert "baseline: baseline.log" in titles and "failing: failing.log" in titles
    text = section_text(page, "pools")
    assert "61,419 tokens" in text and "49,135 tokens" in text
    assert "baseline.log:" in text and "failing.log:" in text


def test_a_side_without_use_keeps_its_sizes_with_their_lines() -> None:
    """Real pair 001: only the baseline served; the failing launch's pools are listed by size."""
    pair = PAIRS / "001-laguna-nvfp4-stops-at-prefill-graph-capture"
    page = render_html(diagnose_files(str(pair / "failing.log"), str(pair / "baseline.log")))
    fig = figure(page, "pool-chart")
    assert [a["text"] for a in fig["layout"]["annotations"] if a["text"].startswith(("baseline", "failing"))] == \
        ["baseline: baseline.log"]
    assert set(traces(fig, "series")) == {"full", "swa"}
    text = section_text(page, "pools")
    assert "32,997 tokens, 1.52 GiB failing.log:56" in text and "185,897 tokens, 8.50 GiB baseline.log:151" in text


@pytest.mark.parametrize("prefix, sizes", [
    ("141", {"full": "1,496,958 tokens", "swa": "1,496,958 tokens"}),
    ("143", {"full": "375,360 tokens", "swa": "300,288 tokens"}),
    ("043", {"full": "9,116,160 tokens", "swa": "911,616 tokens"}),
])
def test_pools_sized_but_never_used_are_listed_without_a_picture(prefix: str, sizes: dict[str, str]) -> None:
    log = real(prefix)
    d = diagnose_files(str(log), None)
    ctx = build_context(d)
    assert ctx.pool_chart is None
    [run] = ctx.pools
    rows = {r.pool: r for r in run.rows}
    assert {p: rows[p].size.split(",  ")[0][:len(s)] for p, s in sizes.items()} == sizes
    for pool, rec in d.failing.pools.to_dict()["pools"].items():
        at = rec.get("size_at") or rec["state"]["at"]
        assert rows[pool].size_at == f"{log.name}:{at['line']}" + (f" ({at['rank']})" if at["rank"] else "")
    text = section_text(render_html(d), "pools")
    assert "prints a pool's use" in text and f"{log.name}:" in text


def test_the_evictable_part_is_shown_with_its_line() -> None:
    """043: the invariant checker's per-pool lines, inside a ValueError's message."""
    log = real("043")
    text = section_text(render_html(diagnose_files(str(log), None)), "pools")
    state = diagnose_files(str(log), None).failing.pools.to_dict()["pools"]["swa"]["state"]
    assert f"235,264 available, 676,096 evictable of 911,616 tokens {log.name}:{state['at']['line']}" in text


def test_retractions_are_marked_on_the_pool_that_bound_them(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text("\n".join(SWA_BOUND) + "\n", encoding="utf-8")
    page = render_html(diagnose_files(str(path), None))
    fig = figure(page, "pool-chart")
    marks = traces(fig, "retraction")
    assert set(marks) == {"swa"}
    assert (marks["swa"]["x"], marks["swa"]["y"]) == ([3, 5], pytest.approx([97, 99]))
    assert marks["swa"]["customdata"] == ["run.log:3 (TP0)", "run.log:5 (TP0)"]
    assert set(traces(fig, "series")) == {"full", "swa"}
    text = section_text(page, "pools")
    assert "2 run.log:3 (TP0) at 97 % run.log:5 (TP0) at 99 %" in text


# ---------------------------------------------------------------------------- hang
def test_hang_progress_of_a_real_rank_with_sequence_numbers() -> None:
    """109: rank1's watchdog failure, last completed 40230, last enqueued 40267, stuck on seq 40231 (PG 2)."""
    log = real("109")
    page = render_html(diagnose_files(str(log), None))
    fig = figure(page, "hang-chart-failing")
    ranks = traces(fig, "rank")
    assert list(ranks) == ["rank1"] and ranks["rank1"]["x"] == [40230, 40267]
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    assert "stuck on collective seq 40231 (PG 2)" in notes
    assert f"in collective seq 40231 ({log.name}:3)" in notes
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [40231]
    assert f"{log.name}:3" in section_text(page, "hang")


def test_hang_progress_of_an_unseen_real_rank() -> None:
    log = real("204", ROOT / "fixtures" / "real-unseen")
    fig = figure(render_html(diagnose_files(str(log), None)), "hang-chart-failing")
    assert traces(fig, "rank")["rank4"]["x"] == [151720, 151721]
    assert any(a["text"].startswith("stuck on collective seq 151721") for a in fig["layout"]["annotations"])


@pytest.mark.parametrize("prefix, rank, line", [("147", "TP3", 5), ("149", "TP0", 2)])
def test_watchdog_hang_without_sequence_numbers_shows_the_last_phase(prefix: str, rank: str, line: int) -> None:
    log = real(prefix)
    d = diagnose_files(str(log), None)
    [ev] = d.failing.hang.progress[0].evidence
    assert ev.line == line
    fig = figure(render_html(d), "hang-chart-failing")
    assert list(traces(fig, "rank")) == [rank]
    assert "no collective sequence number" in fig["layout"]["title"]["text"]
    assert f"no forward progress (watchdog fired) ({log.name}:{line})" in [a["text"] for a in fig["layout"]["annotations"]]


def initiator_log(tmp_path: Path) -> Path:
    """TP0, TP1 and TP3 wait on seq 78 (enqueued, not completed); TP2 never enqueued it."""
    lines = ["[2025-08-10 02:54:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
             "cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0"]
    for r in (0, 1, 3):
        lines += [TIMEOUT.format(r=r, seq=78), FAILURE.format(r=r, seq=78, enq=78, done=77)]
    lines.append(FAILURE.format(r=2, seq=77, enq=77, done=76))
    path = tmp_path / "hang.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_initiator_is_highlighted_and_the_collective_named(tmp_path: Path) -> None:
    page = render_html(diagnose_files(str(initiator_log(tmp_path)), None))
    fig = figure(page, "hang-chart-failing")
    ranks = traces(fig, "rank")
    assert list(ranks) == ["TP0", "TP1", "TP3", "TP2"]
    assert {r: t["marker"]["color"] for r, t in ranks.items()} == {
        "TP0": RANK_COLOUR, "TP1": RANK_COLOUR, "TP3": RANK_COLOUR, "TP2": INITIATOR_COLOUR}
    assert (ranks["TP2"]["x"], ranks["TP0"]["x"]) == ([76, 77], [77, 78])
    assert ranks["TP2"]["y"] == ["<b>TP2 (initiator)</b>"] * 2
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    assert "stuck on BROADCAST seq 78 (PG 0)" in notes
    assert "in collective BROADCAST seq 78 (hang.log:2, hang.log:3)" in notes
    text = section_text(page, "hang")
    assert "hang.log:8" in text and "Rank that differs: TP2" in text
