"""Every real excerpt in fixtures/real/ against its MANIFEST.tsv labels.

The labels were written by hand from the public threads the excerpts come from
(source column). Where a label rests on the thread rather than on the excerpt's text,
fixtures/real/overrides.yml says what the text supports and why; everything else is
checked as written, key figures included.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from logforensics import iter_events, summarize_file
from logforensics.model.run import RunSummary

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
ROWS = list(csv.DictReader((REAL / "MANIFEST.tsv").open(encoding="utf-8"), delimiter="\t"))
OVERRIDES: dict[str, Any] = yaml.safe_load((REAL / "overrides.yml").read_text(encoding="utf-8"))
NOT_A_VALUE = {"n/a", "unknown", ""}


def _ids(rows: list[dict[str, str]]) -> list[str]:
    return [r["file"][:3] for r in rows]


#: Labels of the second corpus that the records are read for but the run model does not
#: yet use (strict: a label that starts to pass fails here until its entry is removed).
PENDING: dict[tuple[str, str], str] = {}


def _rows(test: str) -> list[Any]:
    return [pytest.param(r, id=r["file"][:3], marks=[pytest.mark.xfail(reason=PENDING[(test, r["file"][:3])],
                                                                       strict=True)]
                         if (test, r["file"][:3]) in PENDING else [])
            for r in ROWS]


@pytest.fixture(scope="module")
def analysed() -> dict[str, tuple[RunSummary, list[Any]]]:
    out = {}
    for row in ROWS:
        path = REAL / row["file"]
        out[row["file"]] = (summarize_file(path), list(iter_events(path)))
    return out


def expected(row: dict[str, str], label: str, value: Any) -> Any:
    override = OVERRIDES.get(row["file"], {}).get(label)
    if override is not None:
        assert override.get("reason"), f"override of {label} in {row['file']} needs a reason"
        return override["expect"]
    return value


def test_every_real_log_has_a_manifest_row() -> None:
    logs = sorted(p.name for p in REAL.glob("*.log"))
    assert logs == sorted(r["file"] for r in ROWS)
    assert set(OVERRIDES) <= set(logs)
    labels = {"outcome", "crash_phase", "exception", "crashed_ranks", "figures"}
    assert all(set(o) <= labels for o in OVERRIDES.values())


@pytest.mark.parametrize("row", _rows("outcome"))
def test_outcome(row: dict[str, str], analysed: Any) -> None:
    summary, events = analysed[row["file"]]
    label = row["outcome"]
    if label == "partial":  # "the window shows neither readiness nor the failure"
        served = any(e.kind in ("decode_batch", "prefill_batch", "retract") for e in events)  # a batch's lines
        want = "ready" if served else "incomplete"
    else:
        want = expected(row, "outcome", label)
    assert summary.outcome == want, summary.outcome_reason


@pytest.mark.parametrize("row", _rows("crash"))
def test_crash(row: dict[str, str], analysed: Any) -> None:
    summary, _ = analysed[row["file"]]
    crash = summary.crash
    if summary.outcome != "crashed":
        assert crash is None or summary.outcome == "hung"
        return
    assert crash is not None
    phase = expected(row, "crash_phase", row["crash_phase"])
    if phase not in NOT_A_VALUE:
        assert crash.phase == phase
    exc = row["exception"]
    if exc == "none":  # the process died without a Python exception
        assert crash.exception is None
    elif exc not in NOT_A_VALUE and not exc.endswith("?"):
        assert crash.exception == exc
    ranks = row["crashed_ranks"]
    if ranks not in NOT_A_VALUE:
        want = [r.strip() for r in ranks.split(",")]
        assert crash.ranks == want
        assert crash.first_rank == want[0]


# ---------------------------------------------------------------- key figures
def _mem(key: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    return lambda s, _: [m.figure(key) for m in s.memory.values() if m.figure(key) is not None]


def _pools(key: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    """A figure of a rank's KV pools: the rank's own (its first pool's) and every pool's, where a
    rank made several (a draft model's, a hybrid model's: the labels name each line's)."""
    def get(s: RunSummary, _: list[Any]) -> list[Any]:
        return [v for m in s.memory.values()
                for v in [m.figure(key), *(getattr(p, key) for p in m.kv_pools or ())] if v is not None]
    return get


def _oom(key: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    def get(s: RunSummary, _: list[Any]) -> list[Any]:
        return [e["fields"]["oom"][key] for e in _exceptions(s) if e["fields"]["oom"]]
    return get


def _exceptions(s: RunSummary) -> list[dict[str, Any]]:
    """The out-of-memory figures of every traceback, of every error the run logged, and of the
    crash (a native record's: a C++ exception's what())."""
    return ([{"fields": {"oom": o.oom.to_dict() if o.oom else None}} for d in s.exceptions for o in d.occurrences]
            + [{"fields": {"oom": e.oom.to_dict()}} for e in s.errors if e.oom]
            + [{"fields": {"oom": s.crash.oom.to_dict()}} for _ in [s.crash] if s.crash and s.crash.oom
               and not any(o.oom for d in s.exceptions for o in d.occurrences)])


def _events(kind: str, key: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    return lambda _, evs: [e.fields[key] for e in evs if e.kind == kind and e.fields.get(key) is not None]


def _progress(key: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    return lambda _, evs: [e.fields.get(key) for e in evs if e.kind == "progress" and e.fields.get(key) is not None]


def _capture_bs(s: RunSummary, evs: list[Any]) -> list[Any]:
    """The capture's batch-size list when printed (its own line, or its begin line's ``bs=[...]``);
    else the number of graphs (tqdm total)
    and the batch size shown in the bar: the labels use either (see MEMBERSHIP)."""
    lists = [e.fields["bs_list"] for e in evs if e.kind in ("capture_bs", "capture_begin") and e.fields.get("bs_list")]
    totals = [e.fields["progress"]["total"] for e in evs if e.kind == "progress" and "Capturing" in (e.fields.get("desc") or "")]
    bars = [e.fields["bs"] for e in evs if e.kind == "progress" and e.fields.get("bs") is not None]
    return lists or totals[-1:] + bars[-1:]


#: Figures whose label names one of several readings of the same log text.
MEMBERSHIP = {"capture_bs"}


def _server_arg(key: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    """A setting in effect as the log gives it: its server_args, else its launch command."""
    return lambda s, _: ([s.server_args[key]] if key in s.server_args
                         else [s.launch_args[key]] if key in (s.launch_args or {}) else [])


def _pool(name: str, *keys: str) -> Callable[[RunSummary, list[Any]], list[Any]]:
    """A figure of one pool of the summary's pools (``model/pools.py``), by its keys in turn."""
    def get(s: RunSummary, _: list[Any]) -> list[Any]:
        value: Any = (s.pools.to_dict()["pools"] if s.pools else {}).get(name)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return [] if value is None else [value]
    return get


FIGURES: dict[str, Callable[[RunSummary, list[Any]], list[Any]]] = {
    "kv_tokens": _mem("kv_tokens"),
    "K": _pools("k_gib"),
    "V": _pools("v_gib"),
    "kv_size": _mem("kv_gib"),
    "pool_end_avail": _pools("pool_end_avail_gib"),
    # free memory as a capture began: the rank's own, or a draft model's where only that is in the log
    "capture_begin_avail": lambda s, e: _mem("capture_begin_avail_gib")(s, e) or _mem("draft_capture_begin_avail_gib")(s, e),
    "capture_end_avail": _mem("capture_end_avail_gib"),
    "graph_capture_s": _mem("capture_elapsed_s"),
    "graph_mem": _mem("capture_mem_gib"),
    "load_begin_avail": _mem("load_begin_avail_gib"),
    # the rank's own and, where a speculative draft model loaded after the target's graphs, the draft's
    "load_end_avail": lambda s, e: _mem("load_end_avail_gib")(s, e) + _mem("draft_load_end_avail_gib")(s, e),
    "weight_mem": lambda s, e: _mem("weights_gib")(s, e) + _mem("draft_weights_gib")(s, e),
    "load_elapsed_s": lambda s, e: _mem("load_elapsed_s")(s, e) + _mem("draft_load_elapsed_s")(s, e),
    "max_total_num_tokens": _mem("max_total_num_tokens"),
    "context_len": _mem("context_len"),
    "max_running_requests": _mem("max_running_requests"),
    "chunked_prefill": lambda s, e: (_mem("chunked_prefill_size")(s, e) or _server_arg("chunked_prefill_size")(s, e)
                                     or [s.launch_args.get("chunked_prefill_size")]),
    "mem_fraction_static": _server_arg("mem_fraction_static"),
    "context_length": _server_arg("context_length"),
    "tried_alloc": _oom("tried_gib"),
    "gpu_total": _oom("total_gib"),
    "free": _oom("free_gib"),
    "torch_alloc": _oom("allocated_gib"),
    "in_use": _oom("in_use_gib"),
    "nccl": lambda s, _: [s.versions["nccl"] + ("+cuda" + s.versions["cuda"] if "cuda" in s.versions else "")]
    if "nccl" in s.versions else [],
    "accept_len": _events("decode_batch", "accept_len"),
    "accept_rate": _events("decode_batch", "accept_rate"),
    "gen_tps": _events("decode_batch", "gen_throughput_tok_s"),
    "running_req": _events("decode_batch", "running_req"),
    "full_tokens": _events("decode_batch", "full_token"),
    "full_token_usage": _events("decode_batch", "full_token_usage"),
    "mamba_num": _events("decode_batch", "mamba_num"),
    # a hybrid model's pools, one by one (model/pools.py)
    "full_pool_tokens": _pool("full", "size"),
    "swa_pool_tokens": _pool("swa", "size"),
    "full_pool": _pool("full", "gib"),
    "swa_pool": _pool("swa", "gib"),
    "full_usage_peak": _pool("full", "peak_usage"),
    "mamba_usage_peak": _pool("mamba", "peak_usage"),
    "mamba_usage_last": _pool("mamba", "last_usage"),
    "full_total": _pool("full", "state", "total"),
    "full_available": _pool("full", "state", "available"),
    "full_evictable": _pool("full", "state", "evictable"),
    "swa_total": _pool("swa", "state", "total"),
    "swa_available": _pool("swa", "state", "available"),
    "swa_evictable": _pool("swa", "state", "evictable"),
    "post_capture_order": lambda s, _: [s.pools.order.order if s.pools.order else None] if s.pools else [],
    "new_tokens": _events("prefill_batch", "new_token"),
    "cached_tokens": _events("prefill_batch", "cached_token"),
    "input_tps": _events("prefill_batch", "input_throughput_tok_s"),
    "warmup_prefill_new_tokens": _events("prefill_batch", "new_token"),
    "capture_bs": _capture_bs,
    "capture_bs_max": lambda s, e: [max(b) for b in (_capture_bs(s, e) or []) if isinstance(b, list)],
    "capture_avail": _progress("avail_gib"),
    "piecewise_num_tokens": _progress("num_tokens"),
    # the capture's last bar read, else the summary's (a bar with no description, CudaGraphRunner's
    # before it had one, is the capture's when drawn during it)
    "progress": lambda s, evs: ([f"{e.fields['progress']['n']}/{e.fields['progress']['total']}"
                                 for e in evs if e.kind == "progress" and "Captur" in (e.fields.get("desc") or "")]
                                or [f"{bar.n}/{bar.total}" for bars in s.progress.values()
                                    for phase, bar in bars.items() if phase == "cuda_graph_capture"])[-1:],
    "sigquit_lines": lambda s, _: [len(s.notices.get("sigquit", []))],
    # fatal and timeout records (read/fatal.py)
    "watchdog_timeout_s": _events("watchdog_timeout", "watchdog_timeout_s"),
    "watchdog_fired": lambda _, evs: [e.ts[11:19] for e in evs if e.kind == "watchdog_timeout" and e.ts],
    # a failed child's exit code, as its parent logs it (a scheduler that returned, 0, is none), or
    # as the crash gives it (the launcher's "Rank 0 scheduler died ... (exit code: -6)")
    "exit_code": lambda s, evs: [e.fields["exit_code"] for e in evs if e.kind in ("child_failed", "child_terminated",
                                 "subprocess_crashed") and e.fields.get("exit_code") not in (None, 0)]
    + ([s.crash.exit_code] if s.crash is not None and s.crash.exit_code is not None else []),
    "child_failed": lambda _, evs: [e.ts[11:19] for e in evs if e.kind == "child_failed" and e.ts],
    "failed_seq": _events("collective_failure", "seq"),
    "last_enqueued": lambda _, evs: [e.fields["last_enqueued"] for e in evs if e.kind.startswith("collective_")
                                     and e.fields.get("last_enqueued") is not None],
    "last_completed": lambda _, evs: [e.fields["last_completed"] for e in evs if e.kind.startswith("collective_")
                                      and e.fields.get("last_completed") is not None],
    # a store timeout's own record, or a store error's message (the exception's ``store`` figures)
    "socket_timeout_ms": lambda _, evs: [e.fields["timeout_ms"] for e in evs if e.kind == "collective_timeout"
                                         and e.fields.get("family") == "c10d_store"]
    + [e.fields["store"]["timeout_ms"] for e in evs if e.kind == "exception" and e.fields.get("store")],
    "store_port": lambda _, evs: [e.fields["peer_port"] for e in evs if e.kind == "collective_timeout"
                                  and e.fields.get("peer_port") is not None]
    + [e.fields["store"]["port"] for e in evs if e.kind == "exception" and (e.fields.get("store") or {}).get("port")],
    # the hang's own account (model/hang.py): what it is stuck on, why its stacks are missing
    "stuck_batch_size": lambda s, _: [x.batch_size for x in (s.hang.stuck_on if s.hang else []) if x.what == "batch"],
    "stuck_rid": lambda s, _: [r for x in (s.hang.stuck_on if s.hang else []) for r in x.rids],
    "pyspy_failed_pid": _events("pyspy_failed", "pid"),
    "stacks_missing": lambda s, _: [f.reason for f in (s.hang.stacks.pyspy_failures if s.hang and s.hang.stacks else [])],
    "block": _events("device_assert", "block"),
    "threads": lambda _, evs: [e.fields["thread"][0] for e in evs if e.kind == "device_assert"],
    "hsa_nodes_faulted": lambda _, evs: [f"node-{e.fields['hsa_node']}" for e in evs if e.kind == "hsa_fault"],
    "address": _events("hsa_fault", "address"),
    "retracted_reqs": _events("retract", "retracted_reqs"),
    "new_token_ratio": lambda _, evs: list(dict.fromkeys(
        f"{e.fields['new_token_ratio_before']:.4f}->{e.fields['new_token_ratio_after']:.4f}"
        for e in evs if e.kind == "retract" and e.fields.get("new_token_ratio_before") is not None)),
    "training_step": lambda _, evs: [f"{e.fields['progress']['n']}/{e.fields['progress']['total']}"
                                     for e in evs if e.kind == "progress"][-1:],
    "step_time_s": lambda _, evs: [e.fields["progress"]["s_per_it"] for e in evs
                                   if e.kind == "progress" and "s_per_it" in e.fields["progress"]],
}

#: Figures that describe the thread or the machine rather than the run model.
NOT_RUN_FIGURES = {
    "commId": "an NCCL communicator id inside NCCL INFO text",
    "net": "NCCL transport named in NCCL INFO text",
    "nranks": "NCCL INFO text",
    "pid": "a Ray worker pid in a wrapper",
    "ptxas_exit": "inside a CalledProcessError message",
    "cuda_container": "a container banner",
    "cuda_graph_addresses": "a torch compile debug line",
    "piecewise_max_tokens": "a piecewise capture list",
    "ready_after_s": "a difference of two timestamps chosen by the labeller",
    "nccl_init_total_s": "NCCL INFO text",
    "tcpstore_assert": "inside a RuntimeError message",
    "assert": "a paraphrase of the assertion text (device_assert's kernel and assertion fields)",
    "ray_dedup": "the distinct de-duplication suffixes, as text (each is a ray_dedup event with its count)",
    "worker_ports": "a router's log text, not an SGLang server's",
    "removed_pod": "a gateway's log text, not an SGLang server's",
    "policy": "a gateway's log text, not an SGLang server's",
}

_NUM = re.compile(r"^-?[\d.]+")


def _parse_value(text: str) -> tuple[str, Any]:
    """('single'|'range'|'each'|'seq'|'list', value) from a MANIFEST figure."""
    text = re.sub(r"\s+\(.*\)$", "", text.strip())  # a remark after the value ("(nil)" is a value)
    text = re.sub(r"^(-?[\d.]+) per \w+$", r"\1", text)  # "1 per line": the same value on every line
    if text.startswith("["):
        return "list", [int(x) for x in text.strip("[]").split(",")]
    if "," in text:
        return "seq", [_num(x) for x in text.split(",")]
    if "/" in text and not re.fullmatch(r"\d+/\d+", text):
        return "each", [_num(x) for x in text.split("/")]
    if re.fullmatch(r"[\d.]+(GB|GiB|MiB)?-[\d.]+(GB|GiB|MiB)?", text):
        a, b = text.split("-")
        return "range", (_num(a), _num(b))
    return "single", _num(text)


def _num(text: str) -> Any:
    text = text.strip()
    m = re.fullmatch(r"([\d.]+)\s*(GB|GiB|MiB)", text)
    if m:
        value = float(m.group(1))
        return value / 1024 if m.group(2) == "MiB" else value
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 0.006 * max(1.0, abs(b) / 100)
    return a == b


def figure_cases(rows: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    """(file, figure, value) of each MANIFEST row's ``key_figures`` (``a=1; b=2``)."""
    return [(row["file"], key.strip(), value.strip())
            for row in rows
            for key, _, value in (kv.partition("=") for kv in row["key_figures"].split(";"))
            if "=" in row["key_figures"] and value]


FIGURE_CASES = figure_cases(ROWS)


@pytest.mark.parametrize("file,key,value", FIGURE_CASES, ids=[f"{f[:3]}-{k}" for f, k, _ in FIGURE_CASES])
def test_key_figure(file: str, key: str, value: str, analysed: Any) -> None:
    if key in NOT_RUN_FIGURES:
        assert key not in FIGURES
        return
    assert key in FIGURES, f"no extractor for MANIFEST figure {key!r}: add one or say why in NOT_RUN_FIGURES"
    summary, events = analysed[file]
    got = FIGURES[key](summary, events)
    override = OVERRIDES.get(file, {}).get("figures", {}).get(key)
    if override is not None:
        assert override.get("reason")
        value = override["expect"]
    assert_figure(key, got, value)


def assert_figure(key: str, got: list[Any], value: str) -> None:
    """``got`` (a figure's values in a summary) agrees with the MANIFEST's ``value``."""
    shape, want = _parse_value(value)
    assert got, f"{key}: nothing found"
    if shape == "single" and key in MEMBERSHIP:
        assert want in got, (got, want)
    elif shape == "single":
        assert all(_close(g, want) for g in got), (got, want)
    elif shape == "range":
        assert _close(min(got), want[0]) and _close(max(got), want[1]), (got, want)
    elif shape == "each":
        assert sorted(got) == pytest.approx(sorted(want), abs=0.006), (got, want)
    elif shape == "seq":
        assert got == pytest.approx(want, abs=0.006), (got, want)
    else:
        assert got[0] == want
