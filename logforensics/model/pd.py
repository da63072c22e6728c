"""Prefill/decode disaggregation: a file's role and its KV-transfer failures, from its records.

A disaggregated launch is a prefill server, a decode server (each possibly several
nodes) and a router, each with its own log; the failure often shows on one side only.
:class:`PDObserver` watches one file's events beside the run model and keeps, bounded:

* the file's **role**: ``disaggregation_mode`` in ``server_args`` or
  ``--disaggregation-mode`` in the launch command; frames in ``event_loop_*_disagg_prefill``
  / ``_disagg_decode``; the PD fields of batch records (``#inflight-req`` on a prefill
  server, ``#transfer-req`` on a decode server); router and gateway lines
  (``[Router (Rust)] ... - INFO -``, ``sglang_router_rs::...: src/...rs:N:``, ``smg::...``);
* **KV-transfer failures**: ``Decode transfer failed`` / ``Prefill transfer failed`` /
  ``Prefill bootstrap failed for request rank=N ... rid ... bootstrap_room=R with exception
  KVTransferError(bootstrap_room=R): ...``, with rank, rid and room, so that the two sides
  can be joined on them;
* **timeouts**: ``Some requests fail to receive KV Cache transfer done signal`` (the decode
  side's ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``), ``Some requests timed out when
  bootstrapping`` (``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``), ``Request R timed out after
  Xs in KVPoll.WaitingForInput``;
* the router's **warnings and errors** (level, module, source file and line, message).

These lines are ``other`` records of the grammar (nothing is dropped or re-read): this
module only reads what their text says. Observers of consecutive parts of one log
merge by concatenation (``merge``), as the parallel reader needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..events import Event
from ..units import clip

_MAX = 256
#: The role of a file that holds records of a prefill and of a decode server.
BOTH = "prefill+decode"
#: The router's message once it serves (sgl-router/src/server.rs: ``Router ready | workers: [..]``).
ROUTER_READY = "Router ready"
_ROLE_FROM_ARGS = re.compile(r"disaggregation[_-]mode[=\s]+'?\"?(prefill|decode)\b")
_FAILED = re.compile(
    r"(?P<side>Decode|Prefill) (?P<stage>transfer|bootstrap) failed for request rank=(?P<rank>\d+)"
    r".*?\brid=?'?(?P<rid>[\w\-]+)'?"
    r"(?:.*?\bbootstrap_room=(?P<room>-?\d+))?"
    r"(?: with exception (?P<exc>.*))?")
_KV_ERROR = re.compile(r"KVTransferError\(bootstrap_room=(?P<room>-?\d+)\):\s*(?P<msg>.*)")
_TIMED_OUT = re.compile(r"Request (?P<room>-?\d+) timed out after (?P<s>[\d.]+)s in KVPoll\.(?P<poll>\w+)")
_WAITING = "Some requests fail to receive KV Cache transfer done signal"
_BOOTSTRAP = "Some requests timed out when bootstrapping"
_ROUTER_PY = re.compile(r"\[Router \((?P<impl>Rust|Python)\)\] (?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
                        r" - (?P<level>[A-Z]+) - (?P<msg>.*)")
_ROUTER_RS = re.compile(r"(?:(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?)\s+)?(?:(?P<level>TRACE|DEBUG|INFO|"
                        r"WARN|WARNING|ERROR)\s+)?(?:\w+\{[^{}]*\}:\s*)*"  # tracing's spans: 'http_request{method=POST ...}: '
                        r"(?P<module>(?:sglang_router_rs|smg)(?:::\w+)*): "
                        r"(?P<src>\S*\.rs):(?P<src_line>\d+): (?P<msg>.*)")
#: The kinds this observer reads; everything else (nearly all of a serving log) is skipped.
#: Texts of which an ``other`` record must contain one for this observer to read it
#: (``_other``): a reader may count the others without showing them to it. A router line
#: is read only when one of its patterns matches, and each needs a text of its own:
#: ``.rs:`` (``_ROUTER_RS``'s source file) or ``[Router (`` (``_ROUTER_PY``); ``::`` alone,
#: which random bytes hold once in 256 lines, is not enough.
OTHER_NEEDS = (".rs:", "[Router (", "failed for request", _WAITING, _BOOTSTRAP)
_KINDS = frozenset({"other", "router_log", "decode_batch", "prefill_batch", "server_args", "launch_command",
                    "exception", "pd_timeout", "kv_transfer_failed"})
#: The kinds of records this observer alone reads: a reader must hand each of them over as an
#: event (the bulk reader would otherwise only count them).
OBSERVED = frozenset({"router_log", "kv_transfer_failed"})
_DISAGG_FRAME = re.compile(r"event_loop_\w*disagg_(prefill|decode)")


class PDObserver:
    """One file's role and PD records; see the module docstring."""

    def __init__(self) -> None:
        self.role_votes: dict[str, int] = {}
        self.role_evidence: dict[str, dict[str, Any]] = {}
        self.failures: list[dict[str, Any]] = []
        self.timeouts: list[dict[str, Any]] = []
        self.router: list[dict[str, Any]] = []  # warnings and errors
        self.router_lines = 0
        #: The router's own readiness (``Router ready | workers: [...]``): line and text.
        self.router_ready: dict[str, Any] | None = None
        self.batches_with_pd_fields = 0
        self._kinds = _KINDS

    def batches_without_pd_fields(self, n: int) -> None:
        """``n`` batch records without PD fields, read as columns by the bulk reader
        (``model.columns``): the state depends on PD-field batches alone, so nothing changes."""

    def observe_all(self, events: Sequence[Event]) -> None:
        kinds = self._kinds
        for ev in events:
            kind = ev.kind
            if kind not in kinds:
                continue
            if kind in ("other", "router_log", "kv_transfer_failed"):
                self._other(ev)
            elif kind == "pd_timeout":  # the grammar's record of the two PD timeout warnings
                self._failure_text(ev)
            elif kind in ("decode_batch", "prefill_batch"):
                if self.batches_with_pd_fields >= 4:
                    # the role is read from the first batch records with PD fields; the state
                    # depends on those alone (the bulk reader hands only them over)
                    self._kinds = kinds = _KINDS - {"decode_batch", "prefill_batch"}
                else:
                    f = ev.fields
                    if kind == "decode_batch" and f.get("transfer_req") is not None:
                        self._vote("decode", ev, "#transfer-req in a decode batch")
                        self.batches_with_pd_fields += 1
                    elif kind == "prefill_batch" and (f.get("inflight_req") is not None
                                                      or f.get("unbootstrapped_req") is not None):
                        printed = "#inflight-req" if f.get("inflight_req") is not None else "#unbootstrapped-req"
                        self._vote("prefill", ev, f"{printed} in a prefill batch")  # the field the line printed
                        self.batches_with_pd_fields += 1
            elif kind in ("server_args", "launch_command"):
                m = _ROLE_FROM_ARGS.search(ev.text)
                if m:
                    self._vote(m.group(1), ev, f"disaggregation mode in {kind}", weight=10)
            elif kind == "exception":
                for fr in ev.fields.get("frames") or []:
                    m = _DISAGG_FRAME.search(str(fr.get("func") or "") + " " + str(fr.get("code") or ""))
                    if m:
                        self._vote(m.group(1), ev, f"frame {m.group(0)}", weight=5)
                        break
                self._failure_text(ev)

    def _vote(self, role: str, ev: Event, why: str, weight: int = 1) -> None:
        self.role_votes[role] = self.role_votes.get(role, 0) + weight
        if role not in self.role_evidence:
            self.role_evidence[role] = {"file": ev.file, "line": ev.line, "rank": ev.rank, "why": why,
                                        "text": clip(ev.text, 300)}

    def _other(self, ev: Event) -> None:
        text = ev.text
        if "::" in text or "[Router (" in text:
            m = _ROUTER_RS.search(text) or _ROUTER_PY.search(text)
            if m:
                self.router_lines += 1
                if self.router_lines <= 4:
                    self._vote("router", ev, "router log line")
                if self.router_ready is None and m.group("msg").startswith(ROUTER_READY):
                    self.router_ready = {"file": ev.file, "line": ev.line, "text": clip(text, 300)}
                level = (m.group("level") or "").upper()
                if level in ("WARN", "WARNING", "ERROR") and len(self.router) < _MAX:
                    g = m.groupdict()
                    self.router.append({"file": ev.file, "line": ev.line, "ts": _iso(g.get("ts")) or ev.ts,
                                        "level": level, "module": g.get("module"), "src": g.get("src"),
                                        "src_line": int(g["src_line"]) if g.get("src_line") else None,
                                        "message": clip(g.get("msg", ""), 400), "rank": None, "text": clip(text, 400)})
                return
        self._failure_text(ev)

    def _failure_text(self, ev: Event) -> None:
        text = ev.text
        if "failed for request" in text:
            m = _FAILED.search(text)
            if m and len(self.failures) < _MAX:
                exc = m.group("exc") or ""
                k = _KV_ERROR.search(exc)
                t = _TIMED_OUT.search(exc)
                self.failures.append({
                    "side": m.group("side").lower(), "stage": m.group("stage"), "rank": ev.rank,
                    "rank_index": int(m.group("rank")), "rid": m.group("rid"),
                    "room": m.group("room") or (k.group("room") if k else None),
                    "exception": exc[:400], "message": (k.group("msg") if k else exc)[:300],
                    "timed_out_s": float(t.group("s")) if t else None, "poll": t.group("poll") if t else None,
                    "file": ev.file, "line": ev.line, "ts": ev.ts, "text": clip(text, 400)})
                self._vote(m.group("side").lower(), ev, f"{m.group('side')} {m.group('stage')} failure")
        elif ev.kind == "kv_transfer_failed":  # no request named: a decode server that could not reach
            side = str(ev.fields.get("side"))  # a prefill server's bootstrap ("Error fetching prefill parallel info")
            self._vote(side.lower(), ev, f"{side} {ev.fields.get('stage')} failure")
        elif (_WAITING in text or _BOOTSTRAP in text) and len(self.timeouts) < _MAX:
            waiting = _WAITING in text
            self.timeouts.append({"timer": "waiting" if waiting else "bootstrap",
                                  "setting": "SGLANG_DISAGGREGATION_WAITING_TIMEOUT" if waiting
                                  else "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
                                  "rank": ev.rank, "file": ev.file, "line": ev.line, "ts": ev.ts, "text": clip(text, 400)})
            self._vote("decode" if waiting else "prefill", ev, "PD timeout warning")

    @property
    def role(self) -> str | None:
        """The file's role; ``prefill+decode`` when it holds records of both servers (a
        paste or a merged log of the two), which no single role describes."""
        if not self.role_votes:
            return None
        if "prefill" in self.role_votes and "decode" in self.role_votes:
            return BOTH
        return max(self.role_votes.items(), key=lambda kv: kv[1])[0]

    def warnings(self) -> list[str]:
        """What the reader must know about a file that holds both servers' records: each
        numbers its ranks from TP0, and the model keys a rank by its name alone."""
        if self.role != BOTH:
            return []
        p, d = self.role_evidence["prefill"], self.role_evidence["decode"]
        return [f"this log holds records of a prefill server (line {p['line']}) and of a decode server (line "
                f"{d['line']}), each with its own ranks from TP0: a rank name that both print is one row here, "
                "its phase, last line and figures those of either server"]

    def _role_evidence(self) -> dict[str, Any] | None:
        role = self.role
        if role != BOTH:
            return self.role_evidence.get(role or "")
        d, p = self.role_evidence["decode"], self.role_evidence["prefill"]
        return {**d, "why": f"{d['why']} at line {d['line']}; {p['why']} at line {p['line']}"}

    def merge(self, later: PDObserver) -> None:
        """The observer of this part followed by ``later``'s part of the same log."""
        for role, n in later.role_votes.items():
            self.role_votes[role] = self.role_votes.get(role, 0) + n
        for role, e in later.role_evidence.items():
            self.role_evidence.setdefault(role, e)
        self.failures = (self.failures + later.failures)[:_MAX]
        self.timeouts = (self.timeouts + later.timeouts)[:_MAX]
        self.router = (self.router + later.router)[:_MAX]
        self.router_lines += later.router_lines
        self.router_ready = self.router_ready or later.router_ready
        self.batches_with_pd_fields += later.batches_with_pd_fields
        if self.batches_with_pd_fields >= 4:
            self._kinds = _KINDS - {"decode_batch", "prefill_batch"}

    def to_dict(self) -> dict[str, Any]:
        """What the summary's ``nodes.<node>.pd`` holds (empty when the file shows no PD)."""
        if not (self.role_votes or self.failures or self.timeouts or self.router):
            return {}
        out = {"role": self.role, "role_evidence": self._role_evidence(),
               "kv_failures": self.failures, "timeouts": self.timeouts, "router_errors": self.router,
               "router_lines": self.router_lines}
        if self.router_ready is not None:
            out["router_ready"] = self.router_ready
        return out


def _iso(ts: str | None) -> str | None:
    if not ts:
        return None
    return ts.replace(" ", "T").rstrip("Z").split(".")[0]
