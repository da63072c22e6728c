"""The figures of fatal and timeout records that the grammar only delimits.

The grammar decides that a record is a collective timeout, a device-side assertion or
an HSA fault; the figures inside such texts (sequence numbers, timeouts, block and
thread indices) are read here, by converters that :mod:`.grammar` attaches to the
record's text span. Every pattern matches digits with ``\\d`` only, so the fast path may
reuse a plan for lines that differ only in their digits.
"""

from __future__ import annotations

import re
from typing import Any

from ..events.types import INT, STR, Type, list_of, struct
from .values import typed

#: torch c10d / NCCL watchdog and store wordings, across torch versions:
#: (kind, family, pattern). ``collective_failure`` is what the watchdog reports when a
#: collective failed or timed out without saying which; ``collective_timeout`` says it
#: timed out. Both mean the ranks stopped making progress together.
_COLLECTIVE: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("collective_timeout", "nccl_watchdog", re.compile(
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op_type>\w+)"
        r"(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?, Timeout\(ms\)=(?P<timeout_ms>\d+)\)"
        r"(?: ran for (?P<ran_for_ms>\d+) milliseconds before timing out)?")),
    ("collective_timeout", "nccl_watchdog", re.compile(
        r"Timeout at NCCL work: (?P<seq>\d+), last enqueued NCCL work: (?P<last_enqueued>-?\d+), "
        r"last completed NCCL work: (?P<last_completed>-?\d+)")),
    ("collective_failure", "nccl_watchdog", re.compile(
        r"Exception \(either an error or timeout\) detected by watchdog at work: (?P<seq>\d+), "
        r"last enqueued NCCL work: (?P<last_enqueued>-?\d+), last completed NCCL work: (?P<last_completed>-?\d+)")),
    ("collective_failure", "nccl_watchdog", re.compile(
        r"failure detected by watchdog at work sequence id: (?P<seq>\d+)"
        r"(?: PG status: last enqueued work: (?P<last_enqueued>-?\d+), last completed work: (?P<last_completed>-?\d+))?")),
    ("collective_timeout", "nccl_heartbeat", re.compile(r"Heartbeat monitor timed out!")),
    ("collective_timeout", "nccl_heartbeat", re.compile(
        r"watchdog got stuck for (?P<timeout_s>\d+) seconds without making progress")),
    ("collective_timeout", "c10d_store", re.compile(r"timed out after (?P<timeout_ms>\d+) ?ms")),
    ("collective_timeout", "c10d_store", re.compile(r"Socket Timeout|wait timeout after (?P<timeout_ms2>\d+)ms")),
)
_PG = re.compile(r"\[PG(?: ID)? (?P<pg>\d+)(?: PG GUID (?P<pg_guid>\d+)(?:\((?P<pg_name>\w+)\))?)? Rank (?P<pg_rank>\d+)\]"
                 r"|\[Rank (?P<pg_rank2>\d+)\]")
_PEER_PORT = re.compile(r"remote=\[[^\]]*\]:(?P<a>\d+)|connect to \([^,()]+, (?P<b>\d+)\)|\[[^\]\s]+\]:(?P<c>\d+)\)?\s*$")

def process_group(text: str) -> tuple[int | None, int] | None:
    """(process group, rank in it) of torch's ``[PG ID 2 PG GUID 3 Rank 1]`` / ``[PG 3 Rank 5]``
    at the start of a c10d message (the group None for a bare ``[Rank 5]``), or None."""
    m = _PG.match(text)
    if m is None:
        return None
    pg = m.group("pg")
    return (int(pg) if pg is not None else None), int(m.group("pg_rank") or m.group("pg_rank2"))


#: Field names of a collective record, in order.
COLLECTIVE_FIELDS = ("family", "seq", "op_type", "timeout_ms", "ran_for_ms", "timeout_s", "last_enqueued",
                     "last_completed", "pg", "pg_rank", "peer_port")


def collective_kind(text: str) -> str | None:
    """``collective_timeout`` / ``collective_failure`` when ``text`` is a c10d/NCCL watchdog or
    store timeout record, else None."""
    for kind, _, pattern in _COLLECTIVE:
        if pattern.search(text):
            return kind
    return None


def collective(text: str) -> dict[str, Any]:
    """The figures of a collective timeout or failure text (ints; None where not printed)."""
    out: dict[str, Any] = dict.fromkeys(COLLECTIVE_FIELDS)
    for _, family, pattern in _COLLECTIVE:
        m = pattern.search(text)
        if m:
            out["family"] = family
            for key, value in m.groupdict().items():
                if value is not None:
                    out[key.rstrip("2")] = value if key == "op_type" else int(value)
            break
    m = _PG.search(text)
    if m:
        if m.group("pg") is not None:
            out["pg"] = int(m.group("pg"))
        rank = m.group("pg_rank") or m.group("pg_rank2")
        out["pg_rank"] = int(rank) if rank is not None else None
    m = _PEER_PORT.search(text)
    if m and out["family"] == "c10d_store":
        out["peer_port"] = int(next(g for g in m.groups() if g is not None))
    return out


#: The type of each figure of a collective record (the rest are integers).
_COLLECTIVE_TYPES: dict[str, Type] = {"family": STR, "op_type": STR}


def field(name: str) -> Any:
    """A converter that reads one collective figure from the record's text."""
    def conv(s: str) -> Any:
        return collective(s)[name]
    return typed(_COLLECTIVE_TYPES.get(name, INT), conv)


_ASSERT = re.compile(r"(?P<source_loc>\S+\.\w+:\d+): (?P<kernel>.*?):? ?block: \[(?P<block>[\d, ]+)\], "
                     r"thread: \[(?P<thread>[\d, ]+)\] Assertion [`'](?P<assertion>.*)[`'] failed")


def device_assert(name: str) -> Any:
    """A converter for one figure of a CUDA device-side assertion record."""
    def conv(s: str) -> Any:
        m = _ASSERT.search(s)
        if not m:
            return None
        value = m.group(name)
        if name in ("block", "thread"):
            return [int(x) for x in value.split(",")]
        return value.strip()
    return typed(list_of(INT) if name in ("block", "thread") else STR, conv)


_HSA = re.compile(r"node-(?P<hsa_node>\d+)(?: \(Agent handle: (?P<agent_handle>0x[\da-f]+)\))?"
                  r"(?: on address (?P<address>\S+?)\.?)?(?: Reason: (?P<reason>.*?)\.?\s*)?$")


def hsa(name: str) -> Any:
    """A converter for one figure of an HSA memory access fault."""
    def conv(s: str) -> Any:
        m = _HSA.search(s)
        value = m.group(name) if m else None
        return int(value) if name == "hsa_node" and value is not None else value
    return typed(INT if name == "hsa_node" else STR, conv)


#: The type of :func:`store_error` (an exception's ``store`` field).
STORE_TYPE: Type = struct(timeout_ms=INT, host=STR, port=INT, joined=INT, expected=INT)
#: torch.distributed's TCPStore errors (``DistNetworkError``, ``DistStoreError``, and the
#: ``RuntimeError`` older torch raised), across versions: the client that could not reach the
#: store in time (its address), the store that waited for the other ranks (how many joined),
#: a wait for keys that timed out.
_STORE = re.compile(
    r"client socket has timed out after (?P<ms>\d+) ?ms while trying to connect to \((?P<host>[^,()]+), (?P<port>\d+)\)"
    r"|Timed out after (?P<s>\d+) seconds waiting for (?:clients|workers)\. (?P<joined>\d+)/(?P<expected>\d+)"
    r"|wait timeout after (?P<ms2>\d+) ?ms"
    r"|(?:^|: )(?P<joined2>\d+)/(?P<expected2>\d+) clients joined")


def store_error(message: str | None) -> dict[str, Any] | None:
    """The figures of a TCPStore error message: ``{"timeout_ms": 600000, "host": "127.0.0.1",
    "port": 30349, ...}`` (None where the message does not print one), or None when the
    message is no store error. Seconds are given in ms, as the other store records print them."""
    m = _STORE.search(message or "")
    if m is None:
        return None
    g = m.groupdict()
    ms = g["ms"] or g["ms2"]

    def num(*names: str) -> int | None:
        value = next((g[n] for n in names if g[n] is not None), None)
        return int(value) if value is not None else None

    return {"timeout_ms": int(ms) if ms else (int(g["s"]) * 1000 if g["s"] else None), "host": g["host"],
            "port": num("port"), "joined": num("joined", "joined2"), "expected": num("expected", "expected2")}


#: The type of :func:`scheduler_died` (an exception's ``scheduler_died`` field).
DIED_TYPE: Type = struct(rank=INT, exit_code=INT)
_DIED = re.compile(r"Rank (\d+) scheduler (?:died during initialization \(exit code:? (-?\d+)\)|is dead\.)")


def scheduler_died(message: str | None) -> dict[str, int | None] | None:
    """``{"rank": 0, "exit_code": -9}`` from the launcher's message about a scheduler that
    died before it was ready (the message of the RuntimeError it raises), or its "Rank 0
    scheduler is dead." (the exit code on a line of its own: ``exit_code`` None)."""
    m = _DIED.search(message or "")
    if m is None:
        return None
    return {"rank": int(m.group(1)), "exit_code": int(m.group(2)) if m.group(2) is not None else None}
