"""The JSON and text an incident leaves beside a log: a ``SGLANG_DEBUG_CRASH_SNAPSHOT``
snapshot, a file of the maintainers' incident bundle, one endpoint's answer
(``/server_info``, ``/v1/loads``, ``/health_generate``), and the ``/metrics`` text: each
recognised by its own keys and metric names, never by the file's name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Mapping
from typing import Any

from .pickled import PRIMITIVE, number, primitives
from .types import Dump

# ---------------------------------------------------------------------------------------------
# JSON: crash snapshots, incident bundles, endpoint answers
# ---------------------------------------------------------------------------------------------

#: What ``/server_info`` takes from the scheduler rather than from ServerArgs.
_SCHEDULER_INFO = ("max_total_num_tokens", "max_req_input_len")


def read_json_artefact(path: str, data: object) -> Dump | None:
    """Recognise SGLang JSON by its own keys (never the file name) and summarise it; None
    for any other JSON.

    * a crash snapshot (``crash_snapshot.py`` ``dump_crash_snapshot``: ``reason``,
      ``recent_host_pool_io``, ``scheduler``, ...): kind ``crash_snapshot``;
    * kind ``incident``: ``/server_info`` (``version``, ``max_total_num_tokens``, per-DP
      ``internal_states``), ``/v1/loads`` (per-rank ``loads``; requests, tokens and
      throughput summed over ranks, ratios the highest rank's), ``/model_info``, and the
      files of the incident bundle (``incident_artifact_tool.py collect-bundle``): an
      endpoint result ``{ok, status, path, json|error}`` (a failed ``/health_generate``),
      ``metadata.json`` and the ``summarize-bundle`` report.

    Figures carry the JSON's own key names; only what the JSON shows is taken."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("reason"), str) and isinstance(data.get("recent_host_pool_io"), list):
        return _crash_snapshot(path, data)
    if _endpoint_result(data):
        figures = primitives({k: data[k] for k in ("path", "ok", "status", "decode_error") if k in data})
        if data.get("error") is not None:
            figures["error"] = _first_line(str(data["error"]))
        inner = data.get("json")
        found = _endpoint(path, inner) if isinstance(inner, dict) else None
        if found is None:
            return Dump("incident", path, figures)
        return Dump("incident", path, {**found.figures, **figures}, server_args=found.server_args)
    if data.get("artifact_type") == "incident_bundle":
        return _bundle(path, data)
    return _endpoint(path, data)


def _endpoint_result(data: dict[str, Any]) -> bool:
    """``collect-bundle``'s record of one request: ``ok``, ``status``, the endpoint's
    ``path`` and its ``json``, ``text`` or ``error``."""
    path = data.get("path")
    return (isinstance(path, str) and path.startswith("/") and isinstance(data.get("ok"), bool)
            and isinstance(data.get("status"), int) and any(k in data for k in ("json", "text", "error")))


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _crash_snapshot(path: str, data: dict[str, Any]) -> Dump:
    """What the scheduler raised and what was in flight first (the exception line, the last
    host-pool transfers), then the scheduler's counters, then where and when it was written:
    a summary shows the first figures of a dump."""
    figures = primitives({k: data.get(k) for k in ("reason",) if k in data})
    traceback = data.get("traceback")
    if isinstance(traceback, str) and traceback.strip():
        figures["traceback"] = _exception_line(traceback)
    figures.update(primitives({k: data.get(k) for k in ("timestamp",) if k in data}))
    io_records = data["recent_host_pool_io"]
    figures["recent_host_pool_io"] = len(io_records)
    if io_records and isinstance(io_records[-1], dict):
        figures["last_host_pool_io"] = primitives(io_records[-1])   # what was in flight last
    scheduler = data.get("scheduler")
    if isinstance(scheduler, dict):
        figures.update(primitives(scheduler))
    figures.update(primitives({k: data.get(k) for k in ("hostname", "pid") if k in data}))
    extra = data.get("extra")
    if isinstance(extra, dict) and extra:
        figures["extra"] = primitives(extra)
    return Dump("crash_snapshot", path, figures)


def _exception_line(traceback: str) -> str:
    """The line naming the exception: the first unindented line after the last frame
    (``  File "...", line N``) and its source line. A message may run over several lines
    (CUDA errors add four), so the last line is not it. With no frame (the writer keeps
    the last 16 KiB, which may cut them all) the first unindented line is taken."""
    lines = [line for line in traceback.splitlines() if line.strip()]
    last_frame = max((i for i, line in enumerate(lines) if line.startswith("  File ")), default=-1)
    after = [line for line in lines[last_frame + 1:] if not line[:1].isspace()]
    return (after[0] if after else lines[-1]).strip()[:300]


def _bundle(path: str, data: dict[str, Any]) -> Dump:
    """``metadata.json`` of a collected bundle, or its ``SUMMARY_REPORT.json``."""
    figures = primitives({k: v for k, v in data.items() if k != "bundle_dir"})
    server_args: dict[str, Any] = {}
    for section in ("health", "capacity", "point_in_time_load", "metrics"):
        part = data.get(section)
        if isinstance(part, dict):
            for k, v in part.items():
                if isinstance(v, PRIMITIVE) or (isinstance(v, dict) and all(isinstance(x, PRIMITIVE) for x in v.values())):
                    figures[k if k not in figures else f"{section}.{k}"] = v
    for section in ("model", "topology"):   # server arguments under their own names
        part = data.get(section)
        if isinstance(part, dict):
            server_args.update({k: v for k, v in primitives(part).items() if v is not None})
    signals = data.get("signals")
    if isinstance(signals, list) and signals:
        figures["signals"] = [s for s in signals if isinstance(s, str)]
    return Dump("incident", path, figures, server_args=server_args)


def _endpoint(path: str, data: dict[str, Any]) -> Dump | None:
    states = data.get("internal_states")
    if isinstance(states, dict):   # one scheduler's state, not yet a list per DP rank
        states = [states]
    if isinstance(states, list) and ("version" in data or "model_path" in data):
        return _server_info(path, data, states)
    loads = data.get("loads")
    if (isinstance(loads, list) and loads and all(isinstance(x, dict) for x in loads)
            and any("num_running_reqs" in x for x in loads)):
        return _loads(path, data, loads)
    if "model_path" in data and "is_generation" in data:   # /model_info
        return Dump("incident", path, primitives(data))
    return None


def _shallow(d: Mapping[str, Any], skip: Container[str] = ()) -> dict[str, Any]:
    """Primitive values and dicts of only primitives (a memory split); lists and deeper
    values left out."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k in skip or not isinstance(k, str):
            continue
        if isinstance(v, PRIMITIVE):
            out[k] = v
        elif isinstance(v, dict) and v and all(isinstance(x, PRIMITIVE) for x in v.values()):
            out[k] = primitives(v)
    return out


def _server_info(path: str, data: dict[str, Any], states: list[Any]) -> Dump:
    """Server args, the scheduler's capacity, the version, and each DP rank's own state
    (the keys an internal state adds to the server args it repeats)."""
    figures = primitives({k: data[k] for k in ("version", *_SCHEDULER_INFO) if k in data})
    figures["internal_states"] = [_shallow(s, skip=data) for s in states if isinstance(s, dict)]
    server_args = {k: v for k, v in primitives(data).items()
                   if k not in figures and k not in ("status", "version")}
    return Dump("incident", path, figures, server_args=server_args)


def _loads(path: str, data: dict[str, Any], loads: list[dict[str, Any]]) -> Dump:
    figures = primitives({k: v for k, v in data.items() if k not in ("loads", "aggregate")})
    per_rank = [_shallow(x) for x in loads]
    figures["loads"] = per_rank
    values: dict[str, list[float]] = {}
    for rank in per_rank:
        for k, v in rank.items():
            if k not in ("dp_rank", "timestamp") and (n := number(v)) is not None:
                values.setdefault(k, []).append(n)
    combined: dict[str, str] = {}
    for k, vs in values.items():
        figures[k], how = _combine(k, vs)
        if len(vs) > 1:
            combined[k] = how
    if combined:
        figures["combined"] = combined
    aggregate = data.get("aggregate")
    if isinstance(aggregate, dict):   # the 2025 form: the server's own totals
        figures["aggregate"] = primitives(aggregate)
    return Dump("incident", path, figures)


# ---------------------------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------------------------

#: Gauges that are one rank's constant or capacity, whatever their name says.
_PER_RANK = frozenset({"num_pages", "lora_pool_slots_total", "hicache_host_total_tokens", "page_size",
                       "context_len", "is_cuda_graph"})
#: Labels that tell apart copies of one scheduler's figures: every TP/PP/EP rank of a DP rank
#: reports the same requests under ``--enable-metrics-for-all-schedulers``, each process under
#: its own ``pid`` where prometheus_client's multiprocess mode keeps them all.
_REPLICA_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "pid")
#: Labels a figure is summed (or maxed) across; any other label keeps its own figure.
#: (``name`` is the model's label in the first /metrics of late 2024.)
_POOLED_LABELS = frozenset({"dp_rank", "model_name", "name", "engine_type", "priority", "is_streaming"})
#: The figures that tell a server's load at a glance, first in a metrics Dump.
_HEADLINE = ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput", "cache_hit_rate",
             "num_retracted_requests_total", "num_used_tokens", "max_total_num_tokens")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,?)')
_ESCAPE = re.compile(r"\\(.)")


def _how(name: str) -> str:
    """``sum`` for what adds up over DP ranks (requests, tokens, throughput, counters,
    histogram sums and counts), ``max`` for ratios, speculative figures and constants."""
    if name in _PER_RANK:
        return "max"
    if name.endswith(("_total", "_sum", "_count", "_gsum", "_gcount")):   # counters, histograms
        return "sum"
    if name.startswith(("max_", "spec_")):
        return "max"
    if (name.endswith(("_reqs", "_tokens", "_throughput")) or name.startswith(("num_", "queues_"))
            or name == "decode_sum_seq_lens"):
        return "sum"
    return "max"


def _combine(name: str, values: list[float]) -> tuple[float, str]:
    how = _how(name)
    return (sum(values) if how == "sum" else max(values)), how


def _sample(line: str) -> tuple[str, dict[str, str], float] | None:
    """One exposition line ``name{label="v",...} value [timestamp]``, or None."""
    m = _NAME.match(line)
    if m is None:
        return None
    name, pos, labels = m.group(), m.end(), {}
    if line.startswith("{", pos):
        pos += 1
        while (lm := _LABEL.match(line, pos)) is not None:
            labels[lm.group(1)] = _ESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), lm.group(2))
            pos = lm.end()
            if not lm.group(3):
                break
        rest = line[pos:].lstrip()
        if not rest.startswith("}"):
            return None
        pos = len(line) - len(rest) + 1
    parts = line[pos:].split()
    if not 1 <= len(parts) <= 2:
        return None
    try:
        return name, labels, float(parts[0])
    except ValueError:
        return None


def _rank(value: str | None) -> tuple[int, int, str]:
    if value is None:
        return (0, 0, "")
    return (0, int(value), "") if value.isdigit() else (1, 0, value)


def read_metrics_text(path: str, text: str) -> Dump | None:
    """SGLang's ``/metrics`` (``sglang:name``, or ``sglang_name`` under Ray and in
    ``/v1/loads?format=prometheus``) as figures named without the prefix; None when the
    text has no SGLang metric.

    Each figure pools the label sets that differ only in DP rank, model, engine type,
    priority, streaming or process: summed for requests, tokens, throughput, counters and histogram
    sums and counts, the highest value for ratios (``token_usage``, ``cache_hit_rate``,
    ``utilization``), speculative figures and per-rank constants. ``combined`` names every
    figure pooled from more than one label set and how. The copies of one scheduler's
    figures that every TP/PP/EP rank (or process) reports count once (the lowest rank's); per-priority
    breakdowns are left out where their total (``priority=""``) is there; any other label
    (``mode``, ``stage``, ``phase``) keeps its own figure, named ``name{label="value"}``.
    Histogram buckets, ``_created`` stamps and NaN values are left out."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        sample = _sample(line)
        if sample is None:
            bad += 1
            continue
        name, labels, value = sample
        if not name.startswith(("sglang:", "sglang_")):
            continue
        short = name[len("sglang:"):]
        if short.endswith(("_bucket", "_created")) or not math.isfinite(value):
            continue
        series.setdefault(short, []).append((labels, value))
    if not series:
        return None

    figures: dict[str, Any] = {}
    combined: dict[str, str] = {}
    for short, samples in series.items():
        if any(labels.get("priority") == "" for labels, _ in samples):
            samples = [(labels, v) for labels, v in samples if labels.get("priority", "") == ""]
        lowest: dict[tuple[tuple[str, str], ...], tuple[tuple[tuple[int, int, str], ...], float]] = {}
        for labels, v in samples:
            key = tuple(sorted((k, x) for k, x in labels.items() if k not in _REPLICA_LABELS))
            rank = tuple(_rank(labels.get(k)) for k in _REPLICA_LABELS)
            if key not in lowest or rank < lowest[key][0]:
                lowest[key] = (rank, v)
        groups: dict[str, list[float]] = {}
        for key, (_, v) in lowest.items():
            own = [f'{k}="{x}"' for k, x in key if k not in _POOLED_LABELS]
            groups.setdefault(short + ("{" + ",".join(own) + "}" if own else ""), []).append(v)
        for fname, values in groups.items():
            figures[fname], how = _combine(short, values)
            if len(values) > 1:
                combined[fname] = how
    ordered = {k: figures[k] for k in _HEADLINE if k in figures}   # what a summary line shows first
    ordered.update(figures)
    if combined:
        ordered["combined"] = combined
    unread = [f"{bad} line(s) are not Prometheus samples"] if bad else []
    return Dump("incident", path, ordered, unread=unread)
