"""Serving health from the batch lines: stalls, a prefill/decode seesaw, attention-DP imbalance,
KV pressure only with a queue, idle time never a collapse, figures counted once per DP group,
and ``watch`` raising them live."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from logforensics import summarize_file
from logforensics.diagnose.engine import evaluate
from logforensics.diagnose.rulespec import load_rules
from logforensics.model.serving_records import Serving
from logforensics.model.summary import RunSummary

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures" / "serving"))
import health as gen  # noqa: E402
from test_watch import Watch, write_slowly  # noqa: E402

CLI = [sys.executable, "-m", "logforensics"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _of(run: RunSummary) -> Serving:
    assert run.serving is not None
    return run.serving


def _serving(path: Path) -> Serving:
    """The serving phase of a log's summary (it has one)."""
    return _of(summarize_file(path))


def _fired(path: Path) -> dict[str, Any]:
    d = evaluate(load_rules(()), summarize_file(path), None)
    return {f.rule: f for f in d.findings}


def test_decode_stall_while_prefill_runs_cites_both_records(tmp_path: Path) -> None:
    text, facts = gen.stall("stall")
    path = _write(tmp_path, "stall.log", text)
    h = _serving(path).health
    assert h.stalls.count == 1
    [s] = h.stalls.first
    assert (s.line, s.prefill_line, s.windows) == (facts["decode_line"], facts["prefill_line"], 2)
    assert s.start == facts["at"]
    assert s.tok_s < 0.25 * s.median_tok_s and 1450 <= s.median_tok_s <= 1550
    assert [e.line for e in s.evidence] == [facts["decode_line"], facts["prefill_line"]]
    assert all(e.rank == "TP0" and "batch" in e.text for e in s.evidence)
    assert h.thresholds.stall_ratio == 0.25
    f = _fired(path)["SV07"]
    assert [(e["line"], e["rank"]) for e in f.evidence] == [(facts["decode_line"], "TP0"), (facts["prefill_line"], "TP0")]
    assert "25%" in f.explanation and str(facts["prefill_line"]) in f.explanation


@pytest.mark.parametrize("kind", ["load_fell", "after_idle", "prefill_alone", "nothing_running"])
def test_no_stall_when_the_load_fell_or_after_idle_time(tmp_path: Path, kind: str) -> None:
    """Not a stall: fewer requests decoding; the first decode record after idle time or after
    prefill batches alone (its throughput counts seconds in which nothing decoded); a prefill
    batch that printed no request running (it took no time from decode)."""
    text, _ = gen.stall(kind)
    path = _write(tmp_path, f"{kind}.log", text)
    h = _serving(path).health
    assert h.stalls.count == 0
    assert h.idle.count == (1 if kind == "after_idle" else 0)
    assert "SV07" not in _fired(path)


def test_seesaw_between_prefill_and_decode(tmp_path: Path) -> None:
    text, facts = gen.seesaw(True)
    path = _write(tmp_path, "seesaw.log", text)
    sw = _serving(path).health.seesaw
    assert sw.line == facts["prefill_line"]
    assert (sw.switches, sw.windows, sw.prefill_windows, sw.decode_windows) == (7, 16, 8, 8)
    f = _fired(path)["SV08"]
    assert f.evidence[0]["line"] == facts["prefill_line"] and len(f.evidence) == 4


def test_no_seesaw_when_prefills_do_not_hold_decode_back(tmp_path: Path) -> None:
    text, _ = gen.seesaw(False)
    path = _write(tmp_path, "steady.log", text)
    assert _serving(path).health.seesaw is None
    assert not {"SV07", "SV08"} & set(_fired(path))


def test_dp_imbalance_needs_two_signals(tmp_path: Path) -> None:
    text, _ = gen.dp_groups([(60, 0.8), (12, 0.2)])
    path = _write(tmp_path, "dp.log", text)
    imb = _serving(path).health.imbalance
    assert imb.found and imb.heaviest == "DP0 TP0" and imb.groups == 2
    assert imb.agreeing == ["running_req", "token_usage"]
    share = {s.figure: s for s in imb.signals}
    assert share["running_req"].heaviest_share == pytest.approx(60 / 36, abs=1e-3)
    assert share["running_req"].lightest == "DP1 TP2"
    f = _fired(path)["SV09"]
    assert {e["rank"] for e in f.evidence} == {"DP0 TP0", "DP1 TP2"}
    assert all(e["line"] for e in f.evidence)
    # one signal alone (running requests uneven, token usage even) is not an imbalance
    text, _ = gen.dp_groups([(60, 0.5), (12, 0.5)])
    path = _write(tmp_path, "one_signal.log", text)
    imb = _serving(path).health.imbalance
    assert not imb.found and imb.agreeing == ["running_req"]
    assert "SV09" not in _fired(path)


def test_throughput_summed_across_dp_groups_never_across_their_tp_ranks(tmp_path: Path) -> None:
    text, facts = gen.dp_groups([(40, 0.5), (20, 0.3)], tp_per_group=2)
    s = _serving(_write(tmp_path, "dp2tp2.log", text))
    assert all(v == pytest.approx(facts["gen_tok_s"], rel=0.03) for _, v, _ in s.series["gen_tok_s"])
    assert all(v == 60 for _, v, _ in s.series["running_req"])
    text, facts = gen.tp_all_print(tp=4)
    s = _serving(_write(tmp_path, "tp4.log", text))
    lo, hi = facts["gen_tok_s"]
    assert all(lo <= v <= hi for _, v, _ in s.series["gen_tok_s"])
    assert all(v == facts["running_req"] for _, v, _ in s.series["running_req"])


def test_every_pipeline_stage_s_record_of_one_batch_counts_once(tmp_path: Path) -> None:
    """Each pipeline stage logs the same decode batch (real-unseen 1264): the series counts it
    once, not the stages' sum."""
    text = "".join(f"[2025-05-08 10:00:{s:02d} TP0 PP{pp}] Decode batch, #running-req: 1, #token: 64, token usage: 0.00, "
                   f"cuda graph: True, gen throughput (token/s): 20.00, #queue-req: 0\n"
                   for s in range(0, 40, 2) for pp in (0, 1))
    s = _serving(_write(tmp_path, "pp2.log", text))
    assert all(v == pytest.approx(20.0) for _, v, _ in s.series["gen_tok_s"])
    assert all(v == 1 for _, v, _ in s.series["running_req"])


def test_full_pool_with_an_empty_queue_is_not_pressure(tmp_path: Path) -> None:
    path = _write(tmp_path, "full_idle_queue.log", gen.kv_full(None)[0])
    run = summarize_file(path)
    assert _of(run).kv_full is None
    fired = _fired(path)
    assert "SV02" not in fired
    text, facts = gen.kv_full(queued_from=10)
    path = _write(tmp_path, "full_then_queued.log", text)
    kv = _serving(path).kv_full
    assert kv.line == facts["first_queued_line"] and kv.queue_start == 4 and kv.windows == 20
    f = _fired(path)["SV02"]
    assert f.evidence[0]["line"] == facts["first_queued_line"]


@pytest.mark.parametrize("figure,rule", [("cache_hit", "SV04"), ("gen_tok_s", "SV01")])
def test_a_new_level_after_idle_time_is_not_a_collapse(tmp_path: Path, figure: str, rule: str) -> None:
    text, _ = gen.idle_between(figure)
    path = _write(tmp_path, f"idle_{figure}.log", text)
    s = _serving(path)
    [c] = [c for c in s.changes if c.metric == figure]
    assert c.ratio < 0.5 and c.after_idle_s >= 1200
    [gap] = s.health.idle.gaps
    assert gap.after_line < gap.line <= c.line and gap.seconds >= 1200
    assert rule not in _fired(path)


def test_watch_raises_each_health_finding_once(tmp_path: Path) -> None:
    text, facts = gen.stall("stall")
    kv_text, kv = gen.kv_full(queued_from=2)
    proc = subprocess.run(CLI + ["watch", "-", "--jsonl", "--until", "exit"], input=text,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    alerts = [ln for ln in proc.stderr.splitlines() if "[watch] serving:" in ln]
    assert len(alerts) == 2, proc.stderr  # the stall began, and ended
    assert f"decode stalled at line {facts['decode_line']} (TP0)" in alerts[0]
    assert f"(line {facts['prefill_line']})" in alerts[0]
    assert f"over at <stdin>:{facts['recovered_line']} (TP0)" in alerts[1]
    proc = subprocess.run(CLI + ["watch", "-", "--until", "exit"], input=kv_text,  # status lines: stderr
                          capture_output=True, text=True, timeout=60)
    alerts = [ln for ln in proc.stderr.splitlines() if "[watch] serving:" in ln]
    assert len(alerts) == 1 and f"KV pool full (token usage 0.97) with 4 requests queued from line {kv['line']}" \
        in alerts[0], proc.stderr


def test_watch_says_when_a_stall_begins_and_when_it_ends_on_a_growing_file(tmp_path: Path) -> None:
    """A file written while ``watch`` follows it: the stall is raised once when its windows
    arrive (nothing said of its end while it holds), its end once when the first decode record at
    the old level arrives, with file:line and rank; neither again while the log goes on."""
    text, facts = gen.stall("stall")
    lines = text.splitlines(keepends=True)
    cut = int(facts["recovered_line"]) - 1  # through the stalled windows, not the record that ends them
    log = tmp_path / "server.log"
    log.write_text("")
    w = Watch([str(log), "--until", "exit", "--idle-exit", "0.5"])
    try:
        w.wait_for("opened")
        write_slowly(log, "".join(lines[:cut]), delay=0.0005)
        w.wait_for(f"decode stalled at line {facts['decode_line']} (TP0)")
        time.sleep(1.5)  # health is judged again at least once a second: the stall still holds
        assert "over at" not in w.err_text()
        write_slowly(log, "".join(lines[cut:]), delay=0.0005)
        w.wait_for(f"decode stall of line {facts['decode_line']} over at {log}:{facts['recovered_line']} (TP0)")
        write_slowly(log, "[2025-03-08 12:10:00] INFO:     Shutting down\n"
                          "[2025-03-08 12:10:00] INFO:     Application shutdown complete.\n")
        assert w.finish(timeout=15) == 0, w.err_text()
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
    alerts = [ln for ln in w.err_text().splitlines() if "[watch] serving:" in ln]
    assert len(alerts) == 2, w.err_text()
    assert "decode stalled" in alerts[0] and f"(line {facts['prefill_line']})" in alerts[0]
    assert f"{log}:{facts['recovered_line']} (TP0)" in alerts[1]


def test_watch_says_when_kv_pressure_eases(tmp_path: Path) -> None:
    """KV pressure that begins, eases (the queue drained) and begins again: one message each."""
    text, kv = gen.kv_full(queued_from=2)
    lines = text.splitlines(keepends=True)
    drained = [re.sub(r"#queue-req: \d+", "#queue-req: 0", ln) if 12 <= i < 16 else ln  # lines 13-16
               for i, ln in enumerate(lines)]
    proc = subprocess.run(CLI + ["watch", "-", "--until", "exit"], input="".join(drained),
                          capture_output=True, text=True, timeout=60)
    alerts = [ln for ln in proc.stderr.splitlines() if "[watch] serving:" in ln]
    assert len(alerts) == 3, proc.stderr
    assert f"from line {kv['line']}" in alerts[0]
    assert f"KV pressure of line {kv['line']} eased at <stdin>:13 (TP0): token usage 0.97, 0 requests queued" \
        in alerts[1]
    assert "from line 17" in alerts[2]
