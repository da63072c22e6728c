"""Hangs: which timer fired, on which ranks, at which collective, and who is behind.

A hung SGLang server is stopped by one of several timers, each with its own wording,
default and knob. Users confuse them: ``--watchdog-timeout`` sets SGLang's scheduler
watchdog and does not change PyTorch's NCCL watchdog, whose 10 minutes come from the
process group's timeout (sgl-project/sglang#8232; SGLang passes ``--dist-timeout`` to
``torch.distributed.init_process_group``). :data:`TIMERS` is the table of them, with the
source each fact comes from.

:class:`HangObserver` keeps the records that bear on a hang (bounded), merges in order
(the parallel reader), and :meth:`HangObserver.build` turns them into a :class:`Hang`:
the timer, its timeout and knob, per rank the collective it was in (``op``, ``seq``) and
the watchdog's ``last_enqueued``/``last_completed`` sequence numbers, the rank that is
behind (the lowest completed sequence in a process group), and, where SGLang printed
py-spy dumps, the function each rank's main thread was in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The timers, by family. ``ends_run``: firing stops the server (abort, SIGQUIT), so the run
#: is ``hung``; the others fail requests or a probe and the server may go on.
TIMERS: dict[str, dict[str, Any]] = {
    "c10d_collective": {
        "what": "PyTorch's NCCL watchdog: a collective did not complete within the process group's timeout",
        "setting": "--dist-timeout",
        "default_s": 600,
        "note": "SGLang passes --dist-timeout to torch.distributed.init_process_group; unset, PyTorch's "
                "NCCL default of 10 minutes applies. --watchdog-timeout is SGLang's scheduler watchdog "
                "and does not change this timer (sgl-project/sglang#8232).",
        "source": "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (watchdog), "
                  "ProcessGroupNCCL.hpp kProcessGroupNCCLDefaultTimeout; sglang server_args.py --dist-timeout",
        "ends_run": True,
    },
    "c10d_heartbeat": {
        "what": "PyTorch's heartbeat monitor: the NCCL watchdog thread itself made no progress",
        "setting": "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
        "default_s": 480,
        "note": "TORCH_NCCL_ENABLE_MONITORING=0 turns the monitor off; older PyTorch used 600 s. "
                "Neither --watchdog-timeout nor --dist-timeout changes it.",
        "source": "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp heartbeatMonitor",
        "ends_run": True,
    },
    "c10d_store": {
        "what": "a TCPStore socket (rendezvous during distributed init) waited past its timeout",
        "setting": "--dist-timeout",
        "default_s": 1800,
        "note": "the store uses init_process_group's timeout (PyTorch's default 30 minutes); on several "
                "nodes it usually means a node never joined: check --dist-init-addr and the network.",
        "source": "pytorch torch/csrc/distributed/c10d/socket.cpp, TCPStore.cpp; torch/distributed/rendezvous.py",
        "ends_run": True,
    },
    "sglang_watchdog": {
        "what": "SGLang's scheduler watchdog: a forward step made no progress",
        "setting": "--watchdog-timeout",
        "default_s": 300,
        "note": "the hard watchdog dumps the schedulers with py-spy, then sends SIGQUIT to the parent "
                "(exit code 131 = 128 + SIGQUIT); --soft-watchdog-timeout only dumps.",
        "source": "sglang python/sglang/srt/utils/watchdog.py; managers/scheduler.py watchdog_thread (<= v0.5.3)",
        "ends_run": True,
    },
    "sglang_soft_watchdog": {
        "what": "SGLang's soft watchdog: a step was slow; it dumps and the server goes on",
        "setting": "--soft-watchdog-timeout",
        "default_s": None,
        "note": "dumps only; the server is not stopped.",
        "source": "sglang python/sglang/srt/utils/watchdog.py",
        "ends_run": False,
    },
    "pd_bootstrap": {
        "what": "PD disaggregation: a prefill server did not receive a request's KV indices from the decode server",
        "setting": "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
        "default_s": 300,
        "note": "the request fails; the server goes on.",
        "source": "sglang python/sglang/srt/disaggregation/*/conn.py (KVPoll.Bootstrapping)",
        "ends_run": False,
    },
    "pd_waiting": {
        "what": "PD disaggregation: a decode server did not receive a request's KV transfer-done signal",
        "setting": "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
        "default_s": 300,
        "note": "the request fails; the server goes on.",
        "source": "sglang python/sglang/srt/disaggregation/*/conn.py (KVPoll.WaitingForInput)",
        "ends_run": False,
    },
    "health_check": {
        "what": "the /health_generate probe got no response from the detokenizer",
        "setting": "SGLANG_HEALTH_CHECK_TIMEOUT",
        "default_s": 20,
        "note": "the probe fails (a router or orchestrator may then restart the server).",
        "source": "sglang python/sglang/srt/entrypoints/http_server.py health_generate",
        "ends_run": False,
    },
    "weights_ready": {
        "what": "the HTTP server waited for the initial weights and gave up",
        "setting": "SGLANG_WAIT_WEIGHTS_READY_TIMEOUT",
        "default_s": 120,
        "note": "printed by v0.5.23's http_server.py.",
        "source": "sglang python/sglang/srt/entrypoints/http_server.py",
        "ends_run": False,
    },
}

#: The reader's collective records (``read/fatal.py``): their ``family`` -> timer family.
#: ``collective_failure`` is the watchdog's "failure detected": an error or a timeout, the
#: message does not say which, so it names no timer.
_C10D_FAMILY: dict[str, str] = {
    "nccl_watchdog": "c10d_collective",
    "nccl_heartbeat": "c10d_heartbeat",
    "c10d_store": "c10d_store",
}
_COLLECTIVE_KINDS = ("collective_timeout", "collective_failure")
#: Kinds the observer keeps (the run model hands it these, in order).
HANG_KINDS = frozenset({"collective_timeout", "collective_failure", "watchdog_timeout", "watchdog_debug",
                        "pyspy_dump", "pyspy_process", "pyspy_thread", "pyspy_frame", "child_failed",
                        "pd_timeout", "health_check_failed", "weights_not_ready"})
_MAX_RECORDS = 512
_MAX_PYSPY = 8192
_TITLE_RANK = re.compile(r"sglang::scheduler((?:_[A-Z_]*?[A-Z]+-?\d+)+)")
_RANK_PART = re.compile(r"(ATTN_CP|MOE_DP|[A-Z]+)(-?\d+)")


def _brief(kind: str, line: int, rank: str | None, ts: str | None, fields: Mapping[str, Any], text: str,
           file: str | None) -> dict[str, Any]:
    keep = {k: v for k, v in fields.items() if isinstance(v, (int, float, str, bool, dict)) and k != "message"}
    return {"kind": kind, "line": line, "rank": rank, "ts": ts, "file": file, "text": text[:400], "fields": keep}


class HangObserver:
    """The hang-related records of one log (or a part of it), in order, bounded."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.pyspy: list[dict[str, Any]] = []
        self.dropped = 0

    def observe(self, kind: str, line: int, rank: str | None, ts: str | None, fields: Mapping[str, Any],
                text: str, file: str | None = None) -> None:
        if kind not in HANG_KINDS:
            return
        target = self.pyspy if kind.startswith("pyspy_") else self.records
        limit = _MAX_PYSPY if target is self.pyspy else _MAX_RECORDS
        if len(target) >= limit:
            self.dropped += 1
            return
        target.append(_brief(kind, line, rank, ts, fields, text, file))

    def merge(self, later: HangObserver) -> None:
        """Append the records of the part of the log that followed this one's."""
        room = _MAX_RECORDS - len(self.records)
        self.records.extend(later.records[:max(room, 0)])
        proom = _MAX_PYSPY - len(self.pyspy)
        self.pyspy.extend(later.pyspy[:max(proom, 0)])
        self.dropped += later.dropped + max(0, len(later.records) - max(room, 0)) + \
            max(0, len(later.pyspy) - max(proom, 0))

    def build(self, ranks: Sequence[str] = (), last_serving_line: int = 0) -> Hang | None:
        """The hang this log shows, or None. Pure: the observer is not changed.

        ``ranks`` are the run's rank labels (to name c10d's global ``[rankN]`` as SGLang
        does); ``last_serving_line`` is the last batch record, to tell whether a timer that
        does not stop the server was followed by more serving.
        """
        if not self.records and not self.pyspy:
            return None
        reports = [_report(r, ranks) for r in self.records]
        fired = [p for p in reports if p["family"] is not None]
        failures = [p for p in reports if p["kind"] == "collective_failure"]
        dumps = _dumps(self.pyspy, self.records, ranks)
        if not fired and not failures:
            if not dumps:
                return None
        main = fired or failures
        first = main[0] if main else None
        family = first["family"] if first else None
        timer = TIMERS.get(family or "", {})
        timeout_s = next((p["timeout_s"] for p in main if p.get("family") == family and p.get("timeout_s") is not None),
                         None)
        collectives = _collectives([p for p in reports if p["kind"] in _COLLECTIVE_KINDS
                                    and p.get("seq") is not None and p.get("rank")])
        behind = _behind(collectives)
        families = []
        for p in fired:
            if p["family"] not in families:
                families.append(p["family"])
        exit_codes = [p for p in reports if p["kind"] == "child_failed"]
        ends = any(TIMERS[f]["ends_run"] for f in families)
        # a timer that does not stop the server still ends the run when nothing was served after it
        nothing_after = bool(fired) and (not last_serving_line or fired[-1]["line"] > last_serving_line)
        rank_list: list[str] = []
        for p in main:
            if p.get("rank") and p["rank"] not in rank_list:
                rank_list.append(p["rank"])
        return Hang(
            timer=family if family else ("c10d_failure" if failures else "pyspy_only"),
            timed_out=bool(fired),
            ends_run=bool(fired) and (ends or nothing_after),
            timeout_s=timeout_s,
            setting=timer.get("setting"),
            default_s=timer.get("default_s"),
            what=timer.get("what") or ("PyTorch's NCCL watchdog detected a failed collective: the message does "
                                       "not say whether it was an error or a timeout" if failures else
                                       "py-spy dumps without a timer message"),
            note=timer.get("note"),
            source=timer.get("source"),
            families=families,
            ranks=rank_list,
            collectives=collectives,
            behind=behind,
            pyspy=dumps,
            exit_code=exit_codes[0]["fields"].get("exit_code") if exit_codes else None,
            first_line=first["line"] if first else (dumps[0]["line"] if dumps else 0),
            first_ts=first.get("ts") if first else None,
            evidence=[_evidence(p) for p in (main + exit_codes)[:16]],
            dropped=self.dropped,
        )


@dataclass(frozen=True)
class Hang:
    """``summary --json``'s ``hang`` object; see ``docs/summary.md``."""

    timer: str
    timed_out: bool
    ends_run: bool
    timeout_s: float | None
    setting: str | None
    default_s: float | None
    what: str
    note: str | None
    source: str | None
    families: list[str]
    ranks: list[str]
    collectives: list[dict[str, Any]]
    behind: dict[str, Any] | None
    pyspy: list[dict[str, Any]]
    exit_code: int | None
    first_line: int
    first_ts: str | None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def rank_label(global_rank: int | None, ranks: Sequence[str]) -> str | None:
    """c10d's global ``[rankN]`` as SGLang names it.

    The label whose TP number is N when exactly one is (with DP attention TP numbers are
    global); ``TPN`` in a pure-TP run (every label ``TPn``), where the global rank is the
    TP rank; else ``rankN``.
    """
    if global_rank is None:
        return None
    matches = [r for r in ranks if re.search(rf"(?:^| )TP{global_rank}(?: |$)", r)]
    if len(matches) == 1:
        return matches[0]
    if ranks and all(re.fullmatch(r"TP\d+", r) for r in ranks):
        return f"TP{global_rank}"
    return f"rank{global_rank}"


def _report(rec: dict[str, Any], ranks: Sequence[str]) -> dict[str, Any]:
    kind, f = rec["kind"], rec["fields"]
    out: dict[str, Any] = {"kind": kind, "line": rec["line"], "ts": rec["ts"], "file": rec["file"],
                           "text": rec["text"], "rank": rec["rank"], "family": None, "timeout_s": None,
                           "fields": f}
    if kind in _COLLECTIVE_KINDS:
        out["family"] = _C10D_FAMILY.get(f.get("family") or "") if kind == "collective_timeout" else None
        head = f.get("head") or {}
        out["rank"] = rank_label(head.get("global_rank"), ranks) or rec["rank"]
        out["pg"] = f.get("pg")
        out["op"] = f.get("op_type")
        out["ran_ms"] = f.get("ran_for_ms")
        for key in ("seq", "last_enqueued", "last_completed"):
            if f.get(key) is not None:
                out[key] = f[key]
        if f.get("timeout_ms") is not None:
            out["timeout_s"] = f["timeout_ms"] / 1000.0
        elif f.get("timeout_s") is not None:
            out["timeout_s"] = float(f["timeout_s"])
    elif kind == "watchdog_timeout":
        out["family"] = "sglang_soft_watchdog" if f.get("soft") is True else "sglang_watchdog"
        out["timeout_s"] = f.get("watchdog_timeout_s")
        out["component"] = f.get("component")
    elif kind == "pd_timeout":
        out["family"] = "pd_bootstrap" if f.get("stage") == "bootstrap" else "pd_waiting"
    elif kind == "health_check_failed":
        out["family"] = "health_check"
        out["timeout_s"] = f.get("timeout_s")
    elif kind == "weights_not_ready":
        out["family"] = "weights_ready"
        out["timeout_s"] = f.get("timeout_s")
    return out


def _collectives(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rank and collective (sequence number), what the watchdog printed about it.

    One timeout prints several lines (``[Rank N] Watchdog caught ...`` without the process
    group, then ``[PG .. Rank N] ... last completed ...`` with it): they are one entry.
    """
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    for p in reports:
        key = (p.get("rank"), p.get("seq"))
        cur = merged.setdefault(key, {"rank": p.get("rank"), "pg": None, "line": p["line"]})
        for k in ("pg", "op", "seq", "last_enqueued", "last_completed", "ran_ms"):
            if p.get(k) is not None and cur.get(k) is None:
                cur[k] = p[k]
        if p.get("timeout_s") is not None and cur.get("timeout_s") is None:
            cur["timeout_s"] = p["timeout_s"]
    return sorted(merged.values(), key=lambda c: c["line"])


def _behind(collectives: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank with the lowest completed sequence in its process group, when ranks differ."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for c in collectives:
        if c.get("last_completed") is not None or c.get("seq") is not None:
            groups.setdefault(c.get("pg"), []).append(c)
    best = None
    for pg, members in groups.items():
        if len(members) < 2:
            continue

        def done(c: dict[str, Any]) -> int:
            return c["last_completed"] if c.get("last_completed") is not None else c["seq"] - 1

        low = min(members, key=done)
        high = max(members, key=done)
        if done(low) == done(high):
            continue
        cand = {"rank": low["rank"], "pg": pg, "last_completed": done(low), "others_completed": done(high),
                "line": low["line"], "reason": "lowest completed sequence in its process group"}
        if best is None or cand["others_completed"] - cand["last_completed"] > best["others_completed"] - best["last_completed"]:
            best = cand
    return best


def _title_rank(title: str) -> str | None:
    """``sglang::scheduler_DP0_TP1`` -> ``DP0 TP1``."""
    m = _TITLE_RANK.search(title or "")
    if not m:
        return None
    return " ".join(a + b for a, b in _RANK_PART.findall(m.group(1)))


def _dumps(pyspy: list[dict[str, Any]], records: list[dict[str, Any]], ranks: Sequence[str]) -> list[dict[str, Any]]:
    """py-spy dumps, each with its PID, process title, rank and main-thread stack.

    A dump starts at ``Pyspy dump for PID N`` (whose prefix names the rank that printed it:
    the scheduler dumps itself) or at ``Process N: title`` when the header is outside the
    excerpt. The rank comes from the title (``sglang::scheduler_TPn``), else from the header.
    """
    dumps: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    thread: dict[str, Any] | None = None
    for rec in pyspy:
        kind, f = rec["kind"], rec["fields"]
        if kind == "pyspy_dump" or (kind == "pyspy_process" and (cur is None or cur.get("title"))):
            cur = {"pid": f.get("pid"), "title": None, "rank": rec["rank"], "line": rec["line"], "threads": 0,
                   "main_function": None, "main_stack": [], "file": rec["file"], "text": rec["text"]}
            dumps.append(cur)
            thread = None
        if cur is None:
            cur = {"pid": None, "title": None, "rank": None, "line": rec["line"], "threads": 0,
                   "main_function": None, "main_stack": [], "file": rec["file"], "text": rec["text"]}
            dumps.append(cur)
        if kind == "pyspy_process":
            cur["title"] = f.get("title")
            if cur.get("pid") is None:
                cur["pid"] = f.get("pid")
            from_title = _title_rank(f.get("title") or "")
            if from_title:
                cur["rank"] = from_title
                cur["rank_from"] = "process title"
        elif kind == "pyspy_thread":
            cur["threads"] += 1
            thread = {"name": f.get("name"), "state": f.get("state")}
            if f.get("name") == "MainThread":
                cur["main_state"] = f.get("state")
        elif kind == "pyspy_frame" and thread is not None and thread["name"] == "MainThread":
            location = f"{f.get('path')}:{f.get('lineno')}"
            if cur["main_function"] is None:
                cur["main_function"] = f.get("func")
                cur["main_location"] = location
            if len(cur["main_stack"]) < 12:
                cur["main_stack"].append(f"{f.get('func')} ({location})")
    for d in dumps:
        if d.get("rank") and "rank_from" not in d:
            d["rank_from"] = "dump header prefix"
    by_pid = {d["pid"]: d["rank"] for d in dumps if d.get("pid") and d.get("rank")}
    for d in dumps:
        if not d.get("rank") and d.get("pid") in by_pid:
            d["rank"], d["rank_from"] = by_pid[d["pid"]], "pid"
    return dumps


def _evidence(p: dict[str, Any]) -> dict[str, Any]:
    return {"file": p["file"], "line": p["line"], "rank": p.get("rank"), "text": p["text"]}
