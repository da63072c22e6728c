"""``logforensics mcp``: the tools of ``tools.py`` as a Model Context Protocol server over stdio.

Built on the official Python SDK (``mcp``, the optional extra ``logforensics[mcp]``). Each
tool's input and output have JSON schemas (the output's are the TypedDicts below, whose
nested parts are the commands' own ``--json``); a tool's anticipated failure (a missing
file, refused SQL) is the call's error with a one-line message, never a traceback.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict  # pydantic needs it for nested TypedDicts before Python 3.12

from .fit import fit
from .tools import (
    FINDINGS_PAGE,
    Remote,
    Session,
    ToolInputError,
    check_env_diff_tool,
    diff_runs_tool,
    explain_finding_tool,
    get_lines_tool,
    query_store_tool,
    summarize_run_tool,
    watch_poll_tool,
    watch_start_tool,
    watch_stop_tool,
)

INSTRUCTIONS = (
    "Forensics of SGLang server logs. summarize_run reads one run (files, a directory of per-node "
    "logs, globs): its outcome, the crash or hang with file:line and rank. diff_runs compares a failing "
    "run with a baseline that worked: a verdict, what was ruled out, findings with stable ids; "
    "check_env_diff compares the two runs' environments from the files beside their logs (check_env, "
    "nvidia-smi, pip); explain_finding gives one finding's explanation and evidence; get_lines shows a log around a line "
    "(redacted); query_store runs read-only SQL over a fleet store written by `logforensics scan`; "
    "watch_start/watch_poll/watch_stop follow a log while it is written, each poll saying only what is new. "
    "Every claim cites the log lines it rests on; 'cannot tell from these logs' comes with what to collect."
)


class SummaryResult(TypedDict):
    summary: dict[str, Any]
    text: str
    truncated: list[str]


class DiffResult(TypedDict):
    verdict: str
    conclusion: dict[str, Any]
    findings: list[dict[str, Any]]
    total: int
    offset: int
    next_offset: int | None
    text: str
    truncated: list[str]


class EnvValue(TypedDict):
    value: str
    file: str
    line: int
    where: str


class EnvFact(TypedDict):
    key: str
    label: str
    baseline: EnvValue | None
    failing: EnvValue | None


class EnvDiffResult(TypedDict):
    differs: list[EnvFact]
    same: list[EnvFact]
    one_side: list[EnvFact]
    baseline_files: dict[str, str]
    failing_files: dict[str, str]
    text: str
    truncated: list[str]


class FindingResult(TypedDict):
    finding: dict[str, Any]
    text: str
    truncated: list[str]


class LinesResult(TypedDict):
    file: str
    lines: list[dict[str, Any]]
    redacted: bool
    text: str
    truncated: list[str]


class QueryResult(TypedDict):
    columns: list[str]
    rows: list[dict[str, Any]]
    offset: int
    next_offset: int | None
    text: str
    truncated: list[str]


class WatchStarted(TypedDict):
    watch_id: str
    text: str
    truncated: list[str]


class WatchPoll(TypedDict):
    watch_id: str
    outcome: str
    outcome_reason: str
    outcome_changed: bool
    phase_changes: list[dict[str, Any]]
    new_findings: list[dict[str, Any]]
    bytes_read: int
    more_to_read: bool
    notes: list[str]
    text: str
    truncated: list[str]


class WatchStopped(TypedDict):
    watch_id: str
    outcome: str
    outcome_reason: str
    bytes_read: int
    text: str
    truncated: list[str]


#: Characters of JSON a tool's result may take (``--max-output``); more is cut, and said.
MAX_OUTPUT = 512 << 10


def build(session: Session | None = None, max_output: int = MAX_OUTPUT) -> Any:
    """The server (an ``MCPServer``) with its tools; ``session`` keeps findings between calls
    and holds the time bound; each result is cut to ``max_output`` characters (``fit``)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from ..version import __version__

    mem = session or Session()
    server = MCPServer("logforensics", version=__version__, instructions=INSTRUCTIONS)

    def checked(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fit(fn(*args, **kwargs), max_output)
        except ToolInputError as e:
            raise ToolError(" ".join(str(e).split())) from None

    @server.tool()
    def summarize_run(paths: list[str], full: bool = False) -> SummaryResult:
        """Summarise one run of SGLang logs (files, a directory of per-node logs, globs, or HOST:PATH
        on a host the server allows over SSH): outcome
        (ready, crashed, hung, incomplete), each rank's phase, the crash or hang with file:line and
        rank, errors, coverage. `full` adds everything `summary --json` has (memory, serving series)."""
        return checked(summarize_run_tool, mem, paths, full)

    @server.tool()
    def diff_runs(baseline: list[str], failing: list[str], offset: int = 0,
                  limit: int = FINDINGS_PAGE) -> DiffResult:
        """Compare a failing run with a baseline that worked (each as summarize_run takes it, HOST:PATH
        included): the verdict, the conclusion (what
        happened first, the best explanation and its confidence or 'cannot tell from these logs',
        what was ruled out, the next step) and findings (a page: offset, limit, next_offset), each
        with a stable id for explain_finding."""
        return checked(diff_runs_tool, mem, baseline, failing, offset, limit)

    @server.tool()
    def check_env_diff(baseline: list[str], failing: list[str]) -> EnvDiffResult:
        """Compare two runs' environments from the files beside their logs (run directories or the
        files themselves: sglang.check_env, nvidia-smi, nvidia-smi topo -m, pip freeze/list/show):
        each fact that differs (versions, driver, GPUs, topology, limits) with both values and the
        file:line of each, the facts equal on both sides, and those one side lacks."""
        return checked(check_env_diff_tool, mem, baseline, failing)

    @server.tool()
    def explain_finding(finding_id: str) -> FindingResult:
        """One finding of an earlier diff_runs, by id (RULE:RANK:PHASE:HASH): the rule's explanation
        with its formula and figures, and every evidence line with file:line and rank."""
        return checked(explain_finding_tool, mem, finding_id)

    @server.tool()
    def get_lines(path: str, line: int, before: int = 10, after: int = 10, redact: bool = True) -> LinesResult:
        """Lines of a log (a file or HOST:PATH) around `line` (at most 400), redacted as `logforensics bundle` does (home
        and model paths, hosts, addresses, keys, tokens) unless `redact` is false."""
        return checked(get_lines_tool, mem, path, line, before, after, redact)

    @server.tool()
    def query_store(store: str, sql: str, offset: int = 0, limit: int = 100) -> QueryResult:
        """One read-only SQL statement (DuckDB) over a fleet store written by `logforensics scan`
        (views runs, crashes, findings, ...), a page of rows (offset, limit, next_offset)."""
        return checked(query_store_tool, mem, store, sql, offset, limit)

    @server.tool()
    def watch_start(path: str, baseline: list[str] | None = None) -> WatchStarted:
        """Start following a local log that is being written (a server's log while it runs),
        optionally against a baseline run; then call watch_poll."""
        return checked(watch_start_tool, mem, path, baseline)

    @server.tool()
    def watch_poll(watch_id: str) -> WatchPoll:
        """What is new in a followed log since the last poll: each rank's phase changes, the
        outcome (and whether it changed), and only the findings not reported before."""
        return checked(watch_poll_tool, mem, watch_id)

    @server.tool()
    def watch_stop(watch_id: str) -> WatchStopped:
        """Stop following: the log as read so far, judged as `summary` judges a whole log."""
        return checked(watch_stop_tool, mem, watch_id)

    return server


def serve(roots: list[str], timeout: float | None = None, max_output: int = MAX_OUTPUT,
          remote: Remote | None = None) -> None:
    """Run the server over stdio until the client closes it, reading only under ``roots`` (and
    over SSH only from ``remote``'s hosts), each call's work stopped after ``timeout`` seconds,
    each result cut to ``max_output``."""
    build(Session(roots, timeout=timeout, remote=remote), max_output).run()
