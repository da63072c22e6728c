"""The serving phase as a time series: change points at the right line, retraction storms,
request latency, and a model of parts merged equal to one pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from logforensics import iter_events, summarize_file
from logforensics.model.serving import ServingObserver
from logforensics.model.serving_records import Serving, ServingChange

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures" / "serving"))
import generate as serving_gen  # noqa: E402


@pytest.fixture(scope="module")
def collapse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    text, facts = serving_gen.run(collapse=True)
    path = tmp_path_factory.mktemp("serving") / "collapse.log"
    path.write_text(text, encoding="utf-8")
    return path, facts


def _change(serving: Serving | None, metric: str) -> ServingChange:
    assert serving is not None
    found = [c for c in serving.changes if c.metric == metric]
    assert len(found) == 1, serving.changes
    return found[0]


def _serving(path: Path) -> Serving:
    serving = summarize_file(path).serving
    assert serving is not None
    return serving


UNSEEN = ROOT / "fixtures" / "real-unseen"
_RETRACT = "[2025-01-06 02:58:{s:02d} TP{r}] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.9446\n"


def test_one_step_retraction_printed_by_each_tp_rank_is_not_a_storm(tmp_path: Path) -> None:
    """Tensor-parallel ranks mirror one scheduler: five ranks each printing the same step's
    retraction (real-unseen 276) are one retraction per rank, not five in a row; five in a row
    on each of eight ranks are a storm of five, not forty."""
    [path] = UNSEEN.glob("276-*.log")
    r = _serving(path).retractions
    assert r is not None and r.count == 5 and r.storms == []
    log = tmp_path / "tp8.log"
    log.write_text("".join(_RETRACT.format(s=10 + 2 * i, r=rank) for i in range(5) for rank in range(8)),
                   encoding="utf-8")
    r = _serving(log).retractions
    assert r is not None
    [storm] = r.storms
    assert (storm.records, storm.first_line, storm.duration_s) == (5, 1, 8)


def test_throughput_collapse_is_found_at_its_line(collapse: tuple[Path, dict]) -> None:
    path, facts = collapse
    serving = summarize_file(path).serving
    c = _change(serving, "gen_tok_s")
    assert c.line == facts["collapse_line"]
    assert c.at == facts["collapse_at"]
    lo, hi = facts["before_tok_s"]
    assert lo <= c.before <= hi
    lo, hi = facts["after_tok_s"]
    assert lo <= c.after <= hi
    assert c.recovered is False
    # what happened just before: the first retraction, cited by its line
    retraction = next(x for x in c.context if x.what == "retraction")
    assert retraction.line == facts["first_retraction_line"]


def test_retraction_storm_and_full_pool_with_growing_queue(collapse: tuple[Path, dict]) -> None:
    path, facts = collapse
    serving = _serving(path)
    r = serving.retractions
    assert r is not None and r.count == 12 and r.first[0].line == facts["first_retraction_line"]
    [storm] = r.storms
    assert storm.first_line == facts["first_retraction_line"] and storm.records == 12
    kv = serving.kv_full
    assert kv is not None and kv.token_usage >= 0.95 and kv.queue_grew
    assert kv.line < facts["first_retraction_line"]


def test_cache_hit_collapse(collapse: tuple[Path, dict]) -> None:
    path, _ = collapse
    c = _change(summarize_file(path).serving, "cache_hit")
    assert c.before > 0.5 and c.after < 0.05


def test_healthy_twin_has_no_throughput_change(tmp_path: Path) -> None:
    text, _ = serving_gen.run(collapse=False)
    path = tmp_path / "healthy.log"
    path.write_text(text, encoding="utf-8")
    serving = _serving(path)
    assert not [c for c in serving.changes if c.metric in ("gen_tok_s", "cache_hit")]
    assert serving.retractions is not None and serving.retractions.count == 0 and serving.kv_full is None


def test_request_latency_over_time_and_slowest(collapse: tuple[Path, dict]) -> None:
    path, facts = collapse
    req = _serving(path).requests
    assert req is not None and req.latency_s is not None and req.finished > 100
    assert (req.latency_s.p50 or 0) < (req.latency_s.p99 or 0)
    slowest = req.slowest
    assert len(slowest) == 10 and slowest[0].latency_s >= slowest[-1].latency_s
    lines = path.read_text(encoding="utf-8").splitlines()
    for rec in slowest:  # each names its line, and the line is that request's record
        assert "Req Time Stats(rid=" in lines[rec.line - 1]
        assert rec.line > facts["collapse_line"]  # the slow requests are the collapsed ones
    early, late = req.over_time[0], req.over_time[-1]
    assert (early.p50 or 0) < 5 < (late.p50 or 0)


def test_request_log_formats(tmp_path: Path) -> None:
    text = (
        "[2025-03-07 21:49:33] Receive: obj=GenerateReqInput(rid='abc', text='Hello')\n"
        "[2025-03-07 21:49:34] Finish: obj=GenerateReqInput(rid='abc', text='Hello'), out={'text': 'hi', "
        "'meta_info': {'id': 'abc', 'prompt_tokens': 5, 'completion_tokens': 2, 'e2e_latency': 0.51}}\n"
        '{"timestamp": "2025-03-07T21:49:35.123456", "event": "request.finished", "rid": "def", "obj": {"rid": "def"},'
        ' "out": {"meta_info": {"id": "def", "e2e_latency": 7.25, "prompt_tokens": 9, "completion_tokens": 3}}}\n'
    )
    path = tmp_path / "req.log"
    path.write_text(text, encoding="utf-8")
    kinds = [(ev.kind, ev.fields.get("rid"), ev.fields.get("e2e_latency_s")) for ev in iter_events(path)]
    assert kinds == [("request_receive", "abc", None), ("request_finish", "abc", 0.51),
                     ("request_json", "def", 7.25)]
    req = _serving(path).requests
    assert req is not None and req.received == 1 and req.finished == 2
    assert [r.rid for r in req.slowest] == ["def", "abc"] and req.slowest[0].line == 3


def test_observer_of_parts_merges_to_one_pass(collapse: tuple[Path, dict]) -> None:
    path, _ = collapse
    events = list(iter_events(path))

    def feed(obs: ServingObserver, evs: list) -> ServingObserver:
        for ev in evs:
            if ev.kind == "decode_batch":
                f = ev.fields
                obs.add_decode(ev.rank, ev.ts, ev.line, f.get("gen_throughput_tok_s"), f.get("running_req"),
                               f.get("queue_req"), f.get("token_usage"), f.get("retracted_req"), f.get("cuda_graph"),
                               ev.text, ev.file)
            else:
                obs.observe(ev.kind, ev.line, ev.rank, ev.ts, ev.fields, ev.text, ev.file)
        return obs

    whole = feed(ServingObserver(), events).summary()
    for cut in (1, len(events) // 3, len(events) // 2, len(events) - 5):
        a = feed(ServingObserver(), events[:cut])
        a.merge(feed(ServingObserver(), events[cut:]))
        assert a.summary() == whole


def test_summary_is_pure(collapse: tuple[Path, dict]) -> None:
    path, _ = collapse
    obs = ServingObserver()
    for ev in iter_events(path):
        obs.observe(ev.kind, ev.line, ev.rank, ev.ts, ev.fields, ev.text, ev.file)
    first = obs.summary()
    assert obs.summary() == first
