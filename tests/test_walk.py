"""A new user's walk through every command on real logs, as the user would type it.

Each command on real excerpts (SGLang's, and one of vLLM's, which the tool does not read
but must not fail on): no traceback, no input changed (hashed before and after), the exit
statuses the help documents (0 and 1 for a result, 2 for bad input with one line on
stderr), and in what leaves the machine (``bundle``, ``--redact``) none of the secrets
planted in copies of the logs. What other files test in depth (the redaction corpus on one
log, output paths, compressed input) is not repeated here.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from logforensics.cli import main
from logforensics.model.summary import OUTCOMES

ROOT = Path(__file__).resolve().parent
REAL = ROOT.parent / "fixtures" / "real"
#: one of each shape of run and line the real excerpts show
WALK = [REAL / f"{name}.log" for name in (
    "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready",  # ready, TP4
    "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback",  # an exception, 8 ranks
    "035-2024-02-modelrpcclient-prefill-oom-a10g",  # a traceback cut before its exception, no prefix
    "109-2node-h100-k8s-pod-nccl-info-interleaved-watchdog-failure-rank1",  # a native failure, hostnames
    "101-2node-dp-attn-mtp-pyspy-dump-watchdog-timeout-exit-131",  # hung
    "049-docker-compose-prefix-kv-pool-create-buffers-oom-24gb",  # a wrapper on every line
    "013-ray-wrapped-dp1-tp0-newlines-collapsed-chained",  # a traceback on one physical line
)] + sorted((ROOT / "data" / "vllm").glob("*.log"))
IDS = [p.name[:3] for p in WALK]
CORPUS = ROOT / "data" / "redaction_corpus.tsv"


def _digest(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def cli(*args: str, inputs: list[Path], codes: tuple[int, ...] = (0,), stdin: bytes | None = None) -> Result:
    """``logforensics ARGS`` in this process: no exception escapes, the exit status is one of
    ``codes``, the inputs are as they were, an error is one line."""
    before = _digest(inputs)
    result = CliRunner().invoke(main, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: {result.exception!r}") from result.exception
    assert result.exit_code in codes, (args, result.exit_code, result.stderr[-600:])
    assert _digest(inputs) == before, f"{args} changed an input"
    if result.exit_code == 2:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result


@pytest.mark.parametrize("log", WALK, ids=IDS)
def test_summary(log: Path) -> None:
    cli("summary", str(log), inputs=[log])
    s = json.loads(cli("summary", "--json", str(log), inputs=[log]).stdout)
    assert s["outcome"] in OUTCOMES and s["outcome_reason"]
    # a log of vLLM's records is said to be one, not one "without readiness or failure"
    vllm = log.parent.name == "vllm"
    assert not (vllm and s["outcome_reason"].endswith("without readiness or failure")), s["outcome_reason"]
    assert any("vLLM's" in w for w in s["warnings"]) == (vllm and s["outcome"] == "incomplete"), s["warnings"]
    json.loads(cli("summary", "--json", "--redact", str(log), inputs=[log]).stdout)


@pytest.mark.parametrize("log", WALK, ids=IDS)
def test_parse_in_each_format(log: Path, tmp_path: Path) -> None:
    for fmt in ("table", "jsonl", "csv"):
        shown = cli("parse", "--format", fmt, str(log), inputs=[log]).stdout
        out = tmp_path / f"events.{fmt}"
        cli("parse", "--format", fmt, "-o", str(out), str(log), inputs=[log])
        assert out.read_text(encoding="utf-8") == shown
    cli("parse", "--format", "parquet", "-o", str(tmp_path / "events.parquet"), str(log), inputs=[log])


@pytest.mark.parametrize("log", WALK[::2], ids=IDS[::2])
def test_bundle_and_diff(log: Path, tmp_path: Path) -> None:
    other = WALK[(WALK.index(log) + 1) % len(WALK)]
    cli("bundle", str(log), "-o", str(tmp_path / "b.md"), inputs=[log])
    cli("bundle", "--no-redact", str(log), inputs=[log])
    saved = tmp_path / "baseline.summary.json"
    saved.write_text(cli("summary", "--json", str(other), inputs=[other]).stdout, encoding="utf-8")
    assert cli("diff", str(other), str(log), inputs=[other, log], codes=(0, 1)).stdout  # -o: in the last test
    done = cli("diff", str(saved), str(log), "--json", "-", inputs=[saved, log], codes=(0, 1))
    assert json.loads(done.stdout)["findings"] is not None


#: a traceback held open by the parser when the crash is seen, a native failure without one
WATCHED = [REAL / f"{name}.log" for name in (
    "049-docker-compose-prefix-kv-pool-create-buffers-oom-24gb",
    "109-2node-h100-k8s-pod-nccl-info-interleaved-watchdog-failure-rank1",
)]


@pytest.mark.parametrize("log", WATCHED, ids=[p.name[:3] for p in WATCHED])
def test_watch_on_standard_input_ends_with_the_summary_outcome_and_every_event(log: Path) -> None:
    """Input that ends (``watch -``) ends the watch: the record the parser still held (a
    traceback cut before its exception line, the crash's own traceback) is written, and a
    crash that ``summary`` sees exits 1."""
    outcome = json.loads(cli("summary", "--json", str(log), inputs=[log]).stdout)["outcome"]
    events = cli("parse", "--format", "jsonl", str(log), inputs=[log]).stdout.splitlines()
    with log.open("rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "logforensics", "watch", "-", "--grace", "0", "--jsonl"],
                              stdin=stdin, capture_output=True, text=True, timeout=120)
    assert "Traceback (most recent call last):\n  File" not in done.stderr.replace(str(log), "")
    assert done.returncode == (1 if outcome == "crashed" else 0), (outcome, done.stderr[-400:])
    watched = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(e["kind"], e["line"]) for e in watched] == [(json.loads(e)["kind"], json.loads(e)["line"])
                                                          for e in events]


def test_scan_then_runs_crashes_and_query(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for log in WALK:
        shutil.copy(log, logs / log.name)
    copies = sorted(logs.iterdir())
    store = str(tmp_path / "store")
    cli("scan", str(logs), "--store", store, "--jobs", "1", "--no-events", inputs=copies)
    runs = json.loads(cli("runs", "--store", store, "--format", "json", inputs=copies).stdout)
    assert len(runs) == len(WALK)
    cli("runs", "--store", store, "--outcome", "crashed", "--wide", inputs=copies)
    cli("crashes", "--store", store, inputs=copies)
    rows = json.loads(cli("query", "--store", store, "--format", "json",
                          "SELECT outcome, count(*) AS n FROM runs GROUP BY 1", inputs=copies).stdout)
    assert sum(r["n"] for r in rows) == len(WALK)
    cli("query", "--store", store, "DROP TABLE runs", inputs=copies, codes=(2,))


def test_check_on_a_small_case_directory(tmp_path: Path) -> None:
    case = tmp_path / "cases" / "oom"
    case.mkdir(parents=True)
    log = case / "run.log"
    shutil.copy(WALK[1], log)
    cli("check", str(case.parent), "--update", inputs=[log])
    cli("check", str(case.parent), "--junit", str(tmp_path / "check.xml"), inputs=[log])
    log.write_bytes(WALK[0].read_bytes())  # the case's log now tells another story
    assert "oom" in cli("check", str(case.parent), inputs=[log], codes=(1,)).stdout


@pytest.mark.parametrize("args", [
    ("summary",), ("parse",), ("bundle",), ("diff", str(WALK[0])), ("scan", "--jobs", "1", "--store", "{tmp}/store"),
])
def test_bad_input_to_every_command_that_reads_logs(args: tuple[str, ...], tmp_path: Path) -> None:
    args = tuple(a.replace("{tmp}", str(tmp_path)) for a in args)
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    cli(*args, str(tmp_path / "no-such.log"), inputs=[], codes=(2,))
    if args[0] != "scan":  # a scan of a directory without logs is an empty store
        cli(*args, str(empty_dir), inputs=[], codes=(2,))
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    cli(*args, str(empty), inputs=[empty], codes=(0, 1))
    if args[0] != "scan":  # standard input is a run for the commands that take one run
        cli(*args, "-", inputs=[], codes=(0, 1), stdin=WALK[1].read_bytes())


@pytest.mark.parametrize("command", ["runs", "crashes", "query"])
def test_store_commands_on_what_is_not_a_store(command: str, tmp_path: Path) -> None:
    cli(command, "--store", str(tmp_path), *(["SELECT 1"] if command == "query" else []), inputs=[], codes=(2,))


def _secrets() -> list[tuple[str, list[str]]]:
    """(secret, its lines) of the corpus: the lines a log would hold it in."""
    out = []
    for raw in CORPUS.read_text(encoding="utf-8").splitlines():
        if raw and not raw.startswith("#"):
            kind, secret, line = raw.split("\t")
            if kind != "keep" and not kind.startswith("prompt:"):
                out.append((secret, line.encode("ascii").decode("unicode_escape").split("\n")))
    return out


def _planted(log: Path, to: Path, secrets: list[tuple[str, list[str]]]) -> Path:
    """A copy of ``log`` with the corpus's lines after its lines, under the same line prefix
    (a key's lines logged one by one), and appended to its last line."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        prefix = line[: line.index("] ") + 2] if line.startswith("[") and "] " in line else ""
        out += [prefix + part for _, parts in secrets[i::len(lines)] for part in parts]
    out.append(lines[-1] + " " + secrets[len(lines) % len(secrets)][1][0])
    to.write_text("\n".join(out) + "\n", encoding="utf-8")
    return to


@contextmanager
def _outputs(log: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    html = tmp_path / "r.html"
    found = {
        "bundle": cli("bundle", str(log), inputs=[log]).stdout,
        "summary --redact": cli("summary", "--redact", str(log), inputs=[log]).stdout,
        "summary --json --redact": cli("summary", "--json", "--redact", str(log), inputs=[log]).stdout,
        "diff --redact --json": cli("diff", str(log), str(log), "--redact", "--json", "-", "-o", str(html),
                                    inputs=[log], codes=(0, 1)).stdout,
    }
    found["diff --redact -o"] = html.read_text(encoding="utf-8")
    yield found


@pytest.mark.parametrize("log", [WALK[2], WALK[3], WALK[5]], ids=["035", "109", "049"])
def test_no_planted_secret_leaves_in_a_redacted_output(log: Path, tmp_path: Path) -> None:
    secrets = _secrets()
    planted = _planted(log, tmp_path / log.name, secrets)
    text = planted.read_text(encoding="utf-8")
    assert all(s in text for s, _ in secrets)
    # a line's shape (coverage: unrecognised lines grouped) shows it with its numbers masked
    forms = [s for s, _ in secrets] + [re.sub(r"\d+", "N", s) for s, _ in secrets if len(s) >= 24]
    with _outputs(planted, tmp_path) as outputs:
        for name, shown in outputs.items():
            leaked = [s for s in forms if s in shown or json.dumps(s)[1:-1] in shown]
            assert not leaked, (name, leaked)
