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

import functools
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..diagnose.engine import Diagnosis
from ..events import PHASES
from ..model.summary import RunSummary
from ..units import gib

#: GitHub's comment limit (characters); the bundle stays below it.
LIMIT = 65_536
_TRACEBACK_LINES = 60
_MAX_TRACEBACKS = 8
_SECRET_KEYS = re.compile(r"(api[_-]?key|token|secret|password|passwd|auth|hf_token|credential)", re.IGNORECASE)


@dataclass
class Redactor:
    """Replaces private text by placeholders and counts what it replaced."""

    enabled: bool = True
    counts: Counter[str] = field(default_factory=Counter)
    _names: dict[tuple[str, str], str] = field(default_factory=dict)

    _RULES = (
        ("API key or token", re.compile(
            r"(?i)((?:api[_-]?key|token|secret|password|authorization|bearer)['\"]?\s*[=:]\s*['\"]?|--api-key[ =]|Bearer )"
            r"([^\s'\",)]+)")),
        ("API key or token", re.compile(r"\b(sk-[A-Za-z0-9_\-]{8,}|hf_[A-Za-z0-9]{16,}|ghp_[A-Za-z0-9]{20,})\b")),
        ("home directory", re.compile(r"(/(?:home|Users)/)([^/\s'\",)]+)")),
        ("home directory", re.compile(r"(/root)(?=/)")),
        ("IP address", re.compile(r"(?<![\d.])((?:\d{1,3}\.){3}\d{1,3})(?![\d.])")),
        ("IP address", re.compile(r"(?<![\w:])((?:[0-9a-fA-F]{1,4}:){4,7}[0-9a-fA-F]{1,4}"
                                  r"|(?:[0-9a-fA-F]{1,4}:)*:(?::[0-9a-fA-F]{1,4})+)(?![\w:])")),
        ("hostname", re.compile(r"\b([a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)*\.(?:svc\.cluster\.local|internal|local|corp|lan))\b")),
        ("request text", re.compile(r"((?:text|prompt|content|input_text|messages)['\"]?\s*[=:]\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")),
    )

    def model_paths(self, paths: Sequence[str]) -> None:
        """Model paths from server_args: replaced wherever they occur (they name private checkpoints)."""
        self._model_paths = [p for p in paths if p and ("/" in p)]

    def __call__(self, text: str) -> str:
        if not self.enabled or not text:
            return text
        for path in getattr(self, "_model_paths", []):
            if path in text:
                self.counts["model path"] += text.count(path)
                text = text.replace(path, self._placeholder("model path", path))
        for kind, pattern in self._RULES:
            text = pattern.sub(functools.partial(self._sub, kind), text)
        return text

    def _placeholder(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self._names:
            n = sum(1 for k in self._names if k[0] == kind) + 1
            self._names[key] = f"<{kind.replace(' ', '-')}-{n}>"
        return self._names[key]

    def _sub(self, kind: str, m: re.Match[str]) -> str:
        groups = m.groups()
        value = groups[-1]
        if kind == "IP address" and value.startswith(("127.", "0.0.0.0")):
            return m.group(0)
        if kind == "IP address" and ":" not in value and any(int(x) > 255 for x in value.split(".")):
            return m.group(0)
        if kind == "request text" and value in ("''", '""', "None"):
            return m.group(0)
        self.counts[kind] += 1
        prefix = "".join(g for g in groups[:-1] if g)
        return prefix + self._placeholder(kind, value)


def _defaults() -> dict[str, dict[str, str]]:
    """version -> field -> default (repr), from ``model/serverargs_defaults.tsv``."""
    text = resources.files("logforensics.model").joinpath("serverargs_defaults.tsv").read_text(encoding="utf-8")
    out: dict[str, dict[str, str]] = {}
    for row in text.splitlines()[1:]:
        version, name, value, _ = row.split("\t")
        out.setdefault(version, {})[name] = value
    return out


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def non_default_args(run: RunSummary) -> tuple[str | None, str, list[tuple[str, Any, str]]]:
    """(version used, why, [(field, logged value, default)]) for server_args that differ from
    the declared defaults of the nearest known SGLang version. ``None`` defaults (resolved by
    ``__post_init__``) and non-literal defaults are not compared."""
    table = _defaults()
    if not run.server_args or not table:
        return None, "no server_args in this log", []
    logged = run.versions.get("sglang")
    if logged:
        known = [v for v in table if _vkey(v) <= _vkey(str(logged))]
        version = max(known, key=_vkey) if known else min(table, key=_vkey)
        why = f"SGLang {logged} is logged; defaults of {version}"
    else:
        version = max(table, key=lambda v: (len(set(table[v]) & set(run.server_args)), _vkey(v)))
        why = (f"the SGLang version is not in this log; defaults of {version}, the known version whose "
               f"fields match the logged server_args best")
    defaults = table[version]
    given = set(run.launch_args or {})
    out = []
    for name, value in run.server_args.items():
        d = defaults.get(name)
        if d is None:
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
                  limit: int = LIMIT) -> str:
    """The Markdown of the bundle (under ``limit`` characters)."""
    r = Redactor(redact)
    paths = [str(run.server_args.get(k) or "") for _, run in runs for k in ("model_path", "tokenizer_path")]
    r.model_paths(sorted(set(paths), key=len, reverse=True))
    parts: list[str] = []
    files = ", ".join(f"`{r(os.path.basename(run.file or '-'))}`" for _, run in runs)
    parts.append(f"## logforensics report: {files}\n")
    parts.append(f"**Verdict:** {r(d.verdict)}\n")
    for label, run in runs:
        parts.append(f"- {label}: **{run.outcome}**: {r(run.outcome_reason)}")
    parts.append("")
    for label, run in runs:
        parts.append(_phase_table(label, run, r))
        parts.append(_tracebacks(label, run, r))
        parts.append(_memory_table(label, run))
        parts.append(_settings(label, run, r))
    findings = list(d.findings)
    if findings:
        parts.append("### Findings\n")
        for f in findings[:20]:
            parts.append(f"- **{f.severity} {f.rule}**: {r(f.title)}")
            for e in f.evidence[:3]:
                parts.append(f"  - `{r(os.path.basename(str(e.get('file') or '')))}:{e.get('line')}` "
                             f"{_md_cell(r(str(e.get('text') or ''))[:200])}")
        parts.append("")
    steps = _next_steps(d)
    if steps:
        parts.append("### To diagnose further, run with\n")
        parts += [f"- `{s}`: {why}" for s, why in steps]
        parts.append("")
    body = "\n".join(p for p in parts if p is not None)
    tail = _redaction_list(r)
    if len(body) + len(tail) > limit:
        cut = limit - len(tail) - 200
        body = body[:cut].rsplit("\n", 1)[0] + f"\n\n_(cut at {cut} characters to stay under GitHub's {limit:,}-character limit)_\n"
    return body + tail


def _phase_table(label: str, run: RunSummary, r: Redactor) -> str:
    rows = [f"### {label}: phases per rank\n", "| rank | phase reached | " + " | ".join(PHASES) + " | last line |",
            "|---|---|" + "---|" * len(PHASES) + "---|"]
    for rank in run.ranks[:64]:
        phases = run.phases.get(rank, {})
        cells = [f"{info.get('first_line')}" if (info := phases.get(p)) else "" for p in PHASES]
        seen = run.last_seen.get(rank, {})
        rows.append(f"| {rank} | {run.phase_reached.get(rank) or '-'} | " + " | ".join(cells)
                    + f" | {seen.get('line') or ''} |")
    if len(run.ranks) > 64:
        rows.append(f"| ... {len(run.ranks) - 64} more ranks | | " + " | " * len(PHASES) + " |")
    rows.append("\n(each phase column: the line where the rank entered it)\n")
    return "\n".join(rows)


def _tracebacks(label: str, run: RunSummary, r: Redactor) -> str:
    if not run.exceptions:
        return ""
    out = [f"### {label}: first traceback of each distinct failure\n"]
    for exc in run.exceptions[:_MAX_TRACEBACKS]:
        ranks = ", ".join(str(x) for x in exc.ranks or []) or "rank not shown"
        lines = (exc.text or "").splitlines()
        shown = lines[:_TRACEBACK_LINES]
        more = f"\n... {len(lines) - len(shown)} more lines" if len(lines) > len(shown) else ""
        where = f"line {exc.first_line}" if exc.first_line else ""
        out.append(f"**{exc.exception or 'traceback cut before its exception'}** on {ranks} "
                   f"({len(exc.occurrences or [])} occurrence(s), first at {where}; phase {exc.phase or '?'})\n")
        out.append(_fence(r("\n".join(shown)) + more) + "\n")
    if len(run.exceptions) > _MAX_TRACEBACKS:
        out.append(f"_{len(run.exceptions) - _MAX_TRACEBACKS} more distinct tracebacks in `summary --json`._\n")
    return "\n".join(out)


_MEMORY = (("load_begin_avail_gib", "free before load"), ("weights_gib", "weights"),
           ("load_end_avail_gib", "free after load"), ("kv_gib", "KV pool"), ("kv_tokens", "#tokens"),
           ("pool_end_avail_gib", "free after pools"), ("capture_mem_gib", "CUDA graphs"),
           ("capture_end_avail_gib", "free after graphs"), ("available_gpu_mem_gib", "available_gpu_mem"))


def _memory_table(label: str, run: RunSummary) -> str:
    mem = run.memory
    if not mem:
        return ""
    keys = [(k, name) for k, name in _MEMORY if any(m.get(k) is not None for m in mem.values())]
    rows = [f"### {label}: memory per rank (GiB; SGLang's GB is GiB)\n",
            "| rank | " + " | ".join(n for _, n in keys) + " |", "|---|" + "---|" * len(keys)]
    for rank, m in list(mem.items())[:64]:
        cells = [str(m[k]) if k == "kv_tokens" and m.get(k) is not None else gib(m.get(k), missing="", unit=False)
                 for k, _ in keys]
        rows.append(f"| {rank} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _settings(label: str, run: RunSummary, r: Redactor) -> str:
    out = [f"### {label}: settings, versions, environment\n"]
    version, why, diffs = non_default_args(run)
    if diffs:
        out.append(f"server_args that differ from SGLang's defaults ({why}):\n")
        out.append("| setting | logged | default |\n|---|---|---|")
        for name, value, default in diffs[:80]:
            shown = "<redacted>" if _SECRET_KEYS.search(name) and r.enabled and value not in (None, "") else r(repr(value))
            if shown == "<redacted>":
                r.counts["API key or token"] += 1
            out.append(f"| {name} | {_md_cell(shown)} | {_md_cell(default)} |")
        out.append("")
    elif run.server_args:
        out.append(f"server_args: every compared field has its default ({why}).\n")
    else:
        out.append("server_args: not in this log.\n")
    if run.launch_command:
        out.append("launch command:\n\n" + _fence(r(run.launch_command)[:2000]) + "\n")
    if run.versions:
        out.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items())) + "\n")
    if run.env:
        env = []
        for k, v in sorted(run.env.items()):
            value = "<redacted>" if r.enabled and _SECRET_KEYS.search(k) else r(str(v))
            if value == "<redacted>":
                r.counts["API key or token"] += 1
            env.append(f"`{k}={value}`")
        out.append("environment: " + ", ".join(env) + "\n")
    return "\n".join(out)


def _next_steps(d: Diagnosis) -> list[tuple[str, str]]:
    steps: list[tuple[str, str]] = []
    timer = getattr(d.facts, "timer", None)
    for s in getattr(timer, "next_steps", ()) or ():
        steps.append((s.setting, s.why))
    serving = getattr(d.facts, "serving", None)
    for s in getattr(serving, "kv_advice", ()) or ():
        steps.append((s.setting, s.why))
    return steps


def _redaction_list(r: Redactor) -> str:
    if not r.enabled:
        return "\n---\n_Not redacted (`--no-redact`): paths, hosts, addresses, keys and request text are as logged._\n"
    if not r.counts:
        return "\n---\n_Redacted: nothing matched (home and model paths, hostnames, IP addresses, API keys and tokens, request text)._\n"
    items = ", ".join(f"{kind}: {n}" for kind, n in sorted(r.counts.items()))
    return ("\n---\n_Redacted (placeholders like `<home-directory-1>`; `--no-redact` keeps the text): "
            f"{items}._\n")
