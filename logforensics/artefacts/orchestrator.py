"""What the orchestrator around a server recorded of its end, and what it allotted it.

A server killed from outside writes nothing: its log just stops. The one who killed it
says so in its own records: Slurm's ``slurmstepd``/``srun`` lines, the kernel's OOM
killer, Ray's worker-exit records, ``kubectl describe pod`` / ``kubectl get pod -o yaml``
(``OOMKilled``, exit code 137, restarts, liveness-probe kills) and ``docker inspect``
(``State.OOMKilled``, ``ExitCode``). Each becomes a :class:`~.types.Termination` with its
line. The CPU and memory a pod or container was given are environment facts
(``cpu_limit``, ``memory_limit``): a job that received 2 CPUs instead of 64 looks like a
code regression from the log alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from .types import Cited, Termination

_Rec = tuple[re.Pattern[str], str, str, Callable[[re.Match[str]], dict[str, Any]]]


def _groups(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in m.groupdict().items() if v is not None}
    if "exit_code" in out:
        out["exit_code"] = int(out["exit_code"])
    return out


#: Line records: (expression, source, cause, what to keep). The first that matches a line wins.
RECORDS: tuple[_Rec, ...] = (
    (re.compile(r"slurmstepd(?:-\S+)?: error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) CANCELLED AT "
                r"(?P<time>\S+) DUE TO TIME LIMIT"), "slurm", "time_limit", _groups),
    (re.compile(r"slurmstepd(?:-\S+)?: error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) CANCELLED AT "
                r"(?P<time>\S+) DUE TO NODE FAIL"), "slurm", "node_failure", _groups),
    (re.compile(r"slurmstepd(?:-\S+)?: error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) CANCELLED AT "
                r"(?P<time>\S+)"), "slurm", "cancelled", _groups),
    (re.compile(r"slurmstepd(?:-\S+)?: error: Detected (?P<events>\d+) oom[-_]kill event\(?s?\)? in "
                r"(?:StepId=|step )?(?P<job>[\w.]+)"), "slurm", "oom_killed", _groups),
    (re.compile(r"srun: error: (?P<host>[^\s:]+): tasks? (?P<task>[\d,-]+): Out Of Memory"), "slurm", "oom_killed",
     _groups),
    (re.compile(r"srun: error: (?P<host>[^\s:]+): tasks? (?P<task>[\d,-]+): Exited with exit code "
                r"(?P<exit_code>\d+)"), "slurm", "exited", _groups),
    (re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process (?P<pid>\d+) \((?P<process>[^)]*)\)"),
     "kernel", "oom_killed", _groups),
    (re.compile(r"OutOfMemoryError: Task was killed due to the node running low on memory"), "ray", "oom_killed",
     _groups),
    (re.compile(r"Worker exit type: (?P<exit_type>\w+)(?: Worker exit detail: (?P<exit_detail>.*))?"), "ray",
     "exited", _groups),
)


def line_records(file: str, lines: Iterable[str]) -> list[Termination]:
    """Every line record of :data:`RECORDS` in a text, in line order."""
    out = []
    for no, raw in enumerate(lines, 1):
        if "slurm" not in raw and "srun" not in raw and "ill" not in raw and "exit" not in raw:
            continue
        for rx, source, cause, keep in RECORDS:
            m = rx.search(raw)
            if m:
                detail = keep(m)
                code = detail.pop("exit_code", None)
                if cause == "exited" and source == "ray" and detail.get("exit_type") in ("INTENDED_USER_EXIT",
                                                                                        "INTENDED_SYSTEM_EXIT"):
                    break  # Ray stopped the worker itself: no failure
                out.append(Termination(source, cause, file, no, raw.strip()[:500], code,
                                       {k: str(v) for k, v in detail.items()}))
                break
    return out


def is_records(lines: list[str]) -> bool:
    return bool(line_records("", lines[:2000]))


# -- Kubernetes ---------------------------------------------------------------------------
_K_STATE = re.compile(r"^(?P<indent>\s*)(?P<which>State|Last State):\s+(?P<state>\w+)")
_K_FIELD = re.compile(r"^\s+(?P<key>Reason|Exit Code|Signal|Finished|Message):\s+(?P<value>.*?)\s*$")
_K_RESTARTS = re.compile(r"^\s+Restart Count:\s+(\d+)")
_K_PROBE = re.compile(r"failed (?P<probe>liveness|startup) probe, will be restarted")
_K_LIMIT = re.compile(r"^\s+(?P<key>cpu|memory):\s+(?P<value>\S+)\s*$")
_K_CONTAINER = re.compile(r"^  (?P<name>[\w.-]+):\s*$")


def is_k8s_describe(lines: list[str]) -> bool:
    head = [line.rstrip() for line in lines[:400]]
    return any(line.startswith("Name:") for line in head) and any(line.startswith("Containers:") for line in head)


def read_k8s_describe(file: str, lines: list[str]) -> tuple[list[Termination], dict[str, Cited]]:
    """Terminations of ``kubectl describe pod``: each container's terminated state and last
    state (reason, exit code), the restart count, probe kills among the events; and the
    containers' CPU and memory limits."""
    out: list[Termination] = []
    facts: dict[str, Cited] = {}
    container = None
    state: dict[str, Any] | None = None
    in_limits = False
    restarts: str | None = None

    def close() -> None:
        nonlocal state
        if state is not None and state["state"] == "Terminated":
            t = _terminated(file, state, container, restarts)
            if t is not None:
                out.append(t)
        state = None

    for no, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        c = _K_CONTAINER.match(line)
        if c:
            close()
            container = c.group("name")
            continue
        s = _K_STATE.match(line)
        if s:
            close()
            state = {"state": s.group("state"), "which": s.group("which"), "line": no, "text": " ".join(line.split()),
                     "indent": len(s.group("indent"))}
            continue
        if state is not None:
            f = _K_FIELD.match(line)
            if f and len(line) - len(line.lstrip()) > state["indent"]:
                state[f.group("key")] = f.group("value")
                if f.group("key") == "Reason":
                    state["line"], state["text"] = no, " ".join(f"{state['text']}; {line.strip()}".split())
                continue
            close()
        r = _K_RESTARTS.match(line)
        if r:
            restarts = r.group(1)
            for t in out:
                if t.detail.get("container") == container:
                    t.detail["restarts"] = restarts
            continue
        stripped = line.strip()
        if stripped in ("Limits:", "Requests:"):
            in_limits = stripped == "Limits:"
            continue
        lim = _K_LIMIT.match(line)
        if lim and in_limits:
            key = "cpu_limit" if lim.group("key") == "cpu" else "memory_limit"
            facts.setdefault(key, Cited(lim.group("value"), file, no))
            continue
        in_limits = in_limits and bool(lim)
        p = _K_PROBE.search(line)
        if p:
            out.append(Termination("kubernetes", "liveness_probe", file, no, stripped[:500], None,
                                   {"probe": p.group("probe")}))
    close()
    return out, facts


def _terminated(file: str, state: dict[str, Any], container: str | None, restarts: str | None) -> Termination | None:
    reason = state.get("Reason", "")
    code = int(state["Exit Code"]) if str(state.get("Exit Code", "")).lstrip("-").isdigit() else None
    if reason == "OOMKilled":
        cause = "oom_killed"
    elif code:
        cause = "exited"
    else:
        return None  # Completed, exit code 0: no failure
    detail = {"reason": reason, "state": state["which"]}
    if container:
        detail["container"] = container
    if restarts:
        detail["restarts"] = restarts
    return Termination("kubernetes", cause, file, state["line"], state["text"][:500], code, detail)


_Y_TERMINATED = re.compile(r"^(?P<indent>\s*)terminated:\s*$")
_Y_FIELD = re.compile(r"^\s+(?P<key>exitCode|reason|signal|finishedAt):\s*(?P<value>.*?)\s*$")
_Y_RESTARTS = re.compile(r"^\s+restartCount:\s*(\d+)")
_Y_NAME = re.compile(r"^\s+(?:- )?name:\s*(\S+)")


def is_k8s_yaml(lines: list[str]) -> bool:
    head = [line.rstrip() for line in lines[:2000]]
    return "kind: Pod" in head or any(line.strip() == "containerStatuses:" for line in head)


def read_k8s_yaml(file: str, lines: list[str]) -> tuple[list[Termination], dict[str, Cited]]:
    """Terminations of ``kubectl get pod -o yaml``: each ``terminated`` state (``lastState``
    or ``state``) with its reason and exit code, and the restart counts; the limits."""
    out: list[Termination] = []
    facts: dict[str, Cited] = {}
    block: dict[str, Any] | None = None
    in_limits: int | None = None
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        indent = len(line) - len(line.lstrip())
        if block is not None:
            f = _Y_FIELD.match(line)
            if f and indent > block["indent"]:
                block[f.group("key")] = f.group("value").strip("'\"")
                if f.group("key") == "reason":
                    block["line"], block["text"] = no, line.strip()
                continue
            t = _terminated(file, {"Reason": block.get("reason", ""), "Exit Code": block.get("exitCode", ""),
                                   "which": "terminated", "line": block["line"], "text": block["text"]}, None, None)
            if t is not None:
                out.append(t)
            block = None
        m = _Y_TERMINATED.match(line)
        if m:
            block = {"indent": len(m.group("indent")), "line": no, "text": line.strip()}
            continue
        r = _Y_RESTARTS.match(line)
        if r and out and "restarts" not in out[-1].detail:
            out[-1].detail["restarts"] = r.group(1)
        if line.strip() == "limits:":
            in_limits = indent
            continue
        if in_limits is not None:
            lim = re.match(r"^\s+(cpu|memory):\s*['\"]?([^'\"\s]+)", line)
            if lim and indent > in_limits:
                facts.setdefault("cpu_limit" if lim.group(1) == "cpu" else "memory_limit", Cited(lim.group(2), file, no))
                continue
            in_limits = None
    if block is not None:
        t = _terminated(file, {"Reason": block.get("reason", ""), "Exit Code": block.get("exitCode", ""),
                               "which": "terminated", "line": block["line"], "text": block["text"]}, None, None)
        if t is not None:
            out.append(t)
    return out, facts


# -- Docker -------------------------------------------------------------------------------
def is_docker_inspect(data: Any) -> bool:
    items = data if isinstance(data, list) else [data]
    return bool(items) and all(isinstance(i, dict) and isinstance(i.get("State"), dict) for i in items)


def read_docker_inspect(file: str, data: Any, lines: list[str]) -> tuple[list[Termination], dict[str, Cited]]:
    """``docker inspect``: a container killed by the OOM killer or exited with a non-zero
    code, and the CPUs and memory its HostConfig gave it (``NanoCpus``, ``Memory``)."""
    out: list[Termination] = []
    facts: dict[str, Cited] = {}
    for item in data if isinstance(data, list) else [data]:
        st = item["State"]
        code = st.get("ExitCode") if isinstance(st.get("ExitCode"), int) else None
        name = str(item.get("Name") or item.get("Id") or "")[:80].lstrip("/")
        detail = {k: str(st[k]) for k in ("Status", "Error", "FinishedAt") if st.get(k)}
        if name:
            detail["container"] = name
        if st.get("OOMKilled") is True:
            out.append(Termination("docker", "oom_killed", file, _line_of(lines, '"OOMKilled"'),
                                   f'"OOMKilled": true, "ExitCode": {code}', code, detail))
        elif code and not st.get("Running"):
            out.append(Termination("docker", "exited", file, _line_of(lines, '"ExitCode"'), f'"ExitCode": {code}',
                                   code, detail))
        host = item.get("HostConfig") if isinstance(item.get("HostConfig"), dict) else {}
        if isinstance(host.get("NanoCpus"), int) and host["NanoCpus"] > 0:
            facts.setdefault("cpu_limit", Cited(f"{host['NanoCpus'] / 1e9:g}", file, _line_of(lines, '"NanoCpus"')))
        if isinstance(host.get("Memory"), int) and host["Memory"] > 0:
            facts.setdefault("memory_limit", Cited(f"{host['Memory'] / 2**30:.2f} GiB", file,
                                                   _line_of(lines, '"Memory"')))
    return out, facts


def _line_of(lines: list[str], needle: str) -> int:
    """The first line that holds ``needle`` (0 when none does: the file as a whole)."""
    return next((no for no, line in enumerate(lines, 1) if needle in line), 0)


def load_json(text: str) -> Any:
    """The JSON of a text, or None when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None
