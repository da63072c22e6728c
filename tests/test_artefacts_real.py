"""Real artefacts from public threads (``fixtures/artefacts``): each read as its label says.

``SOURCES.tsv`` labels every file from its own text (``what_it_shows``): ``key=value`` facts
(``gpu=NVIDIA H100 80GB HBM3 x8; driver=570.133.20; topology=NVLink NV18``) and, for the
orchestrators' records, the cause in the record's words (``OOMKilled``, ``TIME LIMIT``,
``Liveness probe failed``). The test reads each file as a user's run directory would have
it, and checks every labelled fact and cause against what was read.
"""

from __future__ import annotations

import csv
import os
import re

import pytest

from logforensics.artefacts.sniff import read_artefacts, sniff

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "artefacts")
with open(os.path.join(HERE, "SOURCES.tsv"), encoding="utf-8") as _fh:
    ROWS = list(csv.DictReader(_fh, delimiter="\t"))

#: label keys -> the fact they name
FACT_KEYS = {"compute_capability": "compute_capability", "sglang": "sglang", "torch": "torch", "driver": "driver",
             "ulimit_soft": "ulimit_soft", "vllm": "vllm", "sgl-kernel": "sgl_kernel"}
#: the cause a label gives, in the record's own words -> the cause read
CAUSE_WORDS = (
    (re.compile(r"not OOMKilled|OOMKilled=false|reason=Error"), "sigkill"),
    (re.compile(r"OOMKilled|oom[-_]kill|OutOfMemoryError|Out Of Memory|Killed process|memory pressure|"
                r"OUT_OF_ME|\boom\b"), "oom_killed"),
    (re.compile(r"TIME LIMIT"), "time_limit"),
    (re.compile(r"Liveness probe failed"), "liveness_probe"),
    (re.compile(r"Evicted"), "evicted"),
    (re.compile(r"SYSTEM_ERROR"), "exited"),
)
ENV_KINDS = ("check_env", "nvidia-smi", "topo", "pip")
END_KINDS = ("slurm", "k8s-describe", "k8s-yaml", "docker-inspect", "docker-events", "ray", "dmesg")


def labelled(label: str) -> dict[str, str]:
    """``key=value`` pairs of a label, each value up to its ``;`` without a remark in brackets."""
    out = {}
    for part in label.split(";"):
        m = re.match(r"\s*([\w-]+)=(.*)", part)
        if m:
            out[m.group(1)] = re.sub(r"\s*\(.*$", "", m.group(2)).strip()
    return out


@pytest.mark.parametrize("row", [r for r in ROWS if r["kind"] in ENV_KINDS], ids=lambda r: r["file"])
def test_environment_facts_agree_with_the_label(row):
    path = os.path.join(HERE, row["file"])
    assert sniff(path) is not None, "not recognised"
    arts = read_artefacts([path])
    assert arts.environment is not None
    facts = {k: c.value for k, c in arts.environment.facts.items()}
    label = labelled(row["what_it_shows"])
    checked = 0
    for key, fact in FACT_KEYS.items():
        if key in label and re.match(r"[\w.+-]+$", label[key]) and label[key] not in ("Not", "Not Available"):
            assert facts.get(fact) == label[key], key
            checked += 1
    accelerator = label.get("gpu") or label.get("npu")  # Ascend's check_env says NPU
    if accelerator:
        name, _, count = accelerator.rpartition(" x")
        if not count.isdigit():
            name, count = accelerator, ""
        assert facts.get("gpu") == name
        if count and "partial" not in row["file"] and row["kind"] == "check_env":
            assert facts.get("gpu_count") == count
        checked += 1
    topo = label.get("topology", "")
    if topo.startswith(("NVLink NV", "NV18")):
        assert facts.get("topology") == "NVLink (NV18)"
    elif topo.startswith("PCIe only"):  # one GPU has no GPU-to-GPU link, its NICs' paths aside
        assert facts.get("topology", "").startswith("PCIe only") or facts.get("gpu_count") == "1"
    elif topo.startswith("XGMI"):
        assert facts.get("topology") == "XGMI"
    elif topo.startswith("single GPU"):
        assert facts.get("topology") == "one GPU"
    elif topo in ("SIO", "HCCS"):  # Ascend's links, named as the matrix names them
        assert facts.get("topology") == topo
    for pkg in ("torch", "sglang", "vllm", "transformers", "triton"):
        if row["kind"] == "pip" and f"{pkg}==" in row["what_it_shows"]:
            assert facts.get(pkg) == re.search(rf"{pkg}==([\w.+]+)", row["what_it_shows"]).group(1)
            checked += 1
    assert checked or topo or row["kind"] == "topo"


@pytest.mark.parametrize("row", [r for r in ROWS if r["kind"] in END_KINDS], ids=lambda r: r["file"])
def test_the_end_agrees_with_the_label(row):
    path = os.path.join(HERE, row["file"])
    arts = read_artefacts([path])
    assert not arts.unknown, arts.unknown
    label = row["what_it_shows"]
    wanted = next((cause for rx, cause in CAUSE_WORDS if rx.search(label)), None)
    assert wanted is not None, "a label this test cannot read"
    causes = {t.cause for t in arts.terminations}
    assert wanted in causes, (wanted, causes)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    for t in arts.terminations:  # every record cites a line of its file that holds what it says
        assert 1 <= t.line <= len(lines)
        if t.exit_code is not None:
            assert str(t.exit_code) in "\n".join(lines[max(0, t.line - 8):t.line + 8])
    codes = re.findall(r"exit_?[cC]ode=(\d+)", label.replace("exitCode", "exit_code"))
    if codes:
        assert int(codes[0]) in {t.exit_code for t in arts.terminations}
    restarts = re.search(r"restart(?:s|Count)=(\d+)", label)
    if restarts and int(restarts.group(1)):
        assert restarts.group(1) in {t.detail.get("restarts", "").split()[0] for t in arts.terminations
                                     if t.detail.get("restarts")}


REAL_LOGS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real")


@pytest.mark.parametrize("name", ["docker-inspect-engine-20.10-oomkilled-true-exit-137-memory-16m.json",
                                  "docker-inspect-engine-20.10-oomkilled-true-exit-3-child-killed-shell-survived.json",
                                  "docker-inspect-format-json-state-oomkilled-true-exit-137.txt",
                                  "dmesg-memory-cgroup-oom-killed-tail-docker-kernel-6.18.txt"])
def test_a_real_log_that_stops_beside_a_real_oom_kill_record_was_killed(tmp_path, name):
    """A real server log that stops during CUDA graph capture with no failure of its own, and beside
    it, under a name that says nothing, what the Docker engine or the kernel printed about a
    container its cgroup's OOM killer ended: the record is recognised by its text and is the verdict."""
    from logforensics.pipeline import summarize_run

    run = tmp_path / "run"
    run.mkdir()
    with open(os.path.join(REAL_LOGS, "001-tp1-capture-zero-avail-mem-gemma3.log"), "rb") as fh:
        (run / "server.log").write_bytes(fh.read())
    with open(os.path.join(HERE, name), "rb") as fh:
        (run / "state").write_bytes(fh.read())
    record = str(run / "state")
    assert sniff(record) == ("docker" if name.startswith("docker") else "records")
    alone = summarize_run(str(run / "server.log"))
    assert alone.outcome == "incomplete"
    s = summarize_run(str(run))
    assert s.outcome == "crashed"
    assert s.outcome_reason.startswith("killed by the out-of-memory killer (")
    assert s.crash is not None and s.crash.file == record and s.crash.phase == "cuda_graph_capture"
    with open(record, encoding="utf-8") as fh:
        cited = fh.read().splitlines()[s.crash.line - 1]
    assert ('"OOMKilled": true' in cited or '"OOMKilled":true' in cited) if name.startswith("docker") \
        else "Killed process 29357 (tail)" in cited


SNAPSHOTS = [r["file"] for r in ROWS if r["kind"] == "sglang-crash-snapshot"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_a_crash_snapshot_written_by_sglangs_own_writer_is_read_whole(tmp_path, name):
    """SGLang's writer puts the snapshot under ``<crash_dump_folder>/<host>/``: found there by
    its keys, the exception named by its own line (not the last of a multi-line CUDA message),
    every transfer counted, the last one and every scheduler counter taken as written, and the
    exception first among the figures a summary shows."""
    import json

    from logforensics.pipeline import summarize_run
    from logforensics.render.beside import beside_lines

    with open(os.path.join(HERE, name), encoding="utf-8") as fh:
        text = fh.read()
    data = json.loads(text)
    run = tmp_path / "run"
    (run / "dump" / data["hostname"]).mkdir(parents=True)
    snap = run / "dump" / data["hostname"] / f"crash_snapshot_2026-12-05_18-20-56_{data['pid']}.json"
    snap.write_text(text, encoding="utf-8")
    with open(os.path.join(REAL_LOGS, "001-tp1-capture-zero-avail-mem-gemma3.log"), "rb") as fh:
        (run / "server.log").write_bytes(fh.read())
    s = summarize_run(str(run))
    assert s.artefacts is not None
    [d] = s.artefacts.dumps
    assert d.kind == "crash_snapshot" and d.file == str(snap)
    assert list(d.figures)[:3] == ["reason", "traceback", "timestamp"]
    assert d.figures["reason"] == data["reason"] == "scheduler_exception"
    assert d.figures["traceback"] == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert d.figures["traceback"] != data["traceback"].strip().splitlines()[-1]
    assert d.figures["recent_host_pool_io"] == len(data["recent_host_pool_io"])
    for key, value in data["scheduler"].items():
        assert d.figures[key] == value
    if data["recent_host_pool_io"]:
        last = data["recent_host_pool_io"][-1]
        assert d.figures["last_host_pool_io"] == {k: v for k, v in last.items() if k != "indices"}
    else:
        assert "last_host_pool_io" not in d.figures and not data["scheduler"]
    [line] = [ln for ln in beside_lines(s.artefacts) if ln.text.startswith("crash snapshot:")]
    assert "traceback torch.AcceleratorError: CUDA error: an illegal memory access was encountered" in line.text
    assert f"recent_host_pool_io {len(data['recent_host_pool_io'])}" in line.text


ENGINE = "docker-inspect-engine-20.10-oomkilled-true-exit-137-memory-16m.json"
EVENTS = "docker-events-engine-20.10-create-start-oom-die-137.txt"


def _run_beside(tmp_path, *names: str) -> str:
    run = tmp_path / "run"
    run.mkdir()
    with open(os.path.join(REAL_LOGS, "001-tp1-capture-zero-avail-mem-gemma3.log"), "rb") as fh:
        (run / "server.log").write_bytes(fh.read())
    for i, name in enumerate(names):
        with open(os.path.join(HERE, name), "rb") as fh:
            (run / f"record-{i}").write_bytes(fh.read())
    return str(run)


def test_a_16_mib_container_limit_is_written_in_mib(tmp_path):
    """The real engine's ``"Memory": 16777216`` is 16 MiB, not ``0.02 GiB``: under 1 GiB a
    figure is written in MiB, by the one formatter."""
    from logforensics.pipeline import summarize_run
    from logforensics.render.beside import beside_lines

    s = summarize_run(_run_beside(tmp_path, ENGINE))
    assert s.artefacts is not None and s.artefacts.environment is not None
    texts = [ln.text for ln in beside_lines(s.artefacts)]
    assert "memory allocation: 16.00 MiB (Memory: 16777216)" in texts
    assert s.artefacts.environment.facts["memory_limit"].line == 79


@pytest.mark.parametrize("name", [ENGINE, "docker-inspect-format-json-state-oomkilled-true-exit-137.txt",
                                  "k8s-yaml-lastState-oomkilled-137-restartcount-1.txt"])
def test_the_exit_code_of_a_kill_is_said_once(tmp_path, name):
    """``OOMKilled: true, ExitCode: 137`` already says the code: the verdict and the line beside
    the log do not add ``, exit code 137`` after it."""
    from logforensics.pipeline import summarize_run
    from logforensics.render.beside import beside_lines

    s = summarize_run(_run_beside(tmp_path, name))
    assert s.outcome == "crashed" and s.artefacts is not None
    assert s.outcome_reason.count("137") == 1, s.outcome_reason
    [line] = [ln.text for ln in beside_lines(s.artefacts) if ln.level == "bad"]
    assert line.count("137") == 1, line


def test_the_k8s_describe_exit_code_not_in_the_record_text_is_still_said(tmp_path):
    from logforensics.pipeline import summarize_run

    s = summarize_run(_run_beside(tmp_path, "k8s-describe-last-state-oomkilled-137.txt"))
    assert ", exit code 137;" in s.outcome_reason


def test_docker_events_alone_give_the_exit_code_beside_the_oom_event(tmp_path):
    """The engine's ``die`` after the container's own ``oom`` event carries its exit code
    (``exitCode=137``): the end of that OOM kill, cited at its own line."""
    from logforensics.pipeline import summarize_run

    arts = read_artefacts([os.path.join(HERE, EVENTS)])
    assert [(t.source, t.cause, t.line, t.exit_code) for t in arts.terminations] == [
        ("docker", "oom_killed", 4, None), ("docker", "oom_killed", 5, 137)]
    die = arts.terminations[1]
    assert die.detail == {"container": "a9150e77fa32abcc3cab1849e4e4ad36ac9ae013035eb498eeb827b12ae99a6d",
                          "oom_event_line": "4"}
    s = summarize_run(_run_beside(tmp_path, EVENTS))
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 4
    assert 137 in {t.exit_code for t in s.artefacts.terminations}


def test_a_die_without_an_oom_event_is_judged_by_its_code():
    """The same real line with the other codes a container exits with: 0 is no failure, 137
    a SIGKILL by whom the record does not say, 1 an exit; and the API's JSON form."""
    from logforensics.artefacts import orchestrator as orch

    with open(os.path.join(HERE, EVENTS), encoding="utf-8") as fh:
        die = fh.read().splitlines()[4]
    assert " container die " in die
    ends = orch.line_records("ev.txt", [die.replace("exitCode=137", f"exitCode={c}") for c in (0, 137, 1)])
    assert [(t.cause, t.line, t.exit_code) for t in ends] == [("sigkill", 2, 137), ("exited", 3, 1)]
    cid = "a9150e77fa32abcc3cab1849e4e4ad36ac9ae013035eb498eeb827b12ae99a6d"
    api = ('{"status":"%s","id":"%s","from":"busybox-static:local","Type":"container","Action":"%s","Actor":'
           '{"ID":"%s","Attributes":{%s"image":"busybox-static:local","name":"oomtest"}},"scope":"local",'
           '"time":1796494665,"timeNano":1796494665828511700}')
    ends = orch.line_records("ev.json", [api % ("oom", cid, "oom", cid, ""),
                                         api % ("die", cid, "die", cid, '"exitCode":"137",')])
    assert [(t.cause, t.line, t.exit_code, t.detail.get("container")) for t in ends] == [
        ("oom_killed", 1, None, cid), ("oom_killed", 2, 137, cid)]


@pytest.mark.parametrize("name", [r["file"] for r in ROWS if r["kind"] == "docker-events"])
def test_docker_events_beside_a_log_in_a_run_directory_are_read_in_either_form(tmp_path, name):
    """The engine's text lines and the API's JSON stream (one event a line, not one JSON
    document: it was taken for a log of JSON lines and read as neither) end a log that stops."""
    from logforensics.pipeline import summarize_run

    s = summarize_run(_run_beside(tmp_path, name))
    assert s.outcome == "crashed" and s.crash is not None and s.crash.source == "docker"
    assert s.outcome_reason.startswith("killed by the out-of-memory killer (Docker: ")
    assert s.crash.file.endswith("record-0")


def test_rays_repeated_count_on_a_worker_death_is_kept_apart_from_its_detail():
    """``... SIGSEGV or another unexpected error. [repeated 4x across cluster]``: Ray's
    de-duplication count, not part of the exit detail, and said beside the log."""
    from logforensics.render.beside import beside_lines

    arts = read_artefacts([os.path.join(HERE, "ray-raylet-worker-died-lease-id-repeated-across-cluster.txt")])
    [t] = arts.terminations
    assert t.detail["repeated"] == "4"
    assert t.detail["exit_detail"].endswith("due to SIGSEGV or another unexpected error.")
    assert beside_lines(arts)[0].text.startswith("Ray: exited with a non-zero code, repeated 4x across the cluster: ")


def test_an_incident_answer_beside_the_log_shows_its_summed_figures_and_memory_in_gib():
    """``/v1/loads``: the figures summed over the ranks come first (a wall of per-rank records
    hid them), the ranks' records are counted (each in ``--json``), and SGLang's ``*_gb``
    figures (GiB) are written by the one formatter."""
    from logforensics.artefacts.incident import read_json_artefact
    from logforensics.artefacts.types import Artefacts
    from logforensics.render.beside import beside_lines

    arts = read_artefacts([os.path.join(HERE, "sglang-v1-loads-0.5.9-dp8-prefill-idle.json")])
    [line] = [ln.text for ln in beside_lines(arts)]
    assert "dp_rank_count 8, num_running_reqs 0, num_waiting_reqs 0," in line
    assert line.endswith("loads (8 records, in --json)") and "{'dp_rank'" not in line
    arts = read_artefacts([os.path.join(HERE, "sglang-v1-loads-0.5.10rc0-one-rank-running-4.json")])
    [line] = [ln.text for ln in beside_lines(arts)]
    assert "num_running_reqs 4," in line.split("loads {")[0]
    assert "memory {weight_gb 89.24 GiB, kv_cache_gb 31.22 GiB, graph_gb 1.32 GiB, token_capacity 545344}" in line
    small = read_json_artefact("SUMMARY_REPORT.json", {"artifact_type": "incident_bundle",
                                                       "capacity": {"max_total_num_tokens": 20480, "weight_gb": 0.98}})
    assert small is not None
    [line] = [ln.text for ln in beside_lines(Artefacts(dumps=(small,)))]
    assert "weight_gb 1003.52 MiB" in line


def test_server_info_memory_usage_is_gib_written_by_the_one_formatter():
    """``/server_info``'s ``memory_usage`` is SGLang's GB (GiB) with no unit in its keys: the
    real docs answer's ``kvcache 0.23`` is 235.52 MiB and ``weight -1.19`` is GiB; its
    ``token_capacity`` is a count of tokens and stays one. The JSON keeps SGLang's numbers."""
    from logforensics.render.beside import beside_lines

    arts = read_artefacts([os.path.join(HERE, "sglang-server-info-0.5.2rc1-qwen2.5-0.5b-docs-notebook.json")])
    [line] = [ln.text for ln in beside_lines(arts)]
    assert "memory_usage {weight -1.19 GiB, kvcache 235.52 MiB, token_capacity 20480, cuda_graph 71.68 MiB}" in line
    [dump] = arts.dumps
    assert dump.to_dict()["figures"]["internal_states"][0]["memory_usage"]["kvcache"] == 0.23
