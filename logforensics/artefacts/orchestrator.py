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

import re
from collections.abc import Iterable
from typing import Any

from ..read import jobend
from .environment import cpu_value, k8s_bytes, memory_value, slurm_bytes, slurm_cores
from .types import Cited, Termination


def line_records(file: str, lines: Iterable[str]) -> list[Termination]:
    """Every line record of ``read.jobend`` (Slurm, the kernel's OOM killer, Ray, Docker's
    events) in a text, in line order. A container's ``die`` after its own ``oom`` event is
    the end of that OOM kill (as ``docker inspect`` then says ``OOMKilled: true``), with the
    exit code the ``oom`` event lacks. A shell's ``Killed`` is a notice in the output of the
    job the shell ran, the log itself, not a record of its own: a file is not records by it."""
    out = []
    oom: dict[str, int] = {}  # container -> the line of its oom event
    for no, raw in enumerate(lines, 1):
        found = jobend.match(raw)
        if found is None or found.source == "shell":
            continue
        detail = dict(found.detail)
        cause = found.cause
        container = detail.get("container") if found.source == "docker" else None
        if container and cause == "oom_killed":
            oom.setdefault(container, no)
        elif container and container in oom:
            cause, detail["oom_event_line"] = "oom_killed", str(oom[container])
        out.append(Termination(found.source, cause, file, no, raw.strip()[:500], found.exit_code, detail))
    return out


def is_records(lines: list[str]) -> bool:
    return bool(line_records("", lines[:2000]))


# -- Slurm's own view of a job: ``scontrol show job`` ----------------------------------------
_SC_FIELD = re.compile(r"(?<![\w/])(JobId|JobState|Reason|ExitCode|NumCPUs|NumNodes|TRES|MinMemoryNode|MinMemoryCPU|"
                       r"NodeList)=(\S*)")
#: a job's final state -> the cause (``JobState=`` of ``scontrol show job``)
_SC_STATES = {"OUT_OF_MEMORY": "oom_killed", "TIMEOUT": "time_limit", "NODE_FAIL": "node_failure",
              "CANCELLED": "cancelled", "PREEMPTED": "cancelled", "FAILED": "exited"}


def is_scontrol(lines: list[str]) -> bool:
    return any(line.lstrip().startswith("JobId=") and "JobName=" in line for line in lines[:400])


def read_scontrol(file: str, lines: list[str]) -> tuple[list[Termination], dict[str, Cited]]:
    """``scontrol show job``: the job's final state (``JobState=OUT_OF_MEMORY``, ``TIMEOUT``,
    ...) with its exit code, and what it was given: CPUs (``NumCPUs=``), memory (``mem=`` of
    ``TRES=``, else ``MinMemoryNode=``), GPUs (``gres/gpu=``)."""
    out: list[Termination] = []
    facts: dict[str, Cited] = {}
    job: dict[str, tuple[str, int]] = {}

    def close() -> None:
        state = job.get("JobState", ("", 0))
        cause = _SC_STATES.get(state[0])
        code = job.get("ExitCode", ("", 0))[0].split(":")[0]
        if cause == "exited" and code in ("", "0"):
            cause = None
        if cause is not None:
            detail = {"job": job.get("JobId", ("", 0))[0], "reason": job.get("Reason", ("", 0))[0]}
            out.append(Termination("slurm", cause, file, state[1], f"JobState={state[0]} Reason={detail['reason']}",
                                   int(code) if code.isdigit() else None, {k: v for k, v in detail.items() if v}))
        job.clear()

    for no, raw in enumerate(lines, 1):
        for m in _SC_FIELD.finditer(raw):
            key, value = m.group(1), m.group(2)
            if key == "JobId" and job:
                close()
            job.setdefault(key, (value, no))
            if key == "NumCPUs":
                facts.setdefault("cpu_limit", Cited(cpu_value(slurm_cores(value), f"NumCPUs={value}"), file, no))
            elif key == "TRES":
                tres = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
                if "mem" in tres:
                    facts.setdefault("memory_limit", Cited(memory_value(slurm_bytes(tres["mem"]), f"mem={tres['mem']}"),
                                                           file, no))
                if "gres/gpu" in tres:
                    facts.setdefault("gpu_count", Cited(tres["gres/gpu"], file, no))
            elif key in ("MinMemoryNode", "MinMemoryCPU") and value:
                facts.setdefault("memory_limit", Cited(memory_value(slurm_bytes(value), f"{key}={value}"), file, no))
    if job:
        close()
    return out, facts


# -- Kubernetes ---------------------------------------------------------------------------
_K_STATE = re.compile(r"^(?P<indent>\s*)(?P<which>State|Last State):\s+(?P<state>\w+)")
_K_FIELD = re.compile(r"^\s+(?P<key>Reason|Exit Code|Signal|Finished|Message):\s+(?P<value>.*?)\s*$")
_K_RESTARTS = re.compile(r"^\s+Restart Count:\s+(\d+)")
_K_PROBE = re.compile(r"failed (?P<probe>liveness|startup) probe, will be restarted")
_K_LIMIT = re.compile(r"^\s+(?P<key>cpu|memory):\s+(?P<value>\S+)\s*$")
_K_CONTAINER = re.compile(r"^  (?P<name>[\w.-]+):\s*$")


_K_SIGNS = (re.compile(r"^\s*(?:Last )?State:\s+(?:Terminated|Waiting|Running)\b"), _K_PROBE,
            re.compile(r"^\s*Reason:\s+(?:OOMKilled|Evicted)\b"), re.compile(r"^NAME\s+READY\s+STATUS\s+RESTARTS"))


def is_k8s_describe(lines: list[str]) -> bool:
    """``kubectl describe pod`` (or ``get pods``), whole or in part: a container state
    block, a probe kill among the events, an OOM or eviction reason, the pods table."""
    return any(rx.search(line) for line in lines[:2000] for rx in _K_SIGNS)


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

    columns: list[str] | None = None
    pods: list[str] = []  # the restart counts of a pods table
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if re.match(r"^NAME\s+READY\s+STATUS\s+RESTARTS", line):
            columns = line.split()
            continue
        if columns is not None:
            cells = line.split()
            if len(cells) >= len(columns) and cells[3].isdigit():
                pods.append(cells[3])
            if len(cells) >= len(columns) and cells[2] == "OOMKilled":  # kubectl get pods: STATUS OOMKilled
                out.append(Termination("kubernetes", "oom_killed", file, no, " ".join(cells)[:500], None,
                                       {"pod": cells[0], "restarts": cells[3]}))
                continue
            columns = None if not cells or len(cells) < 3 else columns
        if re.match(r"^Reason:\s+Evicted\b", line):
            msg = next((m.group(1) for m in map(re.compile(r"^Message:\s+(.*)").match, lines[no:no + 3]) if m), "")
            out.append(Termination("kubernetes", "evicted", file, no, f"Reason: Evicted; {msg}".strip("; ")[:500],
                                   None, {"message": msg.strip()} if msg else {}))
            continue
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
            facts.setdefault(*_k8s_limit(lim.group("key"), lim.group("value"), file, no))
            continue
        in_limits = in_limits and bool(lim)
        p = _K_PROBE.search(line)
        if p:
            out.append(Termination("kubernetes", "liveness_probe", file, no, stripped[:500], None,
                                   {"probe": p.group("probe")}))
    close()
    if len(pods) == 1:  # one pod in the table: its restarts are the records'
        for t in out:
            t.detail.setdefault("restarts", pods[0])
    return out, facts


def _k8s_limit(key: str, value: str, file: str, no: int) -> tuple[str, Cited]:
    """A container's ``cpu`` or ``memory`` limit as an allocation fact."""
    if key == "cpu":
        return "cpu_limit", Cited(cpu_value(k8s_bytes(value), value), file, no)
    return "memory_limit", Cited(memory_value(k8s_bytes(value), value), file, no)


def _terminated(file: str, state: dict[str, Any], container: str | None, restarts: str | None) -> Termination | None:
    reason = state.get("Reason", "")
    code = int(state["Exit Code"]) if str(state.get("Exit Code", "")).lstrip("-").isdigit() else None
    if reason == "OOMKilled":
        cause = "oom_killed"
    elif code == 137:  # 128 + SIGKILL: killed, by whom the record does not say
        cause = "sigkill"
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


#: a field of a pod's status as YAML (``exitCode: 137``), yq's output, or JSON (``"exitCode": 137,``)
_Y_FIELD = re.compile(r'^\s*(?:- )?"?(?P<key>exitCode|reason|restartCount|signal)"?\s*:\s*"?(?P<value>[^",\s]+)"?,?\s*$')
_Y_LIMIT = re.compile(r'^\s*"?(?P<key>cpu|memory)"?\s*:\s*["\']?(?P<value>[^"\',\s]+)')


def is_k8s_yaml(lines: list[str]) -> bool:
    """A pod's status as YAML or JSON, whole or in part (``kubectl get pod -o yaml``, a yq or
    grep of it): an ``exitCode`` field with a ``reason`` near it."""
    found = [(no, m.group("key")) for no, line in enumerate(lines[:4000]) if (m := _Y_FIELD.match(line))]
    codes = [no for no, k in found if k == "exitCode"]
    return any(k == "reason" and any(abs(no - c) <= 6 for c in codes) for no, k in found)


def read_k8s_yaml(file: str, lines: list[str]) -> tuple[list[Termination], dict[str, Cited]]:
    """Terminations of a pod's status: each ``terminated`` record's reason and exit code (the
    fields within a few lines of each other), with the restart count that follows; and the
    containers' CPU and memory limits."""
    out: list[Termination] = []
    facts: dict[str, Cited] = {}
    group: dict[str, tuple[str, int]] = {}
    in_limits: int | None = None

    def close() -> None:
        if "exitCode" in group or group.get("reason", ("",))[0] == "OOMKilled":
            at = group.get("reason", group.get("exitCode", ("", 0)))[1]
            text = ", ".join(f"{k}: {v}" for k, (v, _) in group.items() if k in ("reason", "exitCode"))
            t = _terminated(file, {"Reason": group.get("reason", ("",))[0],
                                   "Exit Code": group.get("exitCode", ("",))[0], "which": "terminated",
                                   "line": at, "text": text}, None, group.get("restartCount", (None,))[0])
            if t is not None:
                out.append(t)
        group.clear()

    last = 0
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        indent = len(line) - len(line.lstrip())
        m = _Y_FIELD.match(line)
        if m:
            key = m.group("key")
            if key == "restartCount":
                if out and "restarts" not in out[-1].detail and not group:
                    out[-1].detail["restarts"] = m.group("value")
                else:
                    group[key] = (m.group("value"), no)
                continue
            if (key in group or no - last > 6) and group:
                close()
            group[key] = (m.group("value"), no)
            last = no
            continue
        if line.strip().strip('"').rstrip(":").rstrip('"') == "limits" or line.strip() == '"limits": {':
            in_limits = indent
            continue
        if in_limits is not None:
            lim = _Y_LIMIT.match(line)
            if lim and indent > in_limits:
                facts.setdefault(*_k8s_limit(lim.group("key"), lim.group("value"), file, no))
                continue
            in_limits = None
    close()
    return out, facts


# -- Docker -------------------------------------------------------------------------------
#: ``docker inspect``'s state fields, as JSON (``"OOMKilled": true``) or Go's ``{{.State}}``
#: print (``OOMKilled:false``), whole or in part
_D_OOM = re.compile(r'"?OOMKilled"?\s*:\s*(true|false)')
_D_CODE = re.compile(r'"?ExitCode"?\s*:\s*(-?\d+)')
_D_CPUS = re.compile(r'"NanoCpus"\s*:\s*(\d+)')
_D_MEMORY = re.compile(r'"Memory"\s*:\s*(\d+)')


def is_docker_inspect(lines: list[str]) -> bool:
    text = "\n".join(lines[:4000])
    return bool(_D_OOM.search(text) and _D_CODE.search(text))


def read_docker_inspect(file: str, lines: list[str]) -> tuple[list[Termination], dict[str, Cited]]:
    """``docker inspect``: a container killed by the OOM killer, killed by SIGKILL (exit code
    137, no OOM kill recorded) or exited with a non-zero code; and the CPUs and memory its
    HostConfig gave it (``NanoCpus``, ``Memory``). Each container's ``OOMKilled`` goes with
    the ``ExitCode`` nearest to it."""
    out: list[Termination] = []
    facts: dict[str, Cited] = {}
    ooms = [(no, m.group(1) == "true") for no, line in enumerate(lines, 1) if (m := _D_OOM.search(line))]
    codes = [(no, int(m.group(1))) for no, line in enumerate(lines, 1) if (m := _D_CODE.search(line))]
    for no, killed in ooms:
        near = min(codes, key=lambda c: abs(c[0] - no)) if codes else None
        code = near[1] if near and abs(near[0] - no) <= 30 else None
        cause = "oom_killed" if killed else "sigkill" if code == 137 else "exited" if code else None
        if cause is not None:
            out.append(Termination("docker", cause, file, no if killed or near is None else near[0],
                                   f"OOMKilled: {str(killed).lower()}, ExitCode: {code}", code, {}))
    for rx, key in ((_D_CPUS, "cpu_limit"), (_D_MEMORY, "memory_limit")):
        for no, line in enumerate(lines, 1):
            m = rx.search(line)
            if m and int(m.group(1)) > 0:
                v = int(m.group(1))
                facts.setdefault(key, Cited(cpu_value(v / 1e9, f"NanoCpus: {v}") if key == "cpu_limit"
                                            else memory_value(v, f"Memory: {v}"), file, no))
                break
    return out, facts


