"""What reaches the terminal: log text shown as data by every renderer, tracebacks with
their lines, long lines cut at a word boundary."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from logforensics.diagnose.engine import evaluate
from logforensics.diagnose.rulespec import load_rules
from logforensics.ingest import LiveRun
from logforensics.render.console import ELLIPSIS, clip, plain, printable
from logforensics.render.diff import render_diagnosis
from logforensics.render.terminal import render_summary
from logforensics.watch.state import WatchState
from logforensics.watch.view import PlainStatus, live_renderable, print_crash

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]

#: Text rich would read as markup: an unmatched closing tag (MarkupError), known tags it
#: would eat, a bracketed rank like the one rich ate from 042's evidence, a style name.
HOSTILE = ("[/b]", "[bold red]x[/bold red]", "[rank2]:[F1019 10:11:12]", "[/pytorch/third_party/gloo/x.cc:81]",
           "[link=file:///etc/passwd]y[/link]", ":warning:")


def hostile_text() -> str:
    """The crash fixture with hostile text in the file name's place, messages, frames, env."""
    tail = " ".join(HOSTILE)
    lines = []
    for line in CRASH.read_text().splitlines(keepends=True):
        if line.startswith("torch.OutOfMemoryError") or line.lstrip().startswith("File "):
            line = line.rstrip("\n") + " " + tail + "\n"
        lines.append(line)
    lines[2:2] = [f"{h} an unknown line {tail}\n" for h in HOSTILE]
    return "".join(lines)


def summarise(text: str, name: str):
    run = LiveRun(name)
    run.feed(text.encode())
    run.close()
    return run, run.summary()


def markup_console(width: int = 400) -> tuple[Console, io.StringIO]:
    """A console with markup ON, as rich defaults: the renderers must not rely on it being off."""
    buf = io.StringIO()
    return Console(file=buf, width=width, markup=True, emoji=True, highlight=True, color_system=None), buf


NAME = "logs[/b]/[bold]x[/bold].log"


def test_every_renderer_shows_hostile_text_verbatim() -> None:
    text = hostile_text()
    run, failing = summarise(text, NAME)
    _, baseline = summarise(READY.read_text(), "base[/i].log")
    d = evaluate(load_rules(), failing, baseline)
    outputs = {}
    for label, draw in (
        ("summary", lambda c: render_summary(failing, c)),
        ("diff", lambda c: render_diagnosis(d, c, max_evidence=24)),
        ("crash", lambda c: print_crash(d, c)),
    ):
        console, buf = markup_console()
        draw(console)
        outputs[label] = buf.getvalue()
    state = WatchState(LiveRun(NAME), baseline, load_rules())
    state.feed(text.encode(), 0.0)
    state.notices.append(f"[watch] opened: {NAME} [/b]")
    console, buf = markup_console()
    console.print(live_renderable(state, 1.0, console))
    PlainStatus(console).update(state, 1.0)
    outputs["watch"] = buf.getvalue()
    for label, out in outputs.items():
        flat = re.sub(r"\s+", " ", out)
        assert NAME in flat or label == "crash", f"{label}: the file name is not shown verbatim"
        if label == "watch":  # the live view shows no log text, only names and notices
            assert f"{NAME} [/b]" in out
            continue
        for h in HOSTILE:
            assert h in out, f"{label}: {h!r} was not shown as written"


def test_watch_crash_panel_keeps_the_traceback_lines() -> None:
    out = subprocess.run(CLI + ["watch", str(CRASH), "--grace", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    text = out.stdout + out.stderr
    assert "\ufffd" not in text
    frame = 'File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process'
    rows = [r.strip(" |│") for r in text.splitlines()]
    assert frame in rows, "each traceback line is a line of the panel"
    assert "scheduler = Scheduler(" in rows


def test_control_characters_are_removed_and_lines_kept_where_asked() -> None:
    assert printable("a\x1b[2Jb\x07c\nd\te") == "a[2Jbc d e"
    assert printable("a\x1b[2Jb\nd\r\n", lines=True) == "a[2Jb\nd\n"
    assert plain("[/b]\x1b").plain == "[/b]"


@pytest.mark.parametrize("text,limit", [
    ("GPU 1 has a total capacity of 287.98 GiB of which 1.94 GiB is free. Of the allocated memory", 50),
    ("Tried to allocate 12.00 GiB. GPU 1 has a total capacity of 287.98 GiB", 44),
    ("x" * 30 + "/sgl-workspace/sglang/python/sglang/srt/model_executor.py:1234567", 45),
    ("short", 40),
])
def test_clip_cuts_at_a_word_boundary_never_inside_a_number(text: str, limit: int) -> None:
    out = clip(text, limit)
    assert len(out) <= limit
    if out == text:
        return
    assert out.endswith(ELLIPSIS)
    head = out[:-1]
    assert text.startswith(head)
    rest = text[len(head):]
    assert not (head[-1:].isalnum() and rest[:1].isalnum()), f"cut inside a word: {out!r}"
    assert not re.search(r"\d\.?$", head) or not rest[:1].isdigit(), f"cut inside a number: {out!r}"


def test_diff_evidence_lines_are_cut_at_word_boundaries() -> None:
    out = subprocess.run(CLI + ["diff", str(READY), str(CRASH)], capture_output=True, text=True, timeout=120)
    lines = CRASH.read_text().splitlines()
    seen = 0
    for row in out.stdout.splitlines():
        m = re.match(r"\s+> (.+?):(\d+)(?: [^:]+)?: (.*)$", row)
        if not m or not m.group(1).endswith(CRASH.name):
            continue
        seen += 1
        shown, source = m.group(3), lines[int(m.group(2)) - 1]
        if shown == source.strip() or shown == source:
            continue
        assert shown.endswith(ELLIPSIS), row
        head = shown[:-1]
        assert head in source
        after = source[source.index(head) + len(head):]
        assert not after[:1].isalnum() or not head[-1:].isalnum(), f"cut mid-word: {row}"
    assert seen


def test_the_start_up_order_says_capture_began_not_that_graphs_were_captured() -> None:
    """real-unseen 364: the KV pool, then 'Capture cuda graph begin', then a failure at 0 of 4
    graphs: the line that begins the capture is no evidence that any graph was captured."""
    from logforensics import summarize_file

    s = summarize_file(next((FIXTURES / "real-unseen").glob("364-*.log")))
    out = io.StringIO()
    render_summary(s, Console(file=out, width=200, color_system=None))
    assert "Start-up order: KV pool allocated (line 2) before CUDA graph capture began (line 4)" in out.getvalue()
    assert "were captured" not in out.getvalue()


def test_summary_lists_the_errors_the_run_logged_and_did_not_end_with() -> None:
    """A ready run whose process logged a CUDA out-of-memory error (real-unseen 421: AReaL's
    worker, 'Worker encountered error CUDA out of memory. ...') says so, with its line; so does
    another program's logged traceback cut before its exception (409)."""
    unseen = FIXTURES / "real-unseen"
    out = {}
    for n in ("421", "409"):
        run = LiveRun(str(next(unseen.glob(f"{n}-*.log"))))
        run.feed(next(unseen.glob(f"{n}-*.log")).read_bytes())
        run.close()
        buf = io.StringIO()
        render_summary(run.summary(), Console(file=buf, width=200))
        out[n] = buf.getvalue()
    assert "Errors logged, not read as the run's end (1):" in out["421"]
    assert "line 8: " in out["421"] and "Worker encountered error CUDA out of memory. Tried to allocate 354.00 MiB" in out["421"]
    assert "lines 3-13: a traceback whose exception line is not in this log" in out["409"]
    buf = io.StringIO()
    run = LiveRun(str(READY))
    run.feed(READY.read_bytes())
    run.close()
    render_summary(run.summary(), Console(file=buf, width=200))
    assert "Errors logged" not in buf.getvalue()
