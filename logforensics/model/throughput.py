"""Serving records: ``Decode batch`` and ``Prefill batch``, nearly all of a serving log.

Their figures go to bounded sketches and a downsampled series (``stats``); each record
also places its rank in ``serving``. These handlers run millions of times on a long
log, so they read their figures in one call (``Fields.pick``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event
from ..read.plan import Fields
from . import pools
from .rank import NO_RANK
from .registry import handles
from .stats import Series, Sketch

if TYPE_CHECKING:
    from .run import RunModel

_DECODE_FIGURES = ("gen_throughput_tok_s", "accept_len", "running_req", "queue_req", "token_usage",
                   "full_token_usage", "retracted_req", "cuda_graph", "token", "full_token")


@dataclass
class Throughput:
    """Serving figures of one run (token/s, accept length, running requests)."""

    decode_by_rank: dict[str, Sketch] = field(default_factory=dict)
    decode_series: Series = field(default_factory=Series)
    prefill: Sketch = field(default_factory=Sketch)
    accept_len: Sketch = field(default_factory=Sketch)
    running_req: Sketch = field(default_factory=Sketch)
    #: sglang.bench_serving's result blocks in the log, in order (the first MAX_BENCHMARKS):
    #: each {successful_requests, generated_tokens, evidence: the lines}
    benchmarks: list[dict[str, Any]] = field(default_factory=list)

    def merge(self, later: Throughput) -> None:
        """Sketches merge exactly; so does the series, from the values ``later``'s kept
        (``Series.merge``)."""
        for label, sketch in later.decode_by_rank.items():
            mine = self.decode_by_rank.get(label)
            if mine is None:
                self.decode_by_rank[label] = sketch
            else:
                mine.merge(sketch)
        self.decode_series.merge(later.decode_series)
        self.prefill.merge(later.prefill)
        self.accept_len.merge(later.accept_len)
        self.running_req.merge(later.running_req)
        self.benchmarks.extend(later.benchmarks[:max(0, MAX_BENCHMARKS - len(self.benchmarks))])

    def to_dict(self) -> dict[str, Any]:
        merged = Sketch()
        for sk in self.decode_by_rank.values():
            merged.merge(sk)
        return {
            "decode_gen_tok_s": merged.to_dict(),
            "decode_by_rank": {k: v.to_dict() for k, v in sorted(self.decode_by_rank.items())},
            "decode_series": self.decode_series.to_list(),
            "prefill_input_tok_s": self.prefill.to_dict(),
            "accept_len": self.accept_len.to_dict(),
            "running_req": self.running_req.to_dict(),
            "benchmarks": [dict(b, evidence=list(b["evidence"])) for b in self.benchmarks],
        }


#: Benchmark result blocks kept per log.
MAX_BENCHMARKS = 16


@handles("bench_requests", "bench_tokens", reads_earlier=True)
def on_bench_result(m: RunModel, ev: Event) -> None:
    """A line of sglang.bench_serving's result block: "Successful requests:" opens a block,
    "Total generated tokens:" completes it (a block cut before its first line starts with it)."""
    blocks = m.throughput.benchmarks
    key, value = next(iter(ev.fields.items()), (None, None))
    if key is None:
        return
    if ev.kind == "bench_requests" or not blocks or blocks[-1][key] is not None:
        if len(blocks) >= MAX_BENCHMARKS:
            return
        blocks.append({"successful_requests": None, "generated_tokens": None, "evidence": []})
    blocks[-1][key] = value
    blocks[-1]["evidence"].append({"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text})


@handles("decode_batch")
def on_decode_batch(m: RunModel, ev: Event) -> None:
    m.timeline.last_serving_line = ev.line
    pools.on_batch(m, ev)
    if len(m.notices.get("decode", ())) < 3:  # a few decode lines as evidence for throughput
        m.notices.add("decode", ev)
    f = ev.fields
    tput, accept, run, queue, usage, full_usage, retracted, graph, tokens, full_tokens = (
        f.pick(_DECODE_FIGURES) if type(f) is Fields else map(f.get, _DECODE_FIGURES))
    m.serving.add_decode(ev.rank, ev.ts, ev.line, tput, run, queue, usage if usage is not None else full_usage,
                         retracted, graph, ev.text, ev.file, tokens if tokens is not None else full_tokens)
    t = m.throughput
    if tput is not None:
        label = ev.rank or NO_RANK
        sk = t.decode_by_rank.get(label)
        if sk is None:
            sk = t.decode_by_rank[label] = Sketch()
        sk.add(tput)
        t.decode_series.add(ev.ts or ev.line, tput)
    if accept is not None:
        t.accept_len.add(accept)
    if run is not None:
        t.running_req.add(run)


@handles("prefill_batch")
def on_prefill_batch(m: RunModel, ev: Event) -> None:
    m.timeline.last_serving_line = ev.line
    pools.on_batch(m, ev)
    m.serving.observe(ev.kind, ev.line, ev.rank, ev.ts, ev.fields, ev.text, ev.file)
    tput = ev.fields.get("input_throughput_tok_s")
    if tput is not None:
        m.throughput.prefill.add(tput)
