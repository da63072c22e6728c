"""Figures of SGLang's request logs, read out of a record's payload when they are asked for.

``--log-requests`` prints a request as the repr of its dataclass (text format) or as
JSON (``--log-requests-format json``), both from ``python/sglang/srt/utils/request_logger.py``:

* ``Receive: obj=GenerateReqInput(rid='..', text='..', ...)``
* ``Finish: obj=GenerateReqInput(..), out={'text': '..', 'meta_info': {'id': '..',
  'prompt_tokens': 5, 'completion_tokens': 2, 'e2e_latency': 0.51, ...}}``
* ``{"timestamp": "2025-03-07T21:49:34.123456", "event": "request.finished", "rid": "..",
  "obj": {..}, "out": {"meta_info": {"e2e_latency": 0.5, ..}}}``

``--enable-request-time-stats-logging`` prints ``Req Time Stats(rid=.., input len=38,
output len=484, type=unified): queue_duration=0.00ms, forward_duration=1759.38ms, ..``; from 2026
``ReqTimeStats(rid=.., input_len=472, cached_input_len=192, output_len=364, attempts=0, type=unified): ..``
(``managers/schedule_batch.py`` ``Req.log_time_stats``; the durations from
``observability/req_time_stats.py`` ``convert_to_duration``).

The request text itself is never a field: the figures below are all a summary needs, and
a request's text is the user's data. Each converter takes the payload text and returns
one figure, or None when the payload does not carry it (a level-0 log has no token
counts; a payload cut by ``--log-requests-level 2`` truncation may lose its tail).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..events.types import FLOAT, INT, STR
from .values import returns, typed

_RID = re.compile(r"""\brid=(?:'([^']*)'|"([^"]*)"|([^,\s)]+))""")
_META_ID = re.compile(r"""['"]id['"]: ?['"]([^'"]+)['"]""")
_NUM = r"(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"


def _key(name: str) -> re.Pattern[str]:
    return re.compile(r"""['"]""" + re.escape(name) + r"""['"]: ?""" + _NUM)


_E2E = _key("e2e_latency")
_PROMPT = _key("prompt_tokens")
_COMPLETION = _key("completion_tokens")
_CACHED = _key("cached_tokens")
_STATS_INT = {"input_len": re.compile(r"\binput[ _]len=(\d+)"), "output_len": re.compile(r"\boutput[ _]len=(\d+)")}
_STATS_TYPE = re.compile(r"\btype=(\w+)\)")
_DURATION = re.compile(r"\b(\w+)_duration=" + _NUM + "ms")


@returns(STR)
def rid(payload: str) -> str | None:
    """The request id: ``rid=`` of the input, else ``meta_info``'s ``id``."""
    m = _RID.search(payload)
    if m:
        return next(g for g in m.groups() if g is not None)
    m = _META_ID.search(payload)
    return m.group(1) if m else None


def _number(pattern: re.Pattern[str], cast: Callable[[str], Any]) -> Callable[[str], Any]:
    def conv(payload: str) -> Any:
        m = pattern.search(payload)
        return cast(m.group(1)) if m else None
    return typed(FLOAT if cast is float else INT, conv)


def _int(s: str) -> int:
    return int(float(s))


e2e_latency_s = _number(_E2E, float)
prompt_tokens = _number(_PROMPT, _int)
completion_tokens = _number(_COMPLETION, _int)
cached_tokens = _number(_CACHED, _int)
input_len = _number(_STATS_INT["input_len"], int)
output_len = _number(_STATS_INT["output_len"], int)


@returns(STR)
def req_type(payload: str) -> str | None:
    m = _STATS_TYPE.search(payload)
    return m.group(1) if m else None


def durations_ms(payload: str) -> dict[str, float]:
    """``queue_duration=0.00ms, forward_duration=1759.38ms`` -> {"queue": 0.0, "forward": 1759.38}."""
    return {m.group(1): float(m.group(2)) for m in _DURATION.finditer(payload)}


@returns(FLOAT)
def queue_ms(payload: str) -> float | None:
    return durations_ms(payload).get("queue")


@returns(FLOAT)
def forward_ms(payload: str) -> float | None:
    return durations_ms(payload).get("forward")


@returns(STR)
def json_event(payload: str) -> str | None:
    """``request.received`` or ``request.finished`` of a JSON request record."""
    m = re.match(r'\{"timestamp": ?"[^"]*", ?"event": ?"([^"]+)"', payload)
    return m.group(1) if m else None


@returns(STR)
def json_rid(payload: str) -> str | None:
    try:
        data = json.loads(payload)
    except ValueError:
        return rid(payload)
    value = data.get("rid") if isinstance(data, dict) else None
    return str(value) if value is not None else rid(payload)


#: The fields of each request record kind: name -> converter of the payload.
FIELDS: dict[str, dict[str, Callable[[str], Any]]] = {
    "request_receive": {"rid": rid},
    "request_finish": {"rid": rid, "e2e_latency_s": e2e_latency_s, "prompt_tokens": prompt_tokens,
                       "completion_tokens": completion_tokens, "cached_tokens": cached_tokens},
    "request_json": {"event": json_event, "rid": json_rid, "e2e_latency_s": e2e_latency_s,
                     "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                     "cached_tokens": cached_tokens},
    "req_time_stats": {"rid": rid, "input_len": input_len, "output_len": output_len, "req_type": req_type,
                       "queue_ms": queue_ms, "forward_ms": forward_ms},
}
