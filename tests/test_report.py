"""The HTML report (``diff -o``): what a reader must find in it, and that it is safe and offline.

Reports are rendered from real diagnoses: the fixture pairs, real excerpts, and tiny
logs written here (a crash, a ready run, an empty file, no baseline).
"""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markupsafe import escape

from logforensics.diagnose.engine import Diagnosis
from logforensics.pipeline import diagnose_files
from logforensics.render.html import ReportContext, build_context, render_html, write_html

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
DIFF = ROOT / "fixtures" / "diff"
PROBE = "<script>alert(1)</script>"


# ---------------------------------------------------------------------------- tiny logs
def _startup(ranks: list[int], *, forced_ar: bool) -> list[str]:
    ts = "2025-03-08 12:29"
    env = "SGLANG_FORCE_CUSTOM_AR_PCIE=1 " if forced_ar else ""
    lines = [f"{env}python3 -m sglang.launch_server --model-path /m/Qwen --tp {len(ranks)} --mem-fraction-static 0.85",
             f"[{ts}:04] server_args=ServerArgs(model_path='/m/Qwen', tp_size={len(ranks)}, mem_fraction_static=0.85, "
             "cuda_graph_max_bs=80, disable_custom_all_reduce=False)"]
    lines += [f"[{ts}:11 TP{r}] Init torch distributed begin." for r in ranks]
    if not forced_ar:
        lines += [f"[{ts}:12 TP{r}] Custom allreduce is disabled because it's not supported on more than two "
                  "PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly."
                  for r in ranks]
    lines += [f"[{ts}:13 TP{r}] Init torch distributed ends. mem usage=0.13 GB" for r in ranks]
    lines += [f"[{ts}:13 TP{r}] Load weight begin. avail mem=21.63 GB" for r in ranks]
    lines += [f"[{ts}:21 TP{r}] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, "
              "mem usage=15.54 GB." for r in ranks]
    lines += [f"[{ts}:21 TP{r}] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB" for r in ranks]
    lines += [f"[{ts}:22 TP{r}] Memory pool end. avail mem={2.05 if forced_ar else 2.09} GB" for r in ranks]
    lines += [f"[{ts}:22 TP{r}] Capture cuda graph begin. This can take up to several minutes. "
              f"avail mem={1.10 if forced_ar else 1.45} GB" for r in ranks]
    return lines


def write_capture_oom_pair(directory: Path) -> tuple[Path, Path]:
    """TP2: the baseline serves; the failing run forces custom allreduce and TP1 dies in capture.

    The failing log carries markup in an unknown line and in the exception message.
    """
    base = _startup([0, 1], forced_ar=False)
    base += [f"[2025-03-08 12:29:28 TP{r}] Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.53 GB. "
             "mem usage=0.93 GB." for r in (0, 1)]
    base.append("[2025-03-08 12:29:33] The server is fired up and ready to roll!")
    base += [f"[2025-03-08 12:30:{10 + 3 * i:02d} TP0] Decode batch. #running-req: 8, #token: 1000, token usage: 0.02, "
             f"cuda graph: True, gen throughput (token/s): {300 + 5 * i:.2f}, #queue-req: 0, " for i in range(12)]
    fail = _startup([0, 1], forced_ar=True)
    fail.append("[2025-03-08 12:29:24 TP0] Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.13 GB. mem usage=0.97 GB.")
    fail.append(f"odd line {PROBE} from a plugin")
    fail += [
        "[2025-03-08 12:29:25 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2546, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)",
        '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 1400, in init_cuda_graphs',
        "    self.cuda_graph_runner = CudaGraphRunner(self)",
        '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in capture',
        "    self.capture_one_batch_size(bs, forward)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 1 has a total capacity of "
        "22.05 GiB of which 0.50 GiB is free. Of the allocated memory 20.1 GiB is allocated by PyTorch, and 0.2 GiB "
        f"is reserved by PyTorch but unallocated. {PROBE}",
        "[2025-03-08 12:29:26] Received sigquit from a child process. It usually means the child failed.",
    ]
    paths = directory / "baseline.log", directory / "failing.log"
    for path, lines in zip(paths, (base, fail)):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return write_capture_oom_pair(tmp_path)


def _diagnose(failing: Path, baseline: Path | None) -> tuple[Diagnosis, str]:
    d = diagnose_files(str(failing), str(baseline) if baseline else None)
    return d, render_html(d)


# ---------------------------------------------------------------------------- HTML checks
class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    return p


def assert_self_contained(html: str) -> None:
    """Nothing is fetched when the page opens: no external script, stylesheet, image, frame or font."""
    tags = parse(html)
    for tag, attrs in tags.tags:
        assert not (tag == "script" and attrs.get("src")), f"external script: {attrs}"
        assert tag != "link" or attrs.get("rel") not in ("stylesheet", "preload", "import"), f"external link: {attrs}"
        for key in ("src", "href", "data", "srcset", "poster"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//")), f"<{tag} {key}={value}> loads from the network"
    styles = html[html.index("<style>"):html.index("</style>")]
    assert "@import" not in styles and "url(" not in styles
    plotly_bundles = [s for s in tags.scripts if "plotly.js v" in s[:2000]]
    charts = html.count('class="plotly-graph-div"')
    assert len(plotly_bundles) == (1 if charts else 0), "plotly.js must be inlined exactly once when there are charts"


def assert_findings_shown(d: Diagnosis, html: str) -> None:
    assert str(escape(d.verdict)) in html
    for f in d.findings:
        assert f'<span class="rule">{escape(f.rule)}</span>' in html
        assert str(escape(f.title)) in html
        for e in f.evidence:
            assert str(escape(f"{e['file']}:{e['line']}")) in html, (f.rule, e)


def section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}"')
    return html[start:html.index("</section>", start)]


# ---------------------------------------------------------------------------- the headline story
def test_capture_oom_report_tells_the_story(pair: tuple[Path, Path]) -> None:
    base, fail = pair
    d, html = _diagnose(fail, base)
    assert_findings_shown(d, html)
    assert_self_contained(html)
    assert html.index('id="verdict"') < html.index('id="findings"') < html.index('id="timeline"') \
        < html.index('id="memory"') < html.index('id="throughput"') < html.index('id="config"') \
        < html.index('id="tracebacks"') < html.index('id="coverage"')
    assert d.findings[0].severity == "error" and 'class="verdict sev-error"' in html

    timeline = section(html, "timeline")
    assert "<b>TP1</b> (failing) crashed in <b>cuda_graph_capture</b>" in timeline
    assert 'id="timeline-chart"' in timeline and 'class="cell-crashed"' in timeline
    assert 'class="cell-missing"' in timeline  # warmup/serving: the baseline reached them, TP0 and TP1 did not

    memory = section(html, "memory")
    assert "SGLang's GB is GiB" in memory.split('<div class="chart">')[0]  # said in words, not only on an axis
    assert 'id="memory-chart"' in memory
    for label in ("mem_fraction_static (f)", "P_min", "A_min", "reserved headroom", "KV budget"):
        assert label in memory
    assert "<code>--mem-fraction-static 0.8</code>" in memory  # facts["budget"]["advice"]

    assert 'id="throughput-chart"' in section(html, "throughput")
    assert "SGLANG_FORCE_CUSTOM_AR_PCIE" in section(html, "config")

    tracebacks = section(html, "tracebacks")
    assert tracebacks.count('<article class="traceback') == 1
    assert "Ranks: <b>TP1</b>" in tracebacks
    assert "self.capture_one_batch_size(bs, forward)" in tracebacks  # the traceback in full
    assert "only in failing" in section(html, "coverage")


def test_log_text_is_escaped_never_markup(pair: tuple[Path, Path]) -> None:
    base, fail = pair
    _, html = _diagnose(fail, base)
    assert PROBE not in html
    escaped = str(escape(PROBE))
    assert escaped in section(html, "tracebacks") and escaped in section(html, "coverage")


def test_write_html_writes_one_file_and_no_leftovers(pair: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    base, fail = pair
    d = diagnose_files(str(fail), str(base))
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)  # templates come from the package, not from the working directory
    write_html(d, str(out / "report.html"))
    assert [p.name for p in out.iterdir()] == ["report.html"]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")


def test_context_is_frozen_and_typed(pair: tuple[Path, Path]) -> None:
    base, fail = pair
    ctx = build_context(diagnose_files(str(fail), str(base)))
    assert isinstance(ctx, ReportContext)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.verdict = "x"  # type: ignore[misc]
    assert [r.label for r in ctx.runs] == ["baseline", "failing"]
    assert {c.rank for c in ctx.crashes} == {"TP1"}


# ---------------------------------------------------------------------------- missing data
def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_single_run_without_baseline(pair: tuple[Path, Path]) -> None:
    _, fail = pair
    d, html = _diagnose(fail, None)
    assert d.baseline is None
    assert_findings_shown(d, html)
    assert_self_contained(html)
    assert "Single-run diagnosis" in html and "No baseline: nothing to compare." in html
    assert "<th>baseline</th>" not in section(html, "memory")


def test_empty_file(tmp_path: Path) -> None:
    empty = _write(tmp_path / "empty.log", [])
    d, html = _diagnose(empty, None)
    assert_findings_shown(d, html)
    assert_self_contained(html)
    assert "<script" not in html  # no chart, so no plotly.js either
    for text in ("No memory lines", "No decode batches", "No traceback", "Neither log shows a start-up phase line"):
        assert text in html


def test_ready_run_against_empty_baseline(tmp_path: Path) -> None:
    ready = _write(tmp_path / "ready.log", [
        "[2025-03-08 12:29:21] Load weight begin. avail mem=21.63 GB",
        "[2025-03-08 12:29:33] The server is fired up and ready to roll!",
        "[2025-03-08 12:30:10] Decode batch. #running-req: 1, #token: 10, token usage: 0.00, cuda graph: True, "
        "gen throughput (token/s): 42.00, #queue-req: 0, ",
    ])
    empty = _write(tmp_path / "empty.log", [])
    d, html = _diagnose(ready, empty)
    assert d.failing.outcome == "ready"
    assert_findings_shown(d, html)
    assert_self_contained(html)
    assert 'id="throughput-chart"' in html and "No traceback in either log" in html


def test_crash_without_timestamps_falls_back_to_line_numbers(tmp_path: Path) -> None:
    crash = _write(tmp_path / "crash.log", [
        "[TP0] Load weight begin. avail mem=21.63 GB",
        "[TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 300, in load_model',
        "    self.model = get_model()",
        "RuntimeError: boom & <bang>",
    ])
    d, html = _diagnose(crash, None)
    assert_findings_shown(d, html)
    assert_self_contained(html)
    ctx = build_context(d)
    assert ctx.timeline_unit in ("log line number", "")
    assert "boom &amp; &lt;bang&gt;" in html


# ---------------------------------------------------------------------------- real logs
def _real(prefix: str) -> Path:
    return next(REAL.glob(f"{prefix}-*.log"))


REAL_PAIRS = [("052", "041"), ("052", "049"), ("052", "002"), (None, "008"), ("044", "007"), ("001", "019")]
DIFF_CASES = sorted(p.name for p in DIFF.iterdir() if (p / "failing.log").exists()) if DIFF.is_dir() else []


@pytest.mark.parametrize("base,fail", REAL_PAIRS, ids=[f"{b}-{f}" for b, f in REAL_PAIRS])
def test_real_excerpts(base: str | None, fail: str) -> None:
    d, html = _diagnose(_real(fail), _real(base) if base else None)
    assert_findings_shown(d, html)
    assert_self_contained(html)


@pytest.mark.parametrize("case", DIFF_CASES)
def test_fixture_pairs(case: str) -> None:
    d, html = _diagnose(DIFF / case / "failing.log", DIFF / case / "baseline.log")
    assert_findings_shown(d, html)
    assert_self_contained(html)
    for t in d.failing.exceptions:  # every distinct traceback, once, with its ranks
        assert str(escape(t.text)) in section(html, "tracebacks")
