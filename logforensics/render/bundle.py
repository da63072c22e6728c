"""``logforensics bundle``: one Markdown comment for an issue thread, redacted by default.

What maintainers ask for first: the verdict, how far each rank got, the first traceback
of each distinct failure (with the ranks that share it), the memory figures, the settings
that differ from SGLang's defaults, versions and environment, and what to run next. A
GitHub comment holds at most 65,536 characters, so every section has a budget and says
what it left out. Redaction (home and model paths, hostnames, IP addresses, API keys and
tokens, request text) is on unless ``redact=False``; the bundle ends with the list of what
was replaced, by kind and count, never the values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..diagnose.engine import Diagnosis
from ..diagnose.rulespec import who
from ..events import PHASES
from ..model.defaults import defaults_table, version_key
from ..model.failures import headerless_dump, process_phrase
from ..model.records import NOT_SEEN
from ..model.summary import RunSummary
from ..read.values import THREAD_SOURCE
from ..units import clip, gib
from .beside import beside_lines
from .redact import Redactor

#: GitHub's comment limit (characters); the bundle stays below it.
LIMIT = 65_536
_TRACEBACK_LINES = 60
_MAX_TRACEBACKS = 8


#: SGLang's short and long flags for a server_args field (server_args.py add_cli_args).
_FLAG_FIELD = {"tp": "tp_size", "tensor_parallel_size": "tp_size", "dp": "dp_size", "data_parallel_size": "dp_size",
               "pp": "pp_size", "pipeline_parallel_size": "pp_size", "ep": "ep_size",
               "expert_parallel_size": "ep_size", "model": "model_path"}


def non_default_args(run: RunSummary) -> tuple[str | None, str, list[tuple[str, Any, str]]]:
    """(version used, why, [(field, logged value, default)]) for server_args that differ from
    the declared defaults of the nearest known SGLang version. ``None`` defaults (resolved by
    ``__post_init__``) and non-literal defaults are not compared; where the log shows the launch
    command, only the fields it set are."""
    table = defaults_table()
    if not run.server_args or not table:
        return None, "no server_args in this log", []
    logged = run.versions.get("sglang")
    if logged:
        known = [v for v in table if version_key(v) <= version_key(str(logged))]
        version = max(known, key=version_key) if known else min(table, key=version_key)
        why = f"SGLang {logged} is logged; defaults of {version}"
    else:
        version = max(table, key=lambda v: (len(set(table[v]) & set(run.server_args)), version_key(v)))
        why = (f"the SGLang version is not in this log; defaults of {version}, the known version whose "
               f"fields match the logged server_args best")
    defaults = table[version]
    given = {_FLAG_FIELD.get(k, k) for k in run.launch_args or {}}
    # the command the log shows sets what differs; a field it leaves alone has the build's own
    # default, which may not be the table version's (unless a config file may have set it)
    whole_command = bool(run.launch_command) and "config" not in given
    out = []
    for name, value in run.server_args.items():
        d = defaults.get(name)
        if d is None or (whole_command and name not in given):
            continue
        if d == "None" or d.startswith("["):  # None: resolved at start-up or unset; shown only when set on the command line
            if name in given:
                out.append((name, value, f"{d} (set on the command line)"))
            continue
        if repr(value) != d and str(value) != d.strip("'\""):
            out.append((name, value, d))
    return version, why + " (tools/serverargs_defaults.py, from the wheel's python/sglang/srt/server_args.py)", out


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}\n{text}\n{ticks}"


def render_bundle(d: Diagnosis, runs: Sequence[tuple[str, RunSummary]], *, redact: bool = True,
                  keep_prompts: bool = False, limit: int = LIMIT) -> str:
    """The Markdown of the bundle (under ``limit`` characters); ``runs``: (label, run) of ``d``.
    Redacted unless ``redact=False``; prompts and completions too unless ``keep_prompts``."""
    r = Redactor(keep_prompts) if redact else None
    if r is not None:
        r.learn(d)
        for _, run in runs:
            if run is not d.failing and run is not d.baseline:
                r.learn(run)
        same = {id(d.failing): "failing", id(d.baseline): "baseline"}
        d = r.tree(d)
        runs = [(label, getattr(d, same[id(run)]) if id(run) in same else r.tree(run)) for label, run in runs]
    parts: list[str] = []
    files = ", ".join(f"`{os.path.basename(run.file or '-')}`" for _, run in runs)
    parts.append(f"## logforensics report: {files}\n")
    parts.append(f"**Verdict:** {d.verdict}\n")
    parts += [f"- {line}" for line in d.conclusion.lines()[1:]] + [""]
    for label, run in runs:
        parts.append(f"- {label}: **{run.outcome}**: {run.outcome_reason}")
        # what the reader must know about lines not in the log (Ray's de-duplication: counts short)
        parts += [f"  - warning: {w}" for w in run.warnings]
    parts.append("")
    for label, run in runs:
        parts.append(_phase_table(label, run))
        parts.append(_tracebacks(label, run))
        parts.append(_memory_table(label, run))
        parts.append(_settings(label, run))
        parts.append(_beside(label, run) if run.artefacts else "")
    findings = list(d.findings)
    if findings:
        parts.append("### Findings\n")
        for f in findings[:20]:
            parts.append(f"- **{f.severity} {f.rule}**: {f.title} ({f.confidence} confidence; `{f.id}`)")
            for e in f.evidence[:3]:
                parts.append(f"  - `{os.path.basename(str(e.get('file') or ''))}:{e.get('line')}` "
                             f"{_md_cell(clip(str(e.get('text') or ''), 200))}")
        parts.append("")
    steps = _next_steps(d)
    if steps:
        parts.append("### To diagnose further, run with\n")
        parts += [f"- `{s}`: {why}" for s, why in steps]
        parts.append("")
    body = "\n".join(p for p in parts if p is not None)
    tail = _redaction_list(r, body, keep_prompts)
    if len(body) + len(tail) > limit:
        cut = limit - len(tail) - 200
        body = body[:cut].rsplit("\n", 1)[0] + f"\n\n_(cut at {cut} characters to stay under GitHub's {limit:,}-character limit)_\n"
        tail = _redaction_list(r, body, keep_prompts)
    return body + tail


def _phase_table(label: str, run: RunSummary) -> str:
    rows = [f"### {label}: phases per rank\n", "| rank | phase reached | " + " | ".join(PHASES) + " | last line |",
            "|---|---|" + "---|" * len(PHASES) + "---|"]
    for rank in run.ranks[:64]:
        phases = run.phases.get(rank, {})
        cells = [f"{info.first_line}" if (info := phases.get(p)) else "" for p in PHASES]
        seen = run.last_seen.get(rank, NOT_SEEN)
        rows.append(f"| {rank} | {run.phase_reached.get(rank) or '-'} | " + " | ".join(cells)
                    + f" | {seen.line or ''} |")
    if len(run.ranks) > 64:
        rows.append(f"| ... {len(run.ranks) - 64} more ranks | | " + " | " * len(PHASES) + " |")
    rows.append("\n(each phase column: the line where the rank entered it)\n")
    return "\n".join(rows)


def _tracebacks(label: str, run: RunSummary) -> str:
    if not run.exceptions:
        return ""
    out = [f"### {label}: first traceback of each distinct failure\n"]
    for exc in run.exceptions[:_MAX_TRACEBACKS]:
        ranks = ", ".join(who(x) for x in exc.ranks or [] if x) or process_phrase(exc.source) or (
            "a thread (its header names no rank)" if exc.source == THREAD_SOURCE else "a process no line names")
        lines = (exc.text or "").splitlines()
        shown = lines[:_TRACEBACK_LINES]
        more = f"\n... {len(lines) - len(shown)} more lines" if len(lines) > len(shown) else ""
        where = f"line {exc.first_line}" if exc.first_line else ""
        short = "at least " if run.coverage and run.coverage.lines_dropped_by_dedup else ""  # lines Ray left out
        what = exc.exception or ("faulthandler stack dump, its header not in this log"
                                 if headerless_dump(exc.source, exc.exception) else "traceback cut before its exception")
        out.append(f"**{what}** on {ranks} "
                   f"({short}{len(exc.occurrences or [])} occurrence(s), first at {where}; phase {exc.phase or '?'})\n")
        out.append(_fence("\n".join(shown) + more) + "\n")
    if len(run.exceptions) > _MAX_TRACEBACKS:
        out.append(f"_{len(run.exceptions) - _MAX_TRACEBACKS} more distinct tracebacks in `summary --json`._\n")
    return "\n".join(out)


_MEMORY = (("load_begin_avail_gib", "free before load"), ("weights_gib", "weights"),
           ("load_end_avail_gib", "free after load"), ("kv_gib", "KV pool"), ("kv_tokens", "#tokens"),
           ("pool_end_avail_gib", "free at first pool end"), ("capture_mem_gib", "CUDA graphs"),
           ("capture_end_avail_gib", "free after graphs"), ("available_gpu_mem_gib", "available_gpu_mem"))


def _memory_table(label: str, run: RunSummary) -> str:
    mem = run.memory
    if not mem:
        return ""
    keys = [(k, name) for k, name in _MEMORY if any(m.figure(k) is not None for m in mem.values())]
    if not keys:  # figures the table does not show (a token count alone, say): no table
        return ""
    rows = [f"### {label}: memory per rank (GiB; SGLang's GB is GiB)\n",
            "| rank | " + " | ".join(n for _, n in keys) + " |", "|---|" + "---|" * len(keys)]
    for rank, m in list(mem.items())[:64]:
        cells = [str(m.figure(k)) if k == "kv_tokens" and m.figure(k) is not None else gib(m.figure(k), missing="", unit=False)
                 for k, _ in keys]
        rows.append(f"| {rank} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _settings(label: str, run: RunSummary) -> str:
    out = [f"### {label}: settings, versions, environment\n"]
    version, why, diffs = non_default_args(run)
    if diffs:
        out.append(f"server_args that differ from SGLang's defaults ({why}):\n")
        out.append("| setting | logged | default |\n|---|---|---|")
        for name, value, default in diffs[:80]:
            out.append(f"| {name} | {_md_cell(repr(value))} | {_md_cell(default)} |")
        out.append("")
    elif run.server_args:
        out.append(f"server_args: every compared field has its default ({why}).\n")
    else:
        out.append("server_args: not in this log.\n")
    if run.launch_command:
        out.append("launch command:\n\n" + _fence(clip(run.launch_command, 2000)) + "\n")
    if run.versions:
        out.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items())) + "\n")
    if run.env:
        out.append("environment: " + ", ".join(f"`{k}={v}`" for k, v in sorted(run.env.items())) + "\n")
    return "\n".join(out)


def _beside(label: str, run: RunSummary) -> str:
    assert run.artefacts is not None
    out = [f"### {label}: beside the logs\n"]
    out += [f"- {_md_cell(line.text)} (`{os.path.basename(line.where)}`)" for line in beside_lines(run.artefacts)]
    return "\n".join(out) + "\n"


def _next_steps(d: Diagnosis) -> list[tuple[str, str]]:
    steps: list[tuple[str, str]] = []
    timer = getattr(d.facts, "timer", None)
    for s in getattr(timer, "next_steps", ()) or ():
        steps.append((s.setting, s.why))
    serving = getattr(d.facts, "serving", None)
    for s in getattr(serving, "kv_advice", ()) or ():
        steps.append((s.setting, s.why))
    return steps


def _redaction_list(r: Redactor | None, body: str, keep_prompts: bool) -> str:
    """What the reader of ``body`` sees replaced, by kind and count (never the values)."""
    if r is None:
        return "\n---\n_Not redacted (`--no-redact`): paths, hosts, addresses, keys and request text are as logged._\n"
    kept = " Prompts and completions are kept (`--keep-prompts`)." if keep_prompts else ""
    counts = r.counts(body)
    if not counts:
        return ("\n---\n_Redacted: nothing matched (home and model paths, hostnames, IP addresses, e-mail addresses, "
                f"keys, tokens and passwords, request text).{kept}_\n")
    items = ", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items()))
    return ("\n---\n_Redacted (placeholders like `<home-directory-1>`; `--no-redact` keeps the text): "
            f"{items}.{kept}_\n")
