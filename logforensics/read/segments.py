"""Cut one physical line into records: layout, not meaning.

Several processes write into one log without coordination, so one physical line can
hold several records: tqdm redraws separated by carriage returns, a log line glued
after a progress bar (``| 1/58 [00:00<00:56,  1.01it/s]Traceback ...``), a second
rank's write torn into the middle of a line, a whole traceback collapsed onto one line
behind repeated Ray wrappers. Wrappers that other tools put in front of every line
(docker-compose, pm2, FastChat, CI and ``docker logs --timestamps`` stamps, a log viewer's
or Docker Desktop's local time, Kubernetes CRI, journald, Slurm's task labels, Markdown quotes,
Ray, a second logging format) are removed here so the grammar sees SGLang's own text. Ray's de-duplication
suffix ``[repeated 2x across cluster]`` is cut off as a record of its own: it says that
lines were dropped, and the record before it must read as if it were not there.

Every rule below matches digits only with ``\\d``, so lines that differ only in their
digits are cut at the same offsets: the fast path relies on that.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .prefilter import needs

#: ANSI colour codes: with the ESC byte, in caret notation as a pager or a copy from a
#: terminal writes them (``^[[36m``: the two characters ``^[``), or with the ESC byte
#: lost (``[36m``); NUL bytes; and a literal ``^M`` (a carriage return in caret notation)
#: at the end of a line.
_ANSI_RE = re.compile(r"(?:\x1b|\^\[)\[[\d;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x00"
                      r"|\[\d{1,3}(?:;\d{1,3})*m|(?:\^M)+$")
_BARE_ANSI_RE = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
#: A number a web page made a telephone link of, copied as Markdown with the page's text
#: (``[[2025-11-19 14](tel:2025-11-19 14):41:27]``, a stamp's first digits): the text it shows.
_TEL_LINK_RE = re.compile(r"\[([^\[\]()\n]{1,64})\]\(tel:[^()\n]{1,64}\)")
_TEL_LINK = "](tel:"

#: Wrappers other programs put before the SGLang text, tried repeatedly at a record start.
_WRAPPER_RE = re.compile(
    r"(?:"
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)[ \t](?:stdout|stderr)[ \t][FP](?:[ \t]|$)"  # k8s CRI
    r"|>[ \t]?"                                                  # Markdown quote
    # journald (journalctl's short and short-iso formats): "Aug 17 18:42:18 host sglang[8052]: "
    r"|(?:(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)) [\w.\-]+ [\w.\-@/]+\[\d+\]: "
    # Slurm's srun --label: the task's number, right-aligned to the widest ("0: ", " 3: ", "12: ")
    r"|^ {0,4}\d{1,5}: "
    r"|```[ \t]*(?=\S)"                                         # a Markdown code fence glued to the line
    r"|`[ \t]*(?=\S)"                                           # a stray inline-code backtick
    # GitHub Actions, `docker logs --timestamps` (RFC 3339, ns, with an offset or Z)
    # (not NVIDIA Dynamo's own stamp, which a level follows: the grammar's DYN_HEAD)
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)(?:[ \t]|$)"
    r"(?! *(?:ERROR|WARN|INFO|DEBUG|TRACE) )"
    r"|\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\][ \t]"      # Jenkins
    # a log collector's stamp and the path of the program whose output it took, before every line
    # ("[2026-06-29 17:44:04] [/bin/sh]: ")
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\] \[/[\w./\-]+\]: "
    # torch_npu's own logger on Ascend: the pid and a stamp with milliseconds after a colon,
    # "[383554] [2026-07-01 09:31:38:047] torch_npu.memory: [ERROR] ..."
    r"|\[\d+\] \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}\] "
    # a cloud log export's severity and UTC time (Google Cloud Logging's severities), before
    # every line of a record: "ERROR 2026-06-15T14:10:59.392125190Z "
    r"|(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY)[ \t]"
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z[ \t](?:\[severity: [A-Z]+\][ \t])?"  # (and its severity field)
    # a log console's time column (Kibana's and OpenSearch Dashboards' Discover export):
    # "May 16, 2026 @ 20:44:54.728    "
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{1,2}, \d{4} @ \d\d:\d\d:\d\d(?:\.\d+)?[ \t]+"
    # docker compose: the container's name padded to the longest, "svc-1  | ", or a name of
    # the compose file's own ("xinference-server  | "): a letter in it (not a number's column)
    r"|(?=[\w.\-]*[A-Za-z])[\w.\-]+[ \t]+\|[ \t]?"
    r"|\d+\|[\w.@:\-]+[ \t]*\|[ \t]?"                           # pm2 "3|qwen  | "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| [\w.\-]+ \| ?"  # FastChat "... | ERROR | stderr | "
    # a log console's table copied as text (Grafana's logs panel): empty cells, the time cell, then
    # the record in a cell of its own ("  |   | 2026-06-12 12:13:18.902 | [... TP1] ... |  ")
    r"|(?:[ \t]*\|)*[ \t]*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+[ \t]+\|[ \t](?![A-Z]+[ \t]*\|)"
    r"|\((?:[\w.\-/]+ )?pid=\d+(?:, ip=[\w.:\-]+)?\)[ \t]?"    # Ray "(Worker pid=1, ip=10.0.0.2) ", "(model_worker/1 pid=2) "
    # (the node's name where Ray was given one for its address: "ip=train-...-worker-0"; a driver's
    # stamp before the wrapper, "[2025-05-10 00:18:21] (WorkerDict pid=1230, ip=...) ")
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\][ \t](?=\((?:[\w.\-/]+ )?pid=\d+(?:, ip=[\w.:\-]+)?\))"
    r"|\([\w.\-]+, rank=\d+, pid=\d+(?:, ip=[\w.:\-]+)?\)[ \t]?"  # SkyPilot "(worker1, rank=1, pid=2) "
    r"|\[pod/[\w.\-]+/[\w.\-]+\][ \t]?"                            # kubectl logs --prefix
    # Open MPI's mpirun --tag-output, "[job,rank]<stderr>:", after --timestamp-output's ctime date
    # ("Thu Jan 23 11:55:50 2025[1,1]<stderr>:"); the rank is MPI's, not a scheduler's
    r"|(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d "
    r"\d\d:\d\d:\d\d \d{4})?\[\d+,\d+\]<(?:stdout|stderr)>:"
    # a script's tag before the lines it quotes, indented ("[pd-test]   Memory access fault by
    # ...") or before a record's prefix; not a library's own tag before its message ("[aiter] ...")
    r"|\[(?!(?:full|swa|mamba)\] )[A-Za-z][\w.\-]*\](?:[ \t]{2,}(?=\S)|[ \t]+(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d))"
    # a log viewer's local time glued to the text: "04-20 13:32:25.784  File ..."
    r"|\d\d-\d\d \d\d:\d\d:\d\d\.\d+(?=[\s\[A-Za-z_])"
    # Docker Desktop's local time: "2025-03-08 13:29:13 [2025-03-08 12:29:13 TP0] ...", but
    # not an SGLang prefix that lost its "[", nor a logging format with a level or "- "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?!(?:[A-Z_]+-?\d+ ?)*\]| *[A-Z]{4,8} |- |\| )"
    # Python logging's default format, where a parent logs its child's output line by line: before a
    # prefixed record, or a traceback's lines (its header, indented frames and code, its exception)
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - [\w.]+ - [A-Z]+ - "
    r"(?=\[| +\S|Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception)(?::|$))"
    # vLLM's format of its V0 years, which heads every line of a record ("ERROR 02-09 16:43:26
    # tp_worker_overlap_thread.py:112] "), where SGLang's own records went through vLLM's logging (SGLang 0.4
    # imported vLLM, whose configuration took the root logger): before a scheduler's "... hit an exception: "
    # and a traceback's lines. (vLLM V1's "[core.py:367]", which no SGLang imported, heads vLLM's own records.)
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [\w.\/<>-]+\.py:\d+\] "
    r"(?=\w+ hit an exception: |Traceback \(most recent call last\):|  +File \"|    +\S"
    r"|[A-Za-z_][\w.]*(?:Error|Exception)(?::|$))"
    # indentation before a prefix (a stamp's, or a rank's alone: "  [TP0] ..."), a pool's check line
    # ("  [full] total=..."), or a Ray wrapper: a paste indented as a whole (a Markdown list's code block)
    r"|[ \t]+(?=\[(?:\d|(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|NP)-?\d[\w ]*\] |(?:full|swa|mamba)\] +total=)|\((?:[\w.\-/]+ )?pid=\d)"
    r"|(?:\^@)+(?=\[\d)"                                        # a terminal's echo of NUL bytes ("^@") before a prefix
    r")"
)

#: Places inside a line where a new record starts.
_SPLIT_RE = re.compile(
    r"(?<=\])(?=\S)(?<=it/s\]|s/it\])"                         # after a tqdm bar "[..., 1.2it/s]"
    r"|(?<=\?it/s\])(?=\S)"
    r"|(?<=.)(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+-?\d+)*\] )"  # torn / glued prefix
    # collapsed Ray lines: a worker's name before pid= (a bare "(pid=N) " inside a line is the
    # line's own text: SGLang's "Subprocess scheduler_0 (pid=N) crashed with exit code ...")
    r"|(?<=.)(?=\([\w.\-]+ pid=\d+(?:, ip=[\w.:\-]+)?\) )"
    # two wrapped records fused onto one line by a terminal's padding
    r"|(?<=  )(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| [\w.\-]+ \| )"
    # Ray's de-duplication suffix (after a record's own trailing space too: "..., #queue-req: 0,  [repeated 4x ...]")
    r"|(?<=\S)(?= +\[repeated \d+x across cluster\] *$)"
    # torch's record of a rank ("[rank5]:[E226 11:16:37.121617583 ProcessGroupNCCL.cpp:616] ...")
    # written before another process ended its line (faulthandler's "Extension modules: ...")
    r"|(?<=.)(?=\[[Rr]ank\d+\]:\[[EFIWT]\d{3,4} \d\d:\d\d:\d\d)"
    # a terminal's echo of Ctrl-C in caret notation, glued to what the interrupted program
    # printed next ("^CProcess Process-2:", "^CTraceback (most recent call last):")
    r"|(?<=\^C)(?=[^^\s])"
    # faulthandler's header written while another writer's line was unfinished
    # ('  File "/workspace/.../utils.pyFatal Python error: "Segmentation fault')
    r"|(?<=\S)(?=Fatal Python error: )"
    # the right part of a tqdm bar a record was printed over, left at the line's end after the
    # record ("...Traceback (most recent call last):     | 7710/16384 [00:00<00:00, 21822.61it/s]")
    # (not a bar's own empty part, after its fill: "50%|█████     | 18/36 [...]", "0%|          | 0/36")
    r"|(?<=[^\s|#\u2580-\u259f])(?=[ \t]{2,}\|[ \t]*\d+/\d+ \[[^\]\n]*(?:it/s|s/it)\][ \t]*$)"
    # a traceback whose line breaks were lost (pasted into a thread as one line): its frames,
    # their code and its exception line, after the header (:func:`_flat_cuts`)
    r"|(?<=\(most recent call last\):)(?= +File \")"
)

#: Ray's de-duplication suffix at a record's end (after its own trailing space too), with its count.
RAY_SUFFIX = re.compile(r" +\[repeated (\d+)x across cluster\] *$")

#: Texts of which a line must contain one for ``_SPLIT_RE`` to cut it anywhere.
_SPLIT_NEEDS = needs(_SPLIT_RE.pattern)

#: ``_SPLIT_RE``'s alternatives one by one, each beginning with its literal text, so that
#: ``re`` skips to it: the one expression, zero-width at every place, tried each alternative
#: at each character (a microsecond a character). Each gives (expression, where the cut is:
#: the match's start or end, characters its lookbehind reads before the match, whether the
#: character before the cut must be a non-space).
_SPLITTERS: tuple[tuple[re.Pattern[str], bool, int, bool], ...] = (
    (re.compile(r"(?:it/s|s/it)\](?=\S)"), True, 0, False),  # the first two alternatives
    (re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+-?\d+)*\] "), False, 0, False),
    (re.compile(r"\([\w.\-]+ pid=\d+(?:, ip=[\w.:\-]+)?\) "), False, 0, False),
    (re.compile(r"  (?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| [\w.\-]+ \| )"), True, 0, False),
    (re.compile(r"(?<! )" + RAY_SUFFIX.pattern), False, 0, True),  # (from a run of spaces' first: linear)
    (re.compile(r"\[[Rr]ank\d+\]:\[[EFIWT]\d{3,4} \d\d:\d\d:\d\d"), False, 0, False),
    (re.compile(r"\^C(?=[^^\s])"), True, 0, False),
    (re.compile(r"Fatal Python error: "), False, 0, True),
    (re.compile(r"(?<=[^\s|#\u2580-\u259f])[ \t]{2,}\|[ \t]*\d+/\d+ \[[^\]\n]*(?:it/s|s/it)\][ \t]*$"), False, 1,
     True),
)


#: torch's rank prefix (``TORCH_RANK`` in the grammar), which a record may follow on its line.
_TORCH_RANK_RE = re.compile(r"\[rank\d+\]: ?")
#: NVIDIA Dynamo's head (``DYN_HEAD`` in the grammar), which SGLang's own prefix may follow
#: (a record logged through Dynamo's handler with SGLang's format): one record, not two.
_DYN_HEAD_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) +(ERROR|WARN|INFO|DEBUG|TRACE) +"
                          r"(([\w-]+: )*[A-Za-z_]\w*(::\w+)+|[\w.<>-]+): ")


#: A traceback's header with its first frame on the same line: the line breaks were lost.
_FLAT_HEAD = re.compile(r"\(most recent call last\):(?= +File \")")
#: A frame of such a traceback, up to its function's name (its code follows on the line). These
#: expressions begin at a run of spaces' first one only (``(?<=\S)``), so a long run is read once.
_FLAT_FRAME = re.compile(r"(?<=\S) +File \"(?:[^\"\n]*(\", line \d+, in \S+)|[^\"\n]*$)")
#: The markers under a frame's code (Python 3.11's ``^^^^``, ``~~~^^^``), a line of their own.
_FLAT_MARKS = re.compile(r"(?<=\S) +[~^]{2,}(?= |$)")
#: Its exception line, after the last frame's code: a class named as Python's are, and a colon.
FLAT_EXC = re.compile(r"(?<=\S) +(?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault)(?::|$))")


def _flat_cuts(text: str, start: int, end: int) -> list[int]:
    """Where the records of a traceback flattened onto one line begin: each frame (before
    its spaces, as a frame is indented), its code (after the function's name), the markers
    under the code and the exception line (at its class's name)."""
    head = _FLAT_HEAD.search(text, start, end)
    if head is None:
        return []
    cuts: list[int] = []
    last = head.end()
    for m in _FLAT_FRAME.finditer(text, last, end):
        cuts.append(m.start())
        if m.end() < end and m.group(1) is not None:  # (a frame cut short has no code after it)
            cuts.append(m.end())
        last = m.end()
    exc = FLAT_EXC.search(text, last, end)
    if exc is not None and exc.start() > last:
        cuts.append(exc.end())  # at the class's name: an exception line is not indented
    cuts.extend(m.start() for m in _FLAT_MARKS.finditer(text, head.end(), exc.start() if exc else end))
    return cuts


def _cuts(text: str, start: int, end: int) -> list[int]:
    """The places after ``start`` where ``_SPLIT_RE.finditer(text, start, end)`` matches, in order
    (and those of a flattened traceback, :func:`_flat_cuts`)."""
    found: set[int] = set(_flat_cuts(text, start, end))
    for expr, at_end, _, nonspace in _SPLITTERS:
        # a match may begin before ``start`` (as far as the lookbehind it stands for reads) and
        # still cut after it
        for m in expr.finditer(text, max(0, start - 5), end):
            p = m.end() if at_end else m.start()
            if p > start and (not nonspace or not text[p - 1].isspace()):
                found.add(p)
    return sorted(found)


#: Where a JSONL record of NVIDIA Dynamo (``DYN_LOGGING_JSONL``) begins: ``time`` is its first key.
DYNAMO_JSON = '{"time":'
#: A target as the grammar's ``DYN_HEAD`` reads it (Python's "module.function", Rust's "crate::module").
_TARGET_RE = re.compile(r"[\w.<>-]+(?:::[\w.<>-]+)*")


def dynamo_json(text: str) -> str | None:
    """A JSONL record of Dynamo as the line Dynamo's text format would have written, so that
    one grammar reads both: ``{"time":"..Z","level":"INFO",..,"target":"log","message":"..",
    "log.target":"scheduler.init_model_worker"}`` -> ``..Z  INFO scheduler.init_model_worker: ..``
    (a Python record's target is ``log.target``; a Rust record's, ``target``). The lines of a
    message of several lines (a traceback) are cut by carriage returns: records of one line,
    as a tqdm redraw's. None when ``text`` is not one whole such record (a torn one)."""
    try:
        obj = json.loads(text)
    except ValueError:  # (also a RecursionError's: none is, of a record this short)
        return None
    if not isinstance(obj, dict):
        return None
    stamp, level, message = obj.get("time"), obj.get("level"), obj.get("message")
    if not (isinstance(stamp, str) and isinstance(level, str) and isinstance(message, (str, int, float))):
        return None
    target = obj.get("log.target") or obj.get("target")
    if not isinstance(target, str) or not _TARGET_RE.fullmatch(target):
        target = "log"
    message = str(message).replace("\r\n", "\n").replace("\n", "\r")
    return f"{stamp} {level.upper():>5} {target}: {message}"


def _decode_json(text: str) -> str:
    """``text`` with a whole Dynamo JSONL record in it (after any wrapper) as Dynamo's text."""
    at = text.find(DYNAMO_JSON)
    if at < 0:
        return text
    got = dynamo_json(text[at:])
    return text if got is None else text[:at] + got


def torn_json(text: str) -> bool:
    """Whether ``text`` begins a Dynamo JSONL record that does not end on its line: a
    concurrent writer's bytes cut it (:func:`rejoin` puts it together with the next line)."""
    return text.startswith(DYNAMO_JSON) and dynamo_json(text) is None


def rejoin(head: str, rest: str) -> str | None:
    """The record a concurrent writer tore across two physical lines, ``head`` (an
    unfinished JSONL record of Dynamo) and ``rest`` (the line after it), as one line; None
    unless the two make one whole record together."""
    if not torn_json(head) or rest.startswith(DYNAMO_JSON):
        return None
    whole = head + rest
    return whole if dynamo_json(whole) is not None else None


def clean(text: str) -> str:
    """Read a Dynamo JSONL record as Dynamo's text line (:func:`dynamo_json`), remove ANSI
    colour codes and NUL bytes, take a web page's telephone links as the text they show, and
    read a literal ``^M`` inside a line as the carriage return it stands for (a tqdm redraw);
    keep everything else."""
    if DYNAMO_JSON in text:
        text = _decode_json(text)
    text = _ANSI_RE.sub("", text)
    if _TEL_LINK in text:
        text = _TEL_LINK_RE.sub(r"\1", text)
    return text.replace("^M", "\r") if "^M" in text else text


#: Texts of which a line must contain one for :func:`needs_clean` to say yes.
CLEAN_NEEDS: tuple[str, ...] = ("\x1b", "\x00", "^[[", "^M", DYNAMO_JSON, _TEL_LINK) + (needs(_BARE_ANSI_RE.pattern) or ("",))
#: Texts of which a line must contain one for :func:`segment` to cut it (None: any line).
SPLIT_NEEDS = _SPLIT_NEEDS
#: The wrappers' expression, for readers that must know which lines can begin with one.
WRAPPER_PATTERN = _WRAPPER_RE.pattern


def needs_clean(text: str) -> bool:
    return ("\x1b" in text or "\x00" in text or "^[[" in text or "^M" in text or DYNAMO_JSON in text
            or _TEL_LINK in text or ("m" in text and _BARE_ANSI_RE.search(text) is not None))


#: A row of a log console's table (:data:`_WRAPPER_RE`), and the end of its record's cell.
_TABLE_ROW = re.compile(r"(?:[ \t]*\|)*[ \t]*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+[ \t]+\|[ \t]")
_TABLE_END = re.compile(r"[ \t]+\|[ \t]*$")


def segment(text: str) -> list[tuple[int, int]]:
    """Spans ``(start, end)`` of the records in a cleaned physical line, wrappers excluded.

    An empty line gives one empty span, so that every line is accounted for. A table row's
    closing cell (``" |  "`` after the record) is the table's, as its opening cells are.
    """
    row = text[:-1] if text.endswith("\r") else text  # (a line that ended in CRLF)
    if row.endswith(("|", "| ", "|  ")) and _TABLE_ROW.match(row) and (cell := _TABLE_END.search(row)):
        return segment(text[:cell.start()])
    spans: list[tuple[int, int]] = []
    pos = 0
    splits = _SPLIT_NEEDS is None or any(map(text.__contains__, _SPLIT_NEEDS))
    for part in text.split("\r"):
        end = pos + len(part)
        if part:
            start = _skip_wrappers(text, pos, end)  # a wrapper is not a record boundary
            cuts = [start, end]
            if splits:  # else no text a split needs is in the line (most unknown lines)
                cuts[1:1] = _cuts(text, start, end)
                if len(cuts) > 2 and (_TORCH_RANK_RE.fullmatch(text, cuts[0], cuts[1])
                                      or _DYN_HEAD_RE.fullmatch(text, cuts[0], cuts[1])):
                    del cuts[1]  # torch's "[rank1]: " or Dynamo's head before a record is its prefix, not a record
            for a, b in zip(cuts, cuts[1:]):
                after = _skip_wrappers(text, a, b)
                if "`" in text[pos if a == start else a:after]:  # an inline code span: its closing backtick too
                    b = _span_closed(text, after, b)
                if after < b:
                    spans.append((after, b))
        pos = end + 1
    if not spans:  # an empty line, or only a wrapper ("sglang-1  | "): one blank record
        spans.append((_skip_wrappers(text, 0, len(text)), len(text)))
    return spans


#: Wrappers that name the machine a line came from, and the group that holds its name.
_NODE_WRAPPER_RE = re.compile(
    r"\((?:[\w.\-/]+ )?pid=\d+, ip=(?P<ip>[\w.:\-]+)\)"         # Ray: the worker's IP
    r"|\((?P<sky>head|worker\d+), rank=\d+, pid=\d+"               # SkyPilot: head, worker1
    r"|\[pod/(?P<pod>[\w.\-]+)/[\w.\-]+\]"                         # kubectl logs --prefix: the pod
)


def wrapper_nodes(text: str, spans: list[tuple[int, int]]) -> list[str | None] | None:
    """The node each record's wrappers name (Ray ``ip=``, SkyPilot ``worker1``, a pod), or
    None when no wrapper on the line names one. A record without its own wrapper (a
    later record on the same line) belongs to the node of the wrapper before it."""
    if "(" not in text and "[pod/" not in text:
        return None
    found = [(m.start(), m.group(m.lastgroup or 0)) for m in _NODE_WRAPPER_RE.finditer(text)]
    if not found:
        return None
    out: list[str | None] = []
    for a, _b in spans:
        node = None
        for start, name in found:
            if start > a:
                break
            node = name
        out.append(node)
    return out


#: A wrapper that names the process a line came from: Ray's ``(SGLangEngine pid=1234, ip=..) ``,
#: SkyPilot's ``(worker1, rank=1, pid=2, ip=..) ``.
_PROC_WRAPPER_RE = re.compile(r"\((?:[\w.\-/]+,? )?(?:rank=\d+, )?pid=\d+(?:, ip=[\w.:\-]+)?\)")


#: Ray's wrapper of a process on the driver's own node, which names no node: Ray adds ``ip=``
#: only for the other nodes' processes (``(SGLangEngine pid=1234) ``, ``(pid=1234) ``).
LOCAL_PROC_WRAPPER = re.compile(rb"\((?:[\w.\-/]+ )?pid=\d+\)")


def wrapper_procs(text: str, spans: list[tuple[int, int]]) -> list[str | None] | None:
    """The process each record's own wrappers name (the last such wrapper between the record
    before it and its start: never its text, as SGLang's ``Subprocess scheduler_0 (pid=N)
    crashed ...``), or None when no record has one."""
    if "pid=" not in text:
        return None
    out: list[str | None] = []
    end = 0
    for a, b in spans:
        found = None
        for m in _PROC_WRAPPER_RE.finditer(text, end, a):
            found = m.group(0)
        out.append(found)
        end = b
    return out if any(out) else None


def _span_closed(text: str, a: int, b: int) -> int:
    """The end of ``text[a:b]`` before the backtick that closes an inline code span (a paste's
    `` `[... TP0] Capture cuda graph end. ...` ``), its trailing spaces with it; else ``b``."""
    end = a + len(text[a:b].rstrip(" \t"))
    return end - 1 if end > a and text[end - 1] == "`" else b


def _skip_wrappers(text: str, a: int, b: int) -> int:
    while a < b:
        m = _WRAPPER_RE.match(text, a, b)
        if not m or m.end() == a:
            return a
        a = m.end()
    return a


#: How many first bytes of a stream decide whether it is text at all.
SNIFF_BYTES = 64 << 10


@dataclass(frozen=True)
class Margin:
    """What a paste put before every line of a log: ``indent`` spaces (a Markdown list item), or
    a line-number ``gutter`` (``grep -n``'s ``12:`` and ``12-``, ``cat -n``'s right-aligned number
    and tab, an editor's number column)."""

    indent: int = 0
    gutter: bool = False

    def __bool__(self) -> bool:
        return bool(self.indent or self.gutter)


NO_MARGIN = Margin()
#: A line-number gutter at a line's start: the number, then ``:`` (``grep -n``'s match), ``-``
#: (its context line; not before a digit: a date is no gutter), a tab, or spaces.
GUTTER = re.compile(rb" {0,8}(\d{1,9})(?::|-(?!\d)|\t| +)")
#: The same at the start of every line of a block (what a gutter's margin takes off).
GUTTERS = re.compile(b"(?m)^" + GUTTER.pattern)
#: The message an editor shows above the file it opened (vim's ``"server.log" 16498L, 2947832B``,
#: ``[readonly]`` and like marks between): a screen copy of a numbered view begins with it.
_EDITOR_HEAD = re.compile(rb'"[^"\n]+"(?: \[[\w -]+\])* \d+L, \d+B')
#: Numbered lines that decide a gutter before ``SNIFF_BYTES`` came (each numbered higher).
_GUTTER_LINES = 8
#: Lines (not empty) a margin needs at least, to be told from the log's own indentation.
_MARGIN_LINES = 3


class PasteMargin:
    """Whether a log is a paste that put a margin before every line (:class:`Margin`).

    SGLang's own records never have one (a traceback's File lines are indented, under a header
    that is not). The verdict comes from the stream's first lines: a gutter where every line
    that is not empty is numbered, each higher than the last (grep's ``--`` between groups
    aside), over 3 lines at least; else no indentation as soon as a line that is not empty begins
    with no space (a log's first line, as a rule), or the smallest indentation of those lines
    once ``SNIFF_BYTES`` came or the stream ended. :attr:`margin` is the verdict, None while it
    waits."""

    __slots__ = ("margin", "_least", "_lines", "_judged", "_numbers", "_numbered")

    def __init__(self) -> None:
        self.margin: Margin | None = None
        self._least: int | None = None
        self._lines = 0  # lines judged that are not empty
        self._judged = 0  # bytes of the whole lines judged so far
        self._numbers: list[int] = []
        self._numbered = True  # every line so far numbered, each higher

    def judge(self, held: bytes | bytearray, final: bool = False) -> Margin | None:
        """The verdict on the stream's first bytes, ``held`` (all of them, each time: the lines
        judged before are not read again; ``final``: the stream ended, its last line judged as
        it is)."""
        if self.margin is not None:
            return self.margin
        pos, n = self._judged, len(held)
        while pos < n:
            end = held.find(b"\n", pos)
            if end < 0:
                if not final:
                    break  # an unfinished line waits for the bytes that end it
                end = n
            line = bytes(held[pos:end]).rstrip(b"\r")
            pos = end + 1
            if not line.strip(b" \t") or line == b"--" or not self._lines and _EDITOR_HEAD.fullmatch(line):
                continue
            self._lines += 1
            if self._numbered:
                m = GUTTER.match(line)
                if m is None or (self._numbers and int(m.group(1)) <= self._numbers[-1]):
                    self._numbered = False
                else:
                    self._numbers.append(int(m.group(1)))
                    if len(self._numbers) >= _GUTTER_LINES:
                        self.margin = Margin(gutter=True)
                        return self.margin
            lead = len(line) - len(line.lstrip(b" "))
            if lead == 0 and not self._numbered:
                self.margin = NO_MARGIN
                return self.margin
            self._least = lead if self._least is None else min(self._least, lead)
        self._judged = pos
        if final or n >= SNIFF_BYTES:
            # (a margin needs lines enough to tell it from the log's own: a window of one or two
            # indented lines is read as it is)
            gutter = self._numbered and len(self._numbers) >= _MARGIN_LINES
            enough = self._lines >= _MARGIN_LINES
            self.margin = Margin(gutter=True) if gutter else Margin(indent=self._least or 0 if enough else 0)
        return self.margin


#: The control characters ``text_counts`` counts (all but tab, newline, carriage return, ESC).
_CONTROLS = bytes(c for c in range(32) if chr(c) not in "\t\n\r\x1b")


def text_counts(sample: bytes) -> tuple[int, int, int]:
    """NUL bytes, undecodable (UTF-8) bytes and other control characters of ``sample``
    (counted in C: the controls are ASCII, the same bytes in the text as decoded)."""
    nul = sample.count(0)
    text = sample.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    utf8 = text.encode("utf-8", "surrogatepass")
    controls = len(utf8) - len(utf8.translate(None, _CONTROLS))
    return nul, bad, controls - nul


def looks_binary(sample: bytes) -> bool:
    """Whether a stream whose first bytes are ``sample`` is not text (random bytes, a core
    dump): over 1% NUL, or over 5% undecodable bytes or other control characters."""
    if not sample:
        return False
    nul, bad, other = text_counts(sample)
    n = len(sample.decode("utf-8", errors="replace"))
    return nul * 100 > len(sample) or bad * 20 > n or other * 20 > n
