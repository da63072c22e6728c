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

A hang's victims are the ranks that time out; the rank that caused it is the one that
differs (:func:`_initiator`): the one that never enqueued the collective the others wait
on, the one whose events the rank-consensus checker hashed differently, the one whose
main thread is elsewhere. ``progress`` gives each rank's last sequence numbers and last
phase with the lines they rest on, ``stuck_on`` the collective, batch or requests the
log names, and ``stacks`` why stack dumps are missing, in the log's own words (py-spy not
installed, no ptrace permission, a py-spy too old for the Python) and which settings
would give more next time, each as the log shows it: on, off or not in this log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import PHASE_OF_KIND
from ..units import clip
from .config import SERVER_COMMAND
from .phases import phase_of_frames

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
        "what": "a TCPStore socket (the rendezvous store of torch.distributed) waited past its timeout",
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
        "per_request": True,
    },
    "pd_waiting": {
        "what": "PD disaggregation: a decode server did not receive a request's KV transfer-done signal",
        "setting": "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
        "default_s": 300,
        "note": "the request fails; the server goes on.",
        "source": "sglang python/sglang/srt/disaggregation/*/conn.py (KVPoll.WaitingForInput)",
        "ends_run": False,
        "per_request": True,
    },
    "health_check": {
        "what": "a health check (/health or /health_generate: the line does not say which) got no response "
                "from the detokenizer",
        "setting": "SGLANG_HEALTH_CHECK_TIMEOUT",
        "default_s": 20,
        "note": "the probe fails (a router or orchestrator may then restart the server).",
        "source": "sglang python/sglang/srt/entrypoints/http_server.py health_generate",
        "ends_run": False,
        "rankless": True,  # the HTTP server's: its records never name a rank
    },
    "no_progress": {
        "what": "no progress: the server never finished starting, its HTTP server refused the health check "
                "for longer than SGLang's scheduler watchdog waits for a forward step, and no rank printed a "
                "record after the first refusal",
        "setting": "SGLANG_WARMUP_TIMEOUT",
        "default_s": 300,
        "note": "no timer fired and no stack dump was taken: schedulers stuck outside a forward step (on a "
                "transfer, a lock, a peer) and schedulers that died without a record (defunct processes) "
                "look alike here; a py-spy dump of the schedulers and the process list tell them apart. "
                "SGLANG_WARMUP_TIMEOUT, set above 0, bounds the warm-up request: past it SGLang logs "
                "'Initialization failed. warmup error' and ends the server.",
        "source": "sglang python/sglang/srt/entrypoints/http_server.py health (503 until the warm-up request "
                  "is answered), _execute_server_warmup (SGLANG_WARMUP_TIMEOUT); the 300 s of utils/watchdog.py "
                  "--watchdog-timeout",
        "ends_run": True,
        "rankless": True,
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
                        "pd_timeout", "health_check_failed", "weights_not_ready",
                        "watchdog_detail", "pyspy_failed", "slow_pass", "rank_divergence", "consensus_enabled",
                        "thread_dump", "c10d_log", "watchdog_body", "pool_check"})
#: Kinds that alone make no hang (a slow pass is a stall the server came out of; a failed
#: dump, the checker's start-up notice, torch's notes): they only describe one. (A watchdog's
#: ``Scheduler debug info:`` header is no context: utils/watchdog.py prints it only once it fired.)
_CONTEXT_KINDS = frozenset({"pyspy_failed", "slow_pass", "consensus_enabled",
                            "thread_dump", "c10d_note", "watchdog_body", "pool_check"})
#: The bare lines of a ``Scheduler debug info:`` block (they carry no rank: the block's header does).
_DEBUG_BODY = frozenset({"watchdog_body", "pool_check"})
#: The records such lines follow: the debug info's header, and the scheduler watchdog's batch dump
#: (``self.cur_batch.batch_size()=N``, whose one message goes on with the batch's requests and the
#: pools on lines of their own).
_DEBUG_HEADS = frozenset({"watchdog_debug", "watchdog_detail"})
#: torch's notes that bear on what a hang's log could show (ProcessGroupNCCL.cpp)
_C10D_NOTES = ("FlightRecorder", "Flight Recorder", "TORCH_NCCL_TRACE_BUFFER_SIZE", "flight recorder")
#: The records of a py-spy dump (kept apart: a dump has many lines).
_DUMP_KINDS = frozenset({"pyspy_dump", "pyspy_process", "pyspy_thread", "pyspy_frame"})
_MAX_RECORDS = 512
_MAX_PYSPY = 8192
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_TITLE_RANK = re.compile(r"sglang::scheduler((?:_[A-Z_]*?[A-Z]+-?\d+)+)")
_RANK_PART = re.compile(r"(ATTN_CP|MOE_DP|[A-Z]+)(-?\d+)")


def _brief(kind: str, line: int, rank: str | None, ts: str | None, fields: Mapping[str, Any], text: str,
           file: str | None) -> dict[str, Any]:
    keep = {k: v for k, v in fields.items()
            if isinstance(v, (int, float, str, bool, dict)) and (k != "message" or kind == "watchdog_detail")}
    if kind == "thread_dump":
        keep = {"threads": fields["threads"]}
    return {"kind": kind, "line": line, "rank": rank, "ts": ts, "file": file, "text": clip(text, 400), "fields": keep}


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
        if kind == "thread_dump":  # faulthandler's timed dump: its threads, each innermost frame first
            fields = {"threads": _fh_threads(fields)}
        elif kind == "c10d_log":
            if not any(n in text for n in _C10D_NOTES):
                return
            kind = "c10d_note"
        elif kind in _DEBUG_BODY:  # only the lines right under a debug-info header (a pool check
            last = self.records[-1] if self.records else None  # also ends a leak warning)
            if last is not None and (last["line"] != line - 1 or last["kind"] not in _DEBUG_BODY | _DEBUG_HEADS):
                return  # (first of a part: the header may be the part's before; ``debug_blocks`` decides)
        target = self.pyspy if kind in _DUMP_KINDS else self.records
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

    def build(self, ranks: Sequence[str] = (), last_course_line: int = 0, env: Mapping[str, str] | None = None,
              kind_counts: Mapping[str, int] | None = None) -> Hang | None:
        """The hang this log shows, or None. Pure: the observer is not changed.

        ``ranks`` are the run's rank labels (to name c10d's global ``[rankN]`` as SGLang
        does); ``last_course_line`` is the last record of the run's course (a batch, a phase
        record, a progress bar), to tell whether a timer that does not stop the server was
        followed by more of it; ``env`` the environment the
        log shows and ``kind_counts`` its records per kind (``NCCL INFO`` lines show
        ``NCCL_DEBUG``), for what was on.
        """
        records = sorted(self.records, key=lambda r: r["line"])
        if not any(r["kind"] not in _CONTEXT_KINDS for r in records) and not self.pyspy:
            return None
        records_all = records
        records = [r for r in records if r["kind"] not in _CONTEXT_KINDS]
        reports = _soft_debug([_report(r, ranks) for r in records])
        fired = [p for p in reports if p["family"] is not None]
        failures = [p for p in reports if p["kind"] == "collective_failure"]
        dumps = _dumps(self.pyspy, records, ranks)
        divergence = [p for p in reports if p["kind"] == "rank_divergence"]
        if not fired and not failures:
            if not dumps and not divergence:
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
        # a timer that does not stop the server still ends the run when nothing was served after it;
        # one request's timer (PD's: the request fails, the server goes on) does not, where a window
        # simply ends after it
        server_timers = [p for p in fired if not TIMERS[p["family"]].get("per_request")]
        nothing_after = bool(server_timers) and (not last_course_line or server_timers[-1]["line"] > last_course_line)
        rank_list: list[str] = []
        for p in main:
            if p.get("rank") and p["rank"] not in rank_list:
                rank_list.append(p["rank"])
        if not main and divergence:
            main = divergence
            first = main[0]
            for p in main:
                if p.get("rank") and p["rank"] not in rank_list:
                    rank_list.append(p["rank"])
        # without a timer's words, a py-spy dump of an SGLang scheduler (its title, or SGLang's own
        # "Pyspy dump for PID" line) reports the hang: SGLang's watchdog or an operator took it
        reported = [] if main else [d for d in dumps if _of_scheduler(d)]
        if reported:  # the same py-spy session's dumps of the launcher before them begin the evidence
            reported = [d for d in dumps if _of_scheduler(d) or _of_launcher(d)]
        for d in reported:
            if d.get("rank") and d["rank"] not in rank_list:
                rank_list.append(d["rank"])
        context = _Context(records_all, env or {}, kind_counts or {})
        progress = _progress(collectives, dumps, context, reports)
        setting, note = timer.get("setting"), timer.get("note")
        if setting == _DIST_TIMEOUT and not _sglang_seen(kind_counts or {}, ranks):
            # torch's records alone (a training framework's workers under Ray): whose process group
            # it was, and so which setting gave it its timeout, is not in this log
            setting, note = None, _GROUP_UNKNOWN
        debug = debug_blocks(records_all)
        return Hang(
            timer=family if family else ("c10d_failure" if failures else
                                         "rank_divergence" if divergence else "pyspy_only"),
            timed_out=bool(fired),
            ends_run=bool(fired) and (ends or nothing_after),
            timeout_s=timeout_s,
            setting=setting,
            default_s=timer.get("default_s"),
            what=timer.get("what") or ("PyTorch's NCCL watchdog detected a failed collective: the message does "
                                       "not say whether it was an error or a timeout" if failures else
                                       _DIVERGENCE_WHAT if divergence else
                                       "py-spy dumps without a timer message"),
            note=note,
            source=timer.get("source"),
            families=families,
            ranks=rank_list,
            collectives=collectives,
            behind=behind,
            pyspy=dumps,
            exit_code=exit_codes[0]["fields"].get("exit_code") if exit_codes else None,
            first_line=first["line"] if first else (reported or dumps)[0]["line"] if dumps else 0,
            first_ts=first.get("ts") if first else None,
            evidence=[_evidence(p) for p in (main + exit_codes + reported)[:16]],
            dropped=self.dropped,
            initiator=_initiator(collectives, dumps, divergence, behind) or _odd_batch(debug),
            stuck_on=_stuck_on(collectives, context, debug),
            progress=progress,
            stacks=_stacks(dumps, context),
            debug_info=debug,
        )


_DIST_TIMEOUT = "--dist-timeout"
_GROUP_UNKNOWN = ("the log shows no record of an SGLang server, only torch's: whose process group it was, and "
                  "so what set its timeout (SGLang's --dist-timeout for its own, another framework's setting "
                  "for its workers'), is not in this log")


def _sglang_seen(kind_counts: Mapping[str, int], ranks: Sequence[str]) -> bool:
    """Whether the log holds a record only an SGLang server prints (one behind its rank prefix, a
    start-up phase's, a batch's, its server arguments): then the process groups its torch records
    name are SGLang's."""
    return bool(ranks) or any(kind_counts.get(kind) for kind in (*PHASE_OF_KIND, "server_args", "server_ready"))


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
    #: the rank that differs from the others (the cause, not the victims), why, and the lines
    initiator: dict[str, Any] | None = None
    #: what all ranks are stuck on, as far as the log names it: a collective, a batch, requests
    stuck_on: list[dict[str, Any]] = field(default_factory=list)
    #: per rank: the last sequence numbers and phase, with the lines they rest on
    progress: list[dict[str, Any]] = field(default_factory=list)
    #: per rank, the last ``Scheduler debug info:`` block: its batch, requests and pools
    debug_info: list[dict[str, Any]] = field(default_factory=list)
    #: the stack dumps there are, why there are none, and what to turn on next time
    stacks: dict[str, Any] = field(default_factory=dict)

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
    elif kind == "watchdog_detail":
        # the scheduler's watchdog prints its batch only once it has fired (scheduler.py's
        # watchdog_thread, after its loop; before the timeout line from v0.4.x on)
        out["family"] = "sglang_watchdog"
    elif kind == "watchdog_debug":
        # "{debug_name} debug info:" (v0.5.8+, utils/watchdog.py): printed only after the watchdog's
        # loop broke, before its py-spy dumps and its timeout line; whether it was the soft one
        # only that line says (``_soft_debug``)
        out["family"] = "sglang_watchdog"
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


def _soft_debug(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A watchdog's debug info takes the family of the timeout line its watchdog printed after it
    (the same rank and component): the soft watchdog's dumps too, and the server goes on."""
    for i, p in enumerate(reports):
        if p["kind"] != "watchdog_debug":
            continue
        after = next((q for q in reports[i + 1:] if q["kind"] == "watchdog_timeout" and q.get("rank") == p.get("rank")
                      and q.get("component") == p.get("component")), None)
        if after is not None:
            p["family"] = after["family"]
    return reports


def _collectives(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rank and collective (sequence number), what the watchdog printed about it.

    One timeout prints several lines (``[Rank N] Watchdog caught ...`` without the process
    group, then ``[PG .. Rank N] ... last completed ...`` with it): they are one entry.
    """
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    for p in reports:
        key = (p.get("rank"), p.get("seq"))
        cur = merged.setdefault(key, {"rank": p.get("rank"), "pg": None, "line": p["line"], "file": p.get("file")})
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
                "line": low["line"], "file": low.get("file"), "reason": "lowest completed sequence in its process group"}
        if best is None or cand["others_completed"] - cand["last_completed"] > best["others_completed"] - best["last_completed"]:
            best = cand
    return best


def title_rank(title: str) -> str | None:
    """``sglang::scheduler_DP0_TP1`` -> ``DP0 TP1``; ``sglang::scheduler_PP1_ATTN_CP4_TP4`` ->
    ``PP1 ATTN_CP4 TP4`` (SGLang's prefix of the rank), found anywhere in ``title``."""
    m = _TITLE_RANK.search(title or "")
    if not m:
        return None
    return " ".join(a + b for a, b in _RANK_PART.findall(m.group(1)))


def _dumps(pyspy: list[dict[str, Any]], records: list[dict[str, Any]], ranks: Sequence[str],
           main_funcs: list[list[str]] | None = None) -> list[dict[str, Any]]:
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
            if main_funcs is not None:
                main_funcs.append([])
        if cur is None:
            cur = {"pid": None, "title": None, "rank": None, "line": rec["line"], "threads": 0,
                   "main_function": None, "main_stack": [], "file": rec["file"], "text": rec["text"]}
            dumps.append(cur)
            if main_funcs is not None:
                main_funcs.append([])
        if kind == "pyspy_process":
            cur["title"] = f.get("title")
            if cur.get("pid") is None:
                cur["pid"] = f.get("pid")
            from_title = title_rank(f.get("title") or "")
            if from_title:
                cur["rank"] = from_title
                cur["rank_from"] = "process title"
        elif kind == "pyspy_thread":
            cur["threads"] += 1
            thread = {"name": f.get("name"), "state": f.get("state")}
            if f.get("name") == "MainThread":
                cur["main_state"] = f.get("state")
        elif kind == "pyspy_frame" and f.get("func") == "run_scheduler_process":
            cur["scheduler_frames"] = True  # a thread of it runs in SGLang's scheduler process
        if kind == "pyspy_frame" and thread is not None and thread["name"] != "MainThread":
            cur.setdefault("other_funcs", []).append(str(f.get("func")))  # (bounded by the observer's records)
        elif kind == "pyspy_frame" and thread is not None and thread["name"] == "MainThread":
            if main_funcs is not None:  # every frame, for the phase table (``dump_places``)
                main_funcs[-1].append(str(f.get("func")))
            # a native frame (py-spy --native) has its library and no line
            location = f"{f.get('path')}:{f.get('lineno')}" if f.get("lineno") is not None else f"{f.get('path')}"
            if cur["main_function"] is None and not _ADDRESS.fullmatch(str(f.get("func"))):  # not a bare address
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


def _of_scheduler(dump: Mapping[str, Any]) -> bool:
    """A py-spy dump of an SGLang scheduler process: its title (``sglang::scheduler_TP1``), or
    SGLang's own ``Pyspy dump for PID N`` line above it, or, with its header above the window
    (no title), a thread in ``run_scheduler_process``."""
    title = str(dump.get("title") or "")
    return title.startswith("sglang::scheduler") or not title and bool(dump.get("scheduler_frames")) or \
        str(dump.get("text") or "").rstrip().split("] ", 1)[-1].startswith("Pyspy dump for PID")


def _of_launcher(dump: Mapping[str, Any]) -> bool:
    """A py-spy dump of SGLang's launcher: its title is the server's command line."""
    return bool(SERVER_COMMAND.search(str(dump.get("title") or "")))


def dump_places(obs: HangObserver) -> list[tuple[dict[str, Any], str | None]]:
    """Each py-spy dump of a process the log names, with the phase its main thread's frames
    place it in (``model/phases.tsv``: an ``event_loop_*`` is serving), or None."""
    funcs: list[list[str]] = []
    dumps = _dumps(obs.pyspy, [], (), funcs)
    out = []
    for d, f in zip(dumps, funcs, strict=True):
        # py-spy prints the innermost frame first, a traceback last; where the main thread's frames
        # place nothing (cut above the dump's first thread line), its other threads' do (the
        # overlap thread's forward pass)
        phase = phase_of_frames([{"func": name} for name in reversed(f)]) or \
            phase_of_frames([{"func": name} for name in reversed(d.get("other_funcs") or [])])
        if d.get("rank") or _of_scheduler(d):
            out.append((d, phase))
    return out


def _evidence(p: dict[str, Any]) -> dict[str, Any]:
    return {"file": p["file"], "line": p["line"], "rank": p.get("rank"), "text": p["text"]}


_DIVERGENCE_WHAT = ("SGLang's rank-consensus checker found ranks whose scheduler decisions differ and ended "
                    "the process (os._exit(1)) before they could hang on a collective")
_THREAD_HEAD = re.compile(r"\s*(Current thread|Thread) (0x[0-9a-f]+)")
_RID = re.compile(r"\b(?:rid|req_id|request_id)['\"]?\s*[=:]\s*['\"]?([\w-]+)")
_BATCH_SIZE = re.compile(r"batch_size\(\)=(\d+)")
_PYSPY_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("not_installed", ("command not found", "py-spy: not found", "no such file", "not available"),
     "py-spy is not installed where the scheduler runs"),
    ("permission", ("eperm", "permission denied", "operation not permitted", "os error 1", "sys_ptrace"),
     "py-spy was not allowed to read the process (ptrace): no SYS_PTRACE capability or root"),
    ("pyspy_too_old", ("unsupported version of python", "failed to find python version"),
     "py-spy does not support this Python version (a newer py-spy does)"),
)
#: What to turn on next time, in the order worth doing, and what each gives.
_KNOBS: tuple[tuple[str, str], ...] = (
    ("SYS_PTRACE", "lets SGLang's watchdog dump every scheduler with py-spy (docker run --cap-add SYS_PTRACE)"),
    ("SGLANG_DEBUG_SLOW_SCHEDULER_PASS_MS", "faulthandler dumps every thread's stack when one scheduler pass takes "
                                            "longer than this, with a 'slow scheduler pass' line naming the pass"),
    ("SGLANG_ENABLE_RANK_CONSENSUS_CHECKER", "stops the server at the first scheduler decision on which ranks "
                                             "differ, naming the events, before the ranks hang on a collective"),
    ("NCCL_DEBUG=INFO", "NCCL's own lines: communicators, channels, and its errors with their cause"),
    ("TORCH_NCCL_TRACE_BUFFER_SIZE", "PyTorch's Flight Recorder: a dump of each rank's last collectives (and "
                                     "the stack of the one that failed) when the NCCL watchdog fires"),
)


def _fh_threads(fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """faulthandler's dump as threads and their frames (innermost first)."""
    lines = fields.get("lines") or []
    heads = [(n, m.group(2), m.group(1) == "Current thread") for n, t in lines
             if (m := _THREAD_HEAD.match(str(t)))]
    threads: list[dict[str, Any]] = []
    for i, (n, tid, current) in enumerate(heads[:16]):
        end = heads[i + 1][0] if i + 1 < len(heads) else 1 << 62
        frames = [f"{f.get('func')} ({f.get('path')}:{f.get('line')})" for f in fields.get("frames") or []
                  if n < (f.get("log_line") or 0) < end]
        threads.append({"thread": tid, "current": current, "line": n, "frames": frames[:12],
                        "function": frames[0].split(" (")[0] if frames else None})
    return threads


class _Context:
    """The records that describe a hang without being one, by kind, and what the log shows on."""

    def __init__(self, records: list[dict[str, Any]], env: Mapping[str, str], kind_counts: Mapping[str, int]) -> None:
        self.by_kind: dict[str, list[dict[str, Any]]] = {}
        for r in records:
            self.by_kind.setdefault(r["kind"], []).append(r)
        self.env = env
        self.kind_counts = kind_counts

    def of(self, kind: str) -> list[dict[str, Any]]:
        return self.by_kind.get(kind, [])


def _at(c: Mapping[str, Any]) -> dict[str, Any]:
    """Where a merged collective (or the rank behind) was first printed."""
    return {"file": c.get("file"), "line": c["line"], "rank": c.get("rank")}


def _line(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"file": r.get("file"), "line": r["line"], "rank": r.get("rank"), "text": r.get("text", "")[:300]}


def _slow_stack(slow: dict[str, Any], ctx: _Context) -> dict[str, Any] | None:
    """The thread of the faulthandler dump before a slow pass whose stack holds the pass
    (its label), else the dump's last thread (faulthandler prints the oldest last)."""
    dumps = [d for d in ctx.of("thread_dump") if d["line"] < slow["line"] and d.get("file") == slow.get("file")]
    if not dumps:
        return None
    dump = dumps[-1]
    threads = dump["fields"].get("threads") or []
    label = slow["fields"].get("label") or ""
    hit = next((t for t in threads if any(f.startswith(label + " (") for f in t["frames"])), None)
    thread = hit or (threads[-1] if threads else None)
    if thread is None:
        return None
    return {"function": thread["function"], "stack": thread["frames"], "line": dump["line"], "file": dump.get("file"),
            "thread": thread["thread"]}


def _progress(collectives: list[dict[str, Any]], dumps: list[dict[str, Any]], ctx: _Context,
              reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each rank's last sequence numbers and last phase, each with the line it rests on."""
    out: dict[str, dict[str, Any]] = {}

    def entry(rank: str) -> dict[str, Any]:
        return out.setdefault(rank, {"rank": rank, "last_enqueued": None, "last_completed": None,
                                     "waiting_on": None, "last_phase": None, "phase_from": None, "evidence": []})

    for c in collectives:
        e = entry(c["rank"])
        for key in ("last_enqueued", "last_completed"):
            if c.get(key) is not None:
                e[key] = c[key]
        if c.get("seq") is not None:
            e["waiting_on"] = {"op": c.get("op"), "seq": c["seq"], "pg": c.get("pg")}
        e["evidence"].extend(_line(p) for p in reports if p["kind"] in _COLLECTIVE_KINDS and p.get("rank") == c["rank"]
                             and p.get("seq") == c.get("seq") and p["line"] not in {x["line"] for x in e["evidence"]})
    phases: list[tuple[str, str, str, dict[str, Any]]] = []  # rank, phase, from, line
    for p in reports:
        if p["kind"] == "watchdog_timeout" and p.get("rank"):
            phases.append((p["rank"], "no forward progress (watchdog fired)", "watchdog", _line(p)))
    for c in collectives:  # one entry per rank and collective, its lines merged
        op = f"{c['op']} " if c.get("op") else ""
        phases.append((c["rank"], f"in collective {op}seq {c['seq']}", "NCCL watchdog",
                       {"file": c.get("file"), "line": c["line"], "rank": c["rank"], "text": ""}))
    for slow in ctx.of("slow_pass"):
        if not slow.get("rank"):
            continue
        f = slow["fields"]
        stack = _slow_stack(slow, ctx)
        where = f" in {stack['function']}" if stack and stack.get("function") else ""
        phase = f"slow scheduler pass {f.get('label')} ({f.get('took_ms')} ms){where}"
        if stack:  # the dump before it, as evidence too
            phases.append((slow["rank"], phase, "slow scheduler pass",
                           {"file": stack["file"], "line": stack["line"], "rank": None,
                            "text": f"faulthandler: thread {stack['thread']}: " + " <- ".join(stack["stack"][:4])}))
        phases.append((slow["rank"], phase, "slow scheduler pass", _line(slow)))
    for d in dumps:
        if d.get("rank") and d.get("main_function"):
            phases.append((d["rank"], f"main thread in {d['main_function']} ({d.get('main_location')})", "py-spy dump",
                           {"file": d.get("file"), "line": d["line"], "rank": d["rank"], "text": d.get("text", "")}))
    for p in reports:
        if p["kind"] == "rank_divergence" and p.get("rank"):
            phases.append((p["rank"], "stopped by the rank-consensus checker", "rank-consensus checker", _line(p)))
    for rank, phase, source, line in phases:  # later sources are the more precise: py-spy over a timer
        e = entry(rank)
        e["last_phase"], e["phase_from"] = phase, source
        if line["line"] not in {x["line"] for x in e["evidence"]}:
            e["evidence"].append(line)
    for e in out.values():
        e["evidence"] = sorted(e["evidence"], key=lambda x: x["line"])[:6]
    return sorted(out.values(), key=lambda e: e["evidence"][0]["line"] if e["evidence"] else 0)


def _initiator(collectives: list[dict[str, Any]], dumps: list[dict[str, Any]], divergence: list[dict[str, Any]],
               behind: dict[str, Any] | None) -> dict[str, Any] | None:
    """The rank that differs from the others, with why and the lines; None when the log
    cannot tell (with two ranks that disagree, ``candidates`` names both)."""
    if divergence:
        by_hash: dict[str, list[dict[str, Any]]] = {}
        for p in divergence:
            by_hash.setdefault(p["fields"].get("local_hash") or "", []).append(p)
        ranks = sorted({p.get("rank") or "-" for p in divergence})
        if len(by_hash) >= 2:
            groups = sorted(by_hash.values(), key=len)
            if len(groups[0]) == 1 and len(groups[-1]) >= 2 and len(groups[1]) >= 2:
                odd = groups[0][0]
                return {"rank": odd.get("rank"), "why": f"its events hash differently from the other "
                        f"{sum(len(g) for g in groups[1:])} ranks' (rank-consensus checker)",
                        "evidence": [_line(odd), _line(groups[-1][0])]}
            return {"rank": None, "candidates": ranks,
                    "why": "the rank-consensus checker found the ranks' events differ; with no majority the log "
                           "does not say which rank is the odd one", "evidence": [_line(p) for p in divergence[:4]]}
    # the collective the others wait on, and a rank that never enqueued it
    waiting: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for c in collectives:
        if c.get("seq") is not None:
            waiting.setdefault((c.get("pg"), c["seq"]), []).append(c)
    for (pg, seq), victims in sorted(waiting.items(), key=lambda kv: -len(kv[1])):
        for c in collectives:
            if c.get("pg") == pg and c.get("last_enqueued") is not None and c["last_enqueued"] < seq \
                    and c["rank"] not in {v["rank"] for v in victims}:
                return {"rank": c["rank"], "why": f"it never enqueued the collective the others wait on (PG {pg} "
                        f"seq {seq}); its last enqueued is {c['last_enqueued']}",
                        "evidence": [_at(c)] + [_at(v) for v in victims[:3]]}
    if behind is not None:
        return {"rank": behind["rank"], "why": f"the lowest completed sequence in PG {behind['pg']}: "
                f"{behind['last_completed']} against {behind['others_completed']} on the others",
                "evidence": [_at(behind)]}
    mains = [d for d in dumps if d.get("rank") and d.get("main_function")]
    if len(mains) >= 3:
        funcs: dict[str, list[dict[str, Any]]] = {}
        for d in mains:
            funcs.setdefault(d["main_function"], []).append(d)
        if len(funcs) == 2:
            few, many = sorted(funcs.values(), key=len)
            if len(few) == 1:
                odd = few[0]
                return {"rank": odd["rank"], "why": f"its main thread is in {odd['main_function']} while "
                        f"{len(many)} other ranks' are in {many[0]['main_function']} (py-spy)",
                        "evidence": [{"file": odd.get("file"), "line": odd["line"], "rank": odd["rank"]},
                                     {"file": many[0].get("file"), "line": many[0]["line"], "rank": many[0]["rank"]}]}
    return None


def debug_blocks(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rank, the last ``Scheduler debug info:`` block: the header's rank and line, and what
    its bare lines below print (utils/watchdog.py, create_scheduler_watchdog's dump_info):
    ``batch_size`` (``scheduler.cur_batch.batch_size()=N``), ``rids`` of
    ``scheduler.cur_batch.reqs=[Req(rid=..), ..]`` (the first 8; ``requests`` counts them all),
    and ``pools`` (each pool's check: ``total``, ``available``, ``evictable``, ``line``)."""
    blocks: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    last_line = -1
    for r in sorted(records, key=lambda r: r["line"]):
        if r["kind"] == "watchdog_debug" and r["fields"].get("component") == "Scheduler":
            cur = {"rank": r.get("rank"), "line": r["line"], "file": r.get("file"), "batch_size": None,
                   "rids": [], "requests": None, "pools": {}, "evidence": [_line(r)]}
            blocks[r.get("rank") or "-"] = cur
        elif cur is not None and r["kind"] in _DEBUG_BODY and r["line"] == last_line + 1:
            text = r["fields"].get("message") or r["text"]
            if r["kind"] == "pool_check":
                f = r["fields"]
                cur["pools"][f.get("pool")] = {k: f.get(k) for k in ("total", "available", "evictable")} | {
                    "line": r["line"]}
            elif (size := _BATCH_SIZE.search(text)) is not None:
                cur["batch_size"] = int(size.group(1))
            else:
                rids = list(dict.fromkeys(_RID.findall(text)))
                cur["rids"], cur["requests"] = rids[:8], len(rids)
            cur["evidence"].append({**_line(r), "rank": cur["rank"]})  # the header's rank
        else:
            cur = None
        last_line = r["line"]
    return [b for b in blocks.values() if len(b["evidence"]) > 1]


def _odd_batch(debug: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one rank whose debug info shows another batch than all the others' (three ranks or more)."""
    shown = [b for b in debug if b.get("rank") and (b["batch_size"] is not None or b["rids"])]
    if len(shown) < 3:
        return None
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for b in shown:
        groups.setdefault((b["batch_size"], tuple(b["rids"])), []).append(b)
    if len(groups) != 2:
        return None
    few, many = sorted(groups.values(), key=len)
    if len(few) != 1:
        return None
    odd, other = few[0], many[0]
    return {"rank": odd["rank"], "why": f"its watchdog debug info shows a batch of {_batch_words(odd)} while "
            f"{len(many)} other ranks show {_batch_words(other)}",
            "evidence": [_at(odd), _at(other)]}


def _batch_words(b: Mapping[str, Any]) -> str:
    size = f"{b['batch_size']} requests" if b.get("batch_size") is not None else "requests"
    return size + (f" (first rid {b['rids'][0]})" if b.get("rids") else " (no rid printed)")


def _stuck_on(collectives: list[dict[str, Any]], ctx: _Context,
              debug: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """What the ranks are stuck on, as the log names it: the collective they wait on, the
    batch SGLang's watchdog printed (the ranks whose debug info shows the same batch
    together), the requests in the consensus checker's events."""
    out: list[dict[str, Any]] = []
    waiting: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for c in collectives:
        if c.get("seq") is not None:
            waiting.setdefault((c.get("pg"), c["seq"], c.get("op")), []).append(c)
    for (pg, seq, op), members in sorted(waiting.items(), key=lambda kv: -len(kv[1]))[:2]:
        out.append({"what": "collective", "op": op, "seq": seq, "pg": pg,
                    "ranks": [m["rank"] for m in members],
                    "evidence": [_at(m) for m in members[:4]]})
    for r in ctx.of("watchdog_detail")[:2]:
        body = [r]  # and the lines its message goes on with (the requests, the pools)
        for b in sorted(ctx.of("watchdog_body") + ctx.of("pool_check"), key=lambda b: b["line"]):
            if b["line"] == body[-1]["line"] + 1:
                body.append(b)
        text = "\n".join(b["fields"].get("message") or b["text"] for b in body)
        size = _BATCH_SIZE.search(text)
        rids = list(dict.fromkeys(_RID.findall(text)))
        out.append({"what": "batch", "batch_size": int(size.group(1)) if size else None, "rids": rids[:8],
                    "rank": r.get("rank"), "evidence": [_line(b) for b in body[:4]]})
    same: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for b in debug:
        if b["batch_size"] is not None or b["rids"]:
            same.setdefault((b["batch_size"], tuple(b["rids"])), []).append(b)
    for members in sorted(same.values(), key=lambda m: -len(m))[:2]:
        b = members[0]
        out.append({"what": "batch", "batch_size": b["batch_size"], "rids": b["rids"], "rank": b.get("rank"),
                    "ranks": [m.get("rank") for m in members], "source": "debug info",
                    "evidence": [_at(m) for m in members[:4]]})
    for r in ctx.of("rank_divergence")[:4]:
        text = r["fields"].get("divergent_events") or ""
        rids = list(dict.fromkeys(_RID.findall(text)))
        out.append({"what": "consensus events", "events": clip(text, 300), "rids": rids[:8], "rank": r.get("rank"),
                    "evidence": [_line(r)]})
    return out


def pyspy_failure_reason(error: str) -> str | None:
    """Which of the known causes a py-spy failure's own text names, or None."""
    low = error.lower()
    for reason, needles, _ in _PYSPY_FAILURES:
        if any(n in low for n in needles):
            return reason
    return None


def _stacks(dumps: list[dict[str, Any]], ctx: _Context) -> dict[str, Any]:
    """The stack dumps the log holds, why there are none (as the log says), what to turn on."""
    failures = []
    for r in ctx.of("pyspy_failed"):
        error = r["fields"].get("error") or ""
        reason = pyspy_failure_reason(error)
        failures.append({"reason": reason, "what": next((w for k, _, w in _PYSPY_FAILURES if k == reason),
                                                        "py-spy failed; its error is quoted"),
                         "error": error[:300], "pid": r["fields"].get("pid"), **_line(r)})
    with_main = [d for d in dumps if d.get("main_function")]
    fh = ctx.of("thread_dump")
    if failures:
        first = failures[0]
        why = f"{first['what']} (line {first['line']}{', ' + first['rank'] if first.get('rank') else ''}: " \
              f"{first['error']})"
    elif dumps and not with_main:
        why = "the py-spy dumps in this log show no main thread (cut off)"
    elif dumps or fh:
        why = None
    else:
        why = "not in this log"
    return {"pyspy_dumps": len(dumps), "pyspy_main_threads": len(with_main), "faulthandler_dumps": len(fh),
            "missing_why": why, "pyspy_failures": failures[:8], "next_time": _next_time(dumps, failures, ctx)}


def _env_on(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value not in (None, "", "0", "false", "False") else None



#: Settings whose records show them on, in the order looked for.
_SHOWN_BY = {"SGLANG_DEBUG_SLOW_SCHEDULER_PASS_MS": ("slow_pass", "thread_dump"),
             "SGLANG_ENABLE_RANK_CONSENSUS_CHECKER": ("consensus_enabled", "rank_divergence")}

def _next_time(dumps: list[dict[str, Any]], failures: list[dict[str, Any]], ctx: _Context) -> list[dict[str, Any]]:
    """Each setting that shows more of a hang, as this log shows it: on, off, or not in this log."""
    out = []
    for name, gives in _KNOBS:
        status, evidence = "not in this log", None
        if name == "SYS_PTRACE":
            denied = [f for f in failures if f["reason"] == "permission"]
            if denied:
                status, evidence = "off", {k: denied[0][k] for k in ("file", "line", "rank", "text")}
            elif any(d.get("threads") for d in dumps):
                d = next(d for d in dumps if d.get("threads"))
                status, evidence = "on", {"file": d.get("file"), "line": d["line"], "rank": d.get("rank"),
                                          "text": "py-spy read the process"}
        elif name in _SHOWN_BY:  # the records it makes, else the log's environment
            seen = next((got for kind in _SHOWN_BY[name] if (got := ctx.of(kind))), None)
            if seen:
                status, evidence = "on", _line(seen[0])
            elif _env_on(ctx.env, name):
                status, evidence = "on", {"text": f"{name}={ctx.env[name]} in the log's environment"}
        elif name == "NCCL_DEBUG=INFO":
            n = ctx.kind_counts.get("nccl_debug", 0)
            if n:
                status, evidence = "on", {"text": f"{n} lines of NCCL's own log (NCCL INFO/WARN)"}
            elif ctx.env.get("NCCL_DEBUG"):
                status, evidence = ("on" if ctx.env["NCCL_DEBUG"].upper() in ("INFO", "TRACE") else "off",
                                    {"text": f"NCCL_DEBUG={ctx.env['NCCL_DEBUG']} in the log's environment"})
        elif name == "TORCH_NCCL_TRACE_BUFFER_SIZE":
            notes = ctx.of("c10d_note")
            off = [n for n in notes if "disabled" in n["text"] or "not found" in n["text"]]
            if off:
                status, evidence = "off", _line(off[0])
            elif _env_on(ctx.env, name):
                status, evidence = "on", {"text": f"{name}={ctx.env[name]} in the log's environment"}
            elif notes:
                status, evidence = "on", _line(notes[0])
        out.append({"setting": name, "status": status, "gives": gives, "evidence": evidence})
    if any(f["reason"] == "not_installed" for f in failures):
        f = next(f for f in failures if f["reason"] == "not_installed")
        out.insert(0, {"setting": "py-spy", "status": "not installed", "gives": "install py-spy (pip install py-spy) where the "
                       "schedulers run, so the watchdog's dump has stacks",
                       "evidence": {k: f[k] for k in ("file", "line", "rank", "text")}})
    if any(f["reason"] == "pyspy_too_old" for f in failures):
        f = next(f for f in failures if f["reason"] == "pyspy_too_old")
        out.insert(0, {"setting": "py-spy", "status": "too old", "gives": "a py-spy release that supports the "
                       "server's Python", "evidence": {k: f[k] for k in ("file", "line", "rank", "text")}})
    return out
