"""SGLang's crash dumps, summarised without running them.

``--crash-dump-folder`` makes SGLang pickle the requests of its last minutes before it dies
(``tokenizer_manager.py`` ``dump_requests_before_crash``: a dict of ``server_args``,
``requests`` and ``launch_command``), read here by :mod:`.pickled`'s walk, never unpickled.
"""

from __future__ import annotations

import os
import shlex
import stat
from typing import Any

from .pickled import MAX_BYTES, MAX_LISTED, Machine, Opaque, Refused, number, primitives, walk_pickle
from .types import Dump


def read_crash_dump(path: str) -> Dump:
    """Summarise SGLang's ``crash_dump_<ts>.pkl`` (or a request dump of its
    ``dump_requests_folder``, the same shape) without unpickling it.

    Figures: ``requests``, ``first_start`` and ``last_end`` (unix seconds as the file has
    them), ``span_s``, ``unfinished``, ``finish_reasons``, ``request_class``, ``protocol``
    and ``globals`` (every class or function the file names, so a crafted dump shows what it
    would have run). ``replay`` is the ``replay_request_dump.py`` command for this file.

    Raises :class:`ValueError` (one line, without the path: the caller keys it by the file)
    when nothing can be read: the file is missing, not a regular file, empty, over
    :data:`MAX_BYTES`, over :data:`MAX_OPCODES` opcodes, nests deeper than :data:`MAX_DEPTH`,
    or is not a pickle (nothing of it reads). A pickle that reads only in part (truncated, an unknown opcode, a state that is not a dict, a shape
    that is not SGLang's) gives a Dump whose ``unread`` says what was missed."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):   # a pipe or device could block or never end
            raise ValueError("not a regular file")
        size = info.st_size
        if size > MAX_BYTES:
            raise ValueError(f"{size} bytes, over the {MAX_BYTES}-byte limit for a crash dump")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot read ({e.strerror or e})") from None
    if not data:
        raise ValueError("empty file, not a pickle")
    try:
        machine, top, stopped = walk_pickle(data)
    except Refused as e:
        raise ValueError(str(e)) from None
    if top is None and stopped is not None and not machine.globals:
        raise ValueError(f"not a pickle, or none of it readable ({stopped})")
    return _summarise(path, top, machine, stopped)



def _as_dict(x: object) -> dict[Any, Any] | None:
    if isinstance(x, dict):
        return x
    if isinstance(x, Opaque) and x.mapping is not None:
        return x.mapping
    return None


def _as_list(x: object) -> list[Any] | None:
    if isinstance(x, list):
        return x
    if isinstance(x, Opaque) and x.items is not None:   # a deque pickles as deque() + appends
        return x.items
    return None


def _describe(x: object) -> str:
    if isinstance(x, Opaque):
        return f"a {x.name}(...) call" if x.called else f"a reference to {x.name}"
    return f"a {type(x).__name__}"



def _finish_reason(output: object) -> object:
    """``meta_info.finish_reason`` of a request's output, None when it has none.

    That is how ``dump_requests_before_crash`` tells a request still in flight: its output
    is ``{}`` (v0.4), its last streamed chunk, or ``get_crash_dump_output()``'s partial text,
    none of which carries a finish reason; a finished request's output does. (An output of
    None, or an end time of None or 0, is counted unfinished too.)"""
    out = _as_dict(output)
    meta = _as_dict(out.get("meta_info")) if out is not None else None
    return meta.get("finish_reason") if meta is not None else None


def _request_figures(records: list[Any], unread: list[str]) -> dict[str, Any]:
    """Count, time span, unfinished requests, finish reasons and classes of the records
    ``(request, output, start, end)``."""
    starts: list[float] = []
    ends: list[float] = []
    classes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    unfinished = malformed = 0
    for record in records:
        if not isinstance(record, (tuple, list)) or len(record) < 4:
            malformed += 1
            continue
        req, output, start, end = record[0], record[1], record[2], record[3]
        cls = req.name if isinstance(req, Opaque) else type(req).__name__
        classes[cls] = classes.get(cls, 0) + 1
        if (s := number(start)) is not None:
            starts.append(s)
        if (e := number(end)) is not None:
            ends.append(e)
        reason = _finish_reason(output)
        if output is None or not end or reason is None:
            unfinished += 1
            continue
        kind = reason if isinstance(reason, str) else (_as_dict(reason) or {}).get("type")
        kind = kind[:50] if isinstance(kind, str) else "other"
        reasons[kind] = reasons.get(kind, 0) + 1
    figures: dict[str, Any] = {"requests": len(records) - malformed, "unfinished": unfinished}
    if reasons:
        figures["finish_reasons"] = reasons
    if classes:
        names = list(classes)
        figures["request_class"] = ", ".join(names[:10]) + (f", and {len(names) - 10} more" if len(names) > 10 else "")
    if starts:
        figures["first_start"] = min(starts)
    if ends:
        figures["last_end"] = max(ends)
    if starts and ends:
        figures["span_s"] = max(ends) - min(starts)
    if malformed:
        unread.append(f"{malformed} request record(s) are not (request, output, start, end) tuples")
    return figures


def _summarise(path: str, top: Any, machine: Machine, stopped: str | None) -> Dump:
    unread: list[str] = [stopped] if stopped else []
    figures: dict[str, Any] = {}
    server_args: dict[str, Any] = {}
    launch: str | None = None

    payload = _as_dict(top)
    if payload is None and _as_list(top) is not None:
        payload = {"requests": top}   # early request dumps were a bare list of records
    if payload is None:
        unread.append(f"the pickle holds {_describe(top)}, not a dict of requests")
        payload = {}

    records = _as_list(payload.get("requests"))
    if records is None and "requests" in payload:
        unread.append(f"requests is {_describe(payload['requests'])}, not a list")
    if records is not None:
        figures.update(_request_figures(records, unread))

    if "server_args" in payload:
        sa = payload["server_args"]
        if sa is None:
            unread.append("server_args is None (SGLang writes None when ServerArgs does not pickle)")
        elif isinstance(sa, Opaque) and (sa.state is not None or sa.slots is not None):
            server_args = primitives(sa.fields())
            figures["server_args_class"] = sa.name
        elif (plain := _as_dict(sa)) is not None:
            server_args = primitives(plain)
        else:
            unread.append(f"server_args is {_describe(sa)} without a dict state")

    command = payload.get("launch_command")
    if isinstance(command, str):
        launch = command
    elif isinstance(command, (list, tuple)) and all(isinstance(a, str) for a in command):
        launch = " ".join(command)
    elif command is not None:
        unread.append(f"launch_command is {_describe(command)}, not a string")

    if machine.protocol is not None:
        figures["protocol"] = machine.protocol
    if machine.globals:
        figures["globals"] = list(machine.globals)
    if machine.more_globals:
        unread.append(f"{machine.more_globals} more reference(s) to global names beyond the {MAX_LISTED} listed")
    unread.extend(f"{text} ({n} times)" if n > 1 else text for text, n in machine.notes.items())
    if machine.more_notes:
        unread.append(f"{machine.more_notes} more thing(s) unread, of other kinds than those above")

    replay = None
    if records:
        replay = f"python3 scripts/playground/replay_request_dump.py --input-file {shlex.quote(path)}"
        host, port = server_args.get("host"), server_args.get("port")
        if isinstance(host, str) and host and host not in ("0.0.0.0", "::"):
            replay += f" --host {shlex.quote(host)}"   # a wildcard bind is reached at the default localhost
        if isinstance(port, int) and not isinstance(port, bool):
            replay += f" --port {port}"
    return Dump("crash_dump", path, figures, launch, server_args, replay, unread)
