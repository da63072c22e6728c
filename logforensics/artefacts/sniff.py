"""Which artefact a file is, judged from its content, and the run's artefacts read.

A file is sniffed from its head (:data:`HEAD_BYTES`), never its name: ``env.txt``,
``node0.log`` and ``describe.out`` are whatever their text is. Only a file whose head is
of a known form is read further, within a bound (:data:`MAX_TEXT_BYTES` for texts and
JSON), so a large binary beside the logs costs one small read. A file of no known form is
reported as such (``Artefacts.unknown``), never guessed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable

from ..read.assemble import TB_START
from . import environment as env
from . import orchestrator as orch
from .types import Artefacts, Cited, Dump, Environment, Termination

#: Bytes of a file's head that decide its form.
HEAD_BYTES = 64 << 10
#: A text or JSON artefact larger than this is read only up to it (a warning says so).
MAX_TEXT_BYTES = 16 << 20
_PICKLE_PROTOCOLS = range(2, 6)
_JSON_HEAD = re.compile(r'\s*(?:\{\s*["}]|\[\s*[{\]])')

Warn = Callable[[str], None]


def sniff(path: str, head: bytes | None = None) -> str | None:
    """The artefact form of a file (``check_env``, ``nvidia-smi``, ``topology``, ``pip``,
    ``slurm-job``, ``kubernetes``, ``kubernetes-yaml``, ``docker``, ``records``, ``crash_dump``, ``json``,
    ``metrics``), or None when its head is of no form read here (a log, most likely)."""
    if head is None:
        try:
            with open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except OSError:
            return None
    if len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS:
        return "crash_dump"
    if b"\x00" in head:
        return None
    text = head.decode("utf-8", "replace")
    lines = text.splitlines()
    if len(head) == HEAD_BYTES and lines:
        lines = lines[:-1]  # the last line may be cut by the head's bound
    for form, test, _ in _BEFORE_LOG:
        if test(lines):
            return form
    if _JSON_HEAD.match(text):  # "{" then a key, or "[" then an object: not "[2025-06-01 10:00:00] ..."
        return "json"
    if _looks_like_a_log(lines):  # a server log with check_env or records pasted in it stays a log
        return None
    return next((form for form, test, _ in _TEXT_FORMS if test(lines)), None)

_SGLANG_LINE = re.compile(r"\[20\d\d-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?[ \]]")


def is_artefact(path: str) -> bool:
    """Whether a file's content is an artefact: a form :func:`sniff` knows, and JSON only when
    it is one document a reader here recognises (a log of JSON lines, a saved ``summary
    --json`` and other JSON stay what they are)."""
    form = sniff(path)
    if form != "json":
        return form is not None
    try:
        if os.path.getsize(path) > MAX_TEXT_BYTES:
            return False
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    try:
        data = json.loads(raw)
    except ValueError:
        return _is_event_stream(raw.decode("utf-8", "replace").splitlines())
    from .incident import read_json_artefact

    return read_json_artefact(path, data) is not None


def _is_event_stream(lines: list[str]) -> bool:
    """Docker's ``/events`` stream (``docker events --format '{{json .}}'``): one JSON event a
    line, each with its ``status`` or ``Action`` and the container's ``id`` or ``Actor``, and
    a record of an end among them. A log of JSON lines has other keys and stays a log."""
    body = [line for line in lines[:2000] if line.strip()]
    for line in body:
        try:
            event = json.loads(line)
        except ValueError:
            return False
        if not (isinstance(event, dict) and ("status" in event or "Action" in event)
                and ("id" in event or "Actor" in event)):
            return False
    return bool(body) and orch.is_records(body)


def _looks_like_a_log(lines: list[str]) -> bool:
    """A server log's head: one of SGLang's time-stamped lines (``[2025-06-01 10:11:12 TP0] ...``)
    or a Python traceback's first line is enough (no orchestrator's or kernel's record file holds
    one); the records of a job's end inside it are then read from the log itself."""
    return any(_SGLANG_LINE.search(line[:80]) or line.lstrip().startswith(TB_START) for line in lines[:2000])



def read_artefacts(paths: Iterable[str], warn: Warn | None = None) -> Artefacts:
    """The artefacts of these files, each read as its content says; ``unknown`` names the
    files of no known form, ``warn`` hears what could only be read in part."""
    facts: dict[str, Cited] = {}
    sources: dict[str, str] = {}
    ends: list[Termination] = []
    dumps: list[Dump] = []
    unknown: dict[str, str] = {}
    say = warn or (lambda _m: None)
    for path in paths:
        form = sniff(path)
        if form is None:
            unknown[path] = "no artefact form this version reads (not check_env, nvidia-smi, pip, Slurm, " \
                            "Kubernetes, Docker, Ray or kernel records, nor a dump)"
            continue
        try:
            got = _read(path, form, say)
        except OSError as exc:
            unknown[path] = f"cannot read ({exc.strerror or exc})"
            continue
        except ValueError as exc:
            unknown[path] = str(exc)
            continue
        if got is None:
            unknown[path] = f"{form}, of no kind read here"
            continue
        kind, f, t, d = got
        sources[path] = kind
        for key, value in f.items():
            _merge(facts, key, value)
        ends.extend(t)
        dumps.extend(d)
    environment = Environment(facts, {p: k for p, k in sources.items()}) if facts else None
    return Artefacts(environment, tuple(ends), tuple(dumps), unknown)


def _merge(facts: dict[str, Cited], key: str, value: Cited) -> None:
    """Two files that disagree on a fact (two nodes' ``check_env``) keep both values."""
    have = facts.get(key)
    if have is None:
        facts[key] = value
    elif value.value not in have.value.split(" / "):
        facts[key] = Cited(f"{have.value} / {value.value}", have.file, have.line)


_Read = tuple[str, dict[str, Cited], list[Termination], list[Dump]]


def _read(path: str, form: str, warn: Warn) -> _Read | None:
    if form == "crash_dump":
        from .crashdump import read_crash_dump

        return "crash_dump", {}, [], [read_crash_dump(path)]
    text = _text(path, warn)
    lines = text.splitlines()
    reader = _READERS.get(form)
    if reader is not None:
        return reader(path, lines, text)
    try:
        data = json.loads(text)
    except ValueError:  # a stream of JSON records (docker events) is read for its records
        if (found := _records(path, lines, text)) is not None and found[2]:
            return found
        raise ValueError("JSON that does not parse") from None
    from .incident import read_json_artefact

    d = read_json_artefact(path, data)
    return (d.kind, {}, [], [d]) if d else None


_Reader = Callable[[str, list[str], str], "_Read | None"]


def _facts(read: Callable[[str, list[str]], dict[str, Cited]], kind: str) -> _Reader:
    return lambda path, lines, _text: (kind, read(path, lines), [], [])


def _ends(read: Callable[[str, list[str]], tuple[list[Termination], dict[str, Cited]]], kind: str) -> _Reader:
    def reader(path: str, lines: list[str], _text: str) -> _Read:
        ends, facts = read(path, lines)
        return kind, facts, ends, []
    return reader


def _records(path: str, lines: list[str], _text: str) -> _Read:
    ends = orch.line_records(path, lines)
    return (ends[0].source if ends else "records"), {}, ends, []


def _metrics(path: str, _lines: list[str], text: str) -> _Read | None:
    from .incident import read_metrics_text

    d = read_metrics_text(path, text)
    return ("incident", {}, [], [d]) if d else None


def _is_metrics(lines: list[str]) -> bool:
    head = lines[:4000]
    return any(line.startswith(("sglang:", "sglang_")) and " " in line for line in head) \
        and any(line.startswith("# TYPE ") for line in head)


_Form = tuple[str, Callable[[list[str]], bool], _Reader]
#: Forms judged before anything else (JSON and YAML of an orchestrator, which a log never is).
_BEFORE_LOG: tuple[_Form, ...] = (
    ("docker", orch.is_docker_inspect, _ends(orch.read_docker_inspect, "docker")),
    ("kubernetes-yaml", orch.is_k8s_yaml, _ends(orch.read_k8s_yaml, "kubernetes")),
)
#: Text forms, in the order they are judged, each with its reader.
_TEXT_FORMS: tuple[_Form, ...] = (
    ("check_env", env.is_check_env, _facts(env.read_check_env, "check_env")),
    ("nvidia-smi", env.is_nvidia_smi, _facts(env.read_nvidia_smi, "nvidia-smi")),
    ("topology", env.is_topology, _facts(env.read_topology, "topology")),
    ("slurm-job", orch.is_scontrol, _ends(orch.read_scontrol, "slurm")),
    ("kubernetes", orch.is_k8s_describe, _ends(orch.read_k8s_describe, "kubernetes")),
    ("pip", env.is_pip, _facts(env.read_pip, "pip")),
    ("metrics", _is_metrics, _metrics),
    ("records", orch.is_records, _records),
)
_READERS = {form: read for form, _, read in _BEFORE_LOG + _TEXT_FORMS}


def _text(path: str, warn: Warn) -> str:
    with open(path, "rb") as fh:
        data = fh.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        warn(f"{path}: read only its first {MAX_TEXT_BYTES >> 20} MiB as an artefact")
        data = data[:MAX_TEXT_BYTES]
    return data.decode("utf-8", "replace")


#: Folders under a run directory that are searched for artefacts, and files looked at.
MAX_DEPTH = 4
MAX_FILES = 2000


def walk(root: str) -> list[str]:
    """The files under a directory, subfolders included (``<folder>/<host>/`` of SGLang's
    dumps), in a stable order, to :data:`MAX_DEPTH` levels and :data:`MAX_FILES` files;
    hidden files and folders are skipped."""
    out: list[str] = []
    base = root.rstrip(os.sep).count(os.sep)
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if here.count(os.sep) - base >= MAX_DEPTH:
            dirs[:] = []
        for name in sorted(files):
            if not name.startswith(".") and os.path.isfile(os.path.join(here, name)):
                out.append(os.path.join(here, name))
                if len(out) >= MAX_FILES:
                    return out
    return out
