"""The files beside a server log: recognised by content, read with file:line, put on the run.

The texts are written to the tools' own formats: ``sglang.check_env``'s ``Key: value`` lines
and topology block (``python/sglang/check_env.py``), ``nvidia-smi``'s table, Slurm's
``slurmstepd``/``srun`` messages, the kernel's OOM-killer line, ``kubectl describe pod``,
``kubectl get pod -o yaml`` and ``docker inspect``. Real pastes are checked against their
labels in ``test_artefacts_real.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from logforensics.artefacts import environment as env
from logforensics.artefacts import orchestrator as orch
from logforensics.artefacts.sniff import read_artefacts, sniff
from logforensics.ingest import InputError
from logforensics.ingest.runset import run_files
from logforensics.model.summary import RunSummary
from logforensics.pipeline import diagnose_runs, summarize_run

CHECK_ENV = """\
Python: 3.10.12 (main, Nov 20 2023, 15:14:05) [GCC 11.4.0]
CUDA available: True
GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3
GPU 0,1,2,3,4,5,6,7 Compute Capability: 9.0
CUDA_HOME: /usr/local/cuda
NVCC: Cuda compilation tools, release 12.4, V12.4.131
CUDA Driver Version: 550.54.15
PyTorch: 2.5.1+cu124
sglang: 0.4.1.post3
sgl_kernel: Package Not Found
flashinfer: 0.1.6+cu124torch2.4
NVIDIA Topology:\x20
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \t{l}\t{l}\t{l}\tPIX\t0-47,96-143\t0\t\tN/A
GPU1\t{l}\t X \t{l}\t{l}\tSYS\t0-47,96-143\t0\t\tN/A
GPU2\t{l}\t{l}\t X \t{l}\tSYS\t48-95,144-191\t1\t\tN/A
GPU3\t{l}\t{l}\t{l}\t X \tSYS\t48-95,144-191\t1\t\tN/A
NIC0\tPIX\tSYS\tSYS\tSYS\t X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks

ulimit soft: 1048576
"""

NVIDIA_SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA A10G                    On  |   00000000:00:1E.0 Off |                    0 |
|   1  NVIDIA A10G                    On  |   00000000:00:1F.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""

PIP = "\n".join(["aiohttp==3.9.5", "flashinfer-python==0.2.5", "numpy==1.26.4", "sglang==0.4.6.post1",
                 "torch==2.6.0", "transformers==4.51.1", "triton==3.2.0", "nvidia-nccl-cu12==2.21.5"]) + "\n"

DESCRIBE = """\
Name:             sglang-0
Namespace:        default
Containers:
  sglang:
    Image:          lmsysorg/sglang:latest
    State:          Running
      Started:      Mon, 01 Jan 2024 10:00:00 +0000
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
      Started:      Mon, 01 Jan 2024 09:00:00 +0000
      Finished:     Mon, 01 Jan 2024 09:50:00 +0000
    Ready:          True
    Restart Count:  3
    Limits:
      cpu:             2
      memory:          64Gi
      nvidia.com/gpu:  8
    Requests:
      cpu:             1
Events:
  Type     Reason     Age                From     Message
  ----     ------     ----               ----     -------
  Warning  Unhealthy  2m (x3 over 3m)    kubelet  Liveness probe failed: Get "http://10.0.0.1:30000/health": context deadline exceeded
  Normal   Killing    2m                 kubelet  Container sglang failed liveness probe, will be restarted
"""

POD_YAML = """\
apiVersion: v1
kind: Pod
spec:
  containers:
  - name: sglang
    resources:
      limits:
        cpu: "64"
        memory: 512Gi
status:
  containerStatuses:
  - name: sglang
    lastState:
      terminated:
        exitCode: 137
        finishedAt: "2025-01-01T00:00:00Z"
        reason: OOMKilled
    restartCount: 2
"""

DOCKER = [{"Id": "abc123", "Name": "/sglang", "State": {"Status": "exited", "Running": False, "OOMKilled": True,
                                                           "ExitCode": 137, "Error": "",
                                                           "FinishedAt": "2025-01-01T00:00:00Z"},
           "HostConfig": {"NanoCpus": 2000000000, "Memory": 68719476736}}]

SLURM = """\
srun: error: gpu-node-17: task 0: Exited with exit code 1
slurmstepd: error: *** JOB 4242 ON gpu-node-17 CANCELLED AT 2025-06-01T12:00:00 DUE TO TIME LIMIT ***
slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.
"""

STARTING = ("[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=1, mem_fraction_static=0.88)\n"
            "[2025-06-01 10:00:05] Load weight begin. avail mem=78.00 GB\n")
READY = STARTING + ("[2025-06-01 10:00:30] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                    "avail mem=62.00 GB, mem usage=16.00 GB.\n"
                    "[2025-06-01 10:00:40] The server is fired up and ready to roll!\n")


def write(path, text: str) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return str(path)


def lines(text: str) -> list[str]:
    return text.splitlines()


# -- the environment --------------------------------------------------------------------
def test_check_env_gives_versions_gpus_and_an_nvlink_topology_with_their_lines():
    facts = env.read_check_env("env.txt", lines(CHECK_ENV.format(l="NV18")))
    got = {k: (c.value, c.line) for k, c in facts.items()}
    assert got["sglang"] == ("0.4.1.post3", 9)
    assert got["torch"] == ("2.5.1+cu124", 8)
    assert got["cuda"] == ("12.4", 6)
    assert got["driver"] == ("550.54.15", 7)
    assert got["gpu"] == ("NVIDIA H100 80GB HBM3", 3) and got["gpu_count"] == ("8", 3)
    assert got["topology"] == ("NVLink (NV18)", 14)  # the NIC column (PIX, SYS) is not a GPU link
    assert got["ulimit_soft"] == ("1048576", 26)
    assert "sgl_kernel" not in facts  # "Package Not Found" is no version


def test_a_pcie_box_is_told_from_an_nvlink_one():
    facts = env.read_check_env("env.txt", lines(CHECK_ENV.format(l="SYS").replace("GPU0\t X \tSYS", "GPU0\t X \tPHB")))
    assert facts["topology"].value == "PCIe only (PHB, SYS)"


def test_nvidia_smi_and_pip_give_the_driver_gpus_and_packages():
    smi = env.read_nvidia_smi("smi.txt", lines(NVIDIA_SMI))
    assert (smi["driver"].value, smi["driver_cuda"].value, smi["gpu"].value, smi["gpu_count"].value) == \
        ("550.54.15", "12.4", "NVIDIA A10G", "2")
    pip = env.read_pip("freeze.txt", lines(PIP))
    assert {k: c.value for k, c in pip.items()} == {"flashinfer": "0.2.5", "sglang": "0.4.6.post1", "torch": "2.6.0",
                                                    "transformers": "4.51.1", "triton": "3.2.0", "nccl": "2.21.5"}
    assert pip["sglang"].line == 4


# -- what ended the run -----------------------------------------------------------------
def test_slurm_and_kernel_records_name_the_cause_with_their_lines():
    ends = orch.line_records("job.err", lines(SLURM + "[123.4] Out of memory: Killed process 4711 (python3) "
                                              "total-vm:100kB, anon-rss:90kB\n"))
    assert [(t.source, t.cause, t.line, t.exit_code) for t in ends] == [
        ("slurm", "exited", 1, 1), ("slurm", "time_limit", 2, None), ("slurm", "oom_killed", 3, None),
        ("kernel", "oom_killed", 4, None)]
    assert ends[1].detail == {"job": "4242", "host": "gpu-node-17", "time": "2025-06-01T12:00:00"}
    assert ends[3].detail == {"pid": "4711", "process": "python3"}


def test_ray_stopping_its_own_worker_is_no_failure():
    ends = orch.line_records("ray.txt", ["Worker exit type: INTENDED_USER_EXIT Worker exit detail: ray.kill",
                                         "Worker exit type: SYSTEM_ERROR Worker exit detail: The leased worker died"])
    assert [(t.cause, t.line, t.detail["exit_type"]) for t in ends] == [("exited", 2, "SYSTEM_ERROR")]


def test_kubectl_describe_gives_the_oom_kill_restarts_probe_kill_and_limits():
    ends, facts = orch.read_k8s_describe("pod.txt", lines(DESCRIBE))
    assert [(t.cause, t.line, t.exit_code) for t in ends] == [("oom_killed", 9, 137), ("liveness_probe", 25, None)]
    assert ends[0].detail == {"reason": "OOMKilled", "state": "Last State", "container": "sglang", "restarts": "3"}
    assert (facts["cpu_limit"].value, facts["cpu_limit"].line, facts["memory_limit"].value) == \
        ("2 cores (2)", 16, "64.00 GiB (64Gi)")


def test_a_container_that_completed_is_no_termination():
    text = DESCRIBE.replace("OOMKilled", "Completed").replace("Exit Code:    137", "Exit Code:    0")
    ends, _ = orch.read_k8s_describe("pod.txt", lines(text))
    assert [t.cause for t in ends] == ["liveness_probe"]


def test_pod_yaml_and_docker_inspect():
    ends, facts = orch.read_k8s_yaml("pod.yaml", lines(POD_YAML))
    assert [(t.cause, t.exit_code, t.line, t.detail.get("restarts")) for t in ends] == [("oom_killed", 137, 17, "2")]
    assert (facts["cpu_limit"].value, facts["memory_limit"].value) == ("64 cores (64)", "512.00 GiB (512Gi)")
    text = json.dumps(DOCKER, indent=4)
    ends, facts = orch.read_docker_inspect("inspect.json", lines(text))
    assert [(t.source, t.cause, t.exit_code) for t in ends] == [("docker", "oom_killed", 137)]
    assert lines(text)[ends[0].line - 1].strip().startswith('"OOMKilled": true')
    assert (facts["cpu_limit"].value, facts["memory_limit"].value) == ("2 cores (NanoCpus: 2000000000)", "64.00 GiB (Memory: 68719476736)")


# -- recognised by content, never by name --------------------------------------------------
@pytest.mark.parametrize(("text", "form"), [
    (CHECK_ENV.format(l="NV18"), "check_env"), (NVIDIA_SMI, "nvidia-smi"), (PIP, "pip"), (DESCRIBE, "kubernetes"),
    (POD_YAML, "kubernetes-yaml"), (SLURM, "records"), (json.dumps(DOCKER, indent=1), "docker"), (READY, None),
    ('{"rid": "a", "text": "x"}\n{"rid": "b", "text": "y"}\n', "json"),
])
def test_sniffed_by_content(tmp_path, text, form):
    assert sniff(write(tmp_path / "node0.log", text)) == form


def test_a_server_log_ending_in_slurm_records_stays_a_log(tmp_path):
    assert sniff(write(tmp_path / "x.txt", READY * 3 + SLURM)) is None


def test_a_job_output_with_a_traceback_and_slurms_oom_record_stays_a_log(tmp_path):
    """A batch job's output without SGLang's stamps (a diffusion worker's traceback, the batch
    step's stamped oom_kill record after it) is a log, not a file of records."""
    text = ("Process sglang-diffusionWorker-1:\n"
            "Traceback (most recent call last):\n"
            '  File "/x/sglang/multimodal_gen/runtime/managers/scheduler.py", line 299, in event_loop\n'
            "RuntimeError: Scheduler terminated after 3 consecutive errors.\n"
            "[2026-02-20T16:40:38.612] error: Detected 1 oom_kill event in StepId=1459995.batch. Some of the step "
            "tasks have been OOM Killed.\n")
    assert sniff(write(tmp_path / "job.out", text)) is None
    assert sniff(write(tmp_path / "job.err", text.split("\n", 4)[-1])) == "records"


def test_binary_and_unknown_files_are_reported_not_guessed(tmp_path):
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 64)
    notes = write(tmp_path / "notes.txt", "we restarted the node twice\n")
    arts = read_artefacts([str(tmp_path / "blob.bin"), notes])
    assert set(arts.unknown) == {str(tmp_path / "blob.bin"), notes}
    assert arts.environment is None and not arts.terminations


def test_a_run_directory_finds_artefacts_in_subfolders_and_keeps_json_lines_logs(tmp_path):
    log = write(tmp_path / "run" / "server.log", READY)
    requests = write(tmp_path / "run" / "requests.log", '{"rid": "a"}\n{"rid": "b"}\n')
    envf = write(tmp_path / "run" / "node0.log", CHECK_ENV.format(l="NV18"))  # a log's name, check_env's text
    pod = write(tmp_path / "run" / "k8s" / "host-1" / "describe.out", DESCRIBE)
    rf = run_files([str(tmp_path / "run")])
    assert sorted(rf.paths) == sorted([log, requests])
    assert sorted(rf.artefacts) == sorted([envf, pod])


def test_artefacts_given_alone_are_not_a_run(tmp_path):
    envf = write(tmp_path / "env.txt", CHECK_ENV.format(l="NV18"))
    with pytest.raises(InputError, match="an artefact \\(check_env\\), not a server log"):
        run_files([envf])


# -- on the run --------------------------------------------------------------------------
def test_a_log_that_stops_with_an_oom_kill_beside_it_was_killed(tmp_path):
    write(tmp_path / "run" / "server.log", STARTING)
    pod = write(tmp_path / "run" / "pod.txt", DESCRIBE)
    s = summarize_run(str(tmp_path / "run"))
    assert s.outcome == "crashed"
    assert s.outcome_reason.startswith("killed by the out-of-memory killer (Kubernetes")
    assert s.crash is not None and (s.crash.file, s.crash.line, s.crash.phase) == (pod, 9, "load_weights")
    alone = summarize_run(str(tmp_path / "run" / "server.log"))
    assert alone.outcome == "incomplete" and alone.artefacts is None


def test_a_ready_server_cancelled_at_the_time_limit_stopped(tmp_path):
    write(tmp_path / "run" / "server.log", READY)
    job = write(tmp_path / "run" / "slurm-4242.err", SLURM.splitlines()[1] + "\n")
    s = summarize_run(str(tmp_path / "run"))
    assert s.outcome == "ready" and s.stopped is not None and (s.stopped.file, s.stopped.line) == (job, 1)
    assert "cancelled at the job's time limit" in s.outcome_reason
    # the orchestrator's record names no rank: its evidence has none, and it reads back so
    assert [(e.file, e.line, e.rank) for e in s.stopped.evidence] == [(job, 1, None)]
    saved = json.dumps(s.to_dict())
    assert "rank" not in s.to_dict()["stopped"]["evidence"][0]
    assert json.dumps(RunSummary.from_dict(json.loads(saved)).to_dict()) == saved


def test_a_log_with_its_own_crash_keeps_it_and_shows_the_records(tmp_path):
    crash = READY + ("[2025-06-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                     '  File "/sgl/scheduler.py", line 1, in event_loop\n'
                     "RuntimeError: boom\n")
    write(tmp_path / "run" / "server.log", crash)
    write(tmp_path / "run" / "pod.txt", DESCRIBE)
    s = summarize_run(str(tmp_path / "run"))
    assert s.outcome == "crashed" and s.crash is not None and s.crash.exception == "RuntimeError"
    assert s.artefacts is not None and s.artefacts.terminations[0].cause == "oom_killed"


def test_the_summary_json_reads_back_with_its_artefacts(tmp_path):
    write(tmp_path / "run" / "server.log", STARTING)
    write(tmp_path / "run" / "env.txt", CHECK_ENV.format(l="NV18"))
    write(tmp_path / "run" / "pod.txt", DESCRIBE)
    s = summarize_run(str(tmp_path / "run"))
    data = json.loads(json.dumps(s.to_dict()))
    assert data["artefacts"]["environment"]["facts"]["driver"]["value"] == "550.54.15"
    assert RunSummary.from_dict(data).to_dict() == data


def test_diff_names_the_environment_first_when_only_it_differs(tmp_path):
    for side, link, driver in (("base", "NV18", "550.54.15"), ("fail", "SYS", "535.104.05")):
        write(tmp_path / side / "server.log", READY)
        write(tmp_path / side / "env.txt", CHECK_ENV.format(l=link).replace("550.54.15", driver))
    d = diagnose_runs(str(tmp_path / "fail"), str(tmp_path / "base"))
    assert d.verdict.startswith("baseline ready, failing ready: the environment differs (driver 550.54.15 -> "
                                "535.104.05, GPU topology NVLink (NV18) -> PCIe only (SYS))")
    check = d.conclusion.ruled_out[0]
    assert (check.what, check.status) == ("environment", "differs")
    delta = d.facts.environment.differs[0]
    assert [(e.file, e.line) for e in delta.evidence] == [(str(tmp_path / "fail" / "env.txt"), 7),
                                                          (str(tmp_path / "base" / "env.txt"), 7)]
    # check_env beside both logs shows the GPU and the SGLang version: it is not asked for again
    assert not any("check_env" in c for c in d.conclusion.collect), d.conclusion.collect
    alone = diagnose_runs(write(tmp_path / "f.log", READY), write(tmp_path / "b.log", READY))
    assert any("check_env" in c for c in alone.conclusion.collect)


def test_diff_of_equal_environments_says_so(tmp_path):
    for side in ("base", "fail"):
        write(tmp_path / side / "server.log", READY)
        write(tmp_path / side / "env.txt", CHECK_ENV.format(l="NV18"))
    d = diagnose_runs(str(tmp_path / "fail"), str(tmp_path / "base"))
    check = d.conclusion.ruled_out[0]
    assert (check.what, check.status) == ("environment", "equal") and "GPU topology" in check.detail
    assert "environment" not in d.verdict


def test_summary_command_shows_what_is_beside_the_log(tmp_path):
    write(tmp_path / "run" / "server.log", STARTING)
    write(tmp_path / "run" / "env.txt", CHECK_ENV.format(l="NV18"))
    write(tmp_path / "run" / "pod.txt", DESCRIBE)
    write(tmp_path / "run" / "notes.txt", "nothing\n")
    out = subprocess.run([sys.executable, "-m", "logforensics", "summary", str(tmp_path / "run")],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "Beside the logs" in out.stdout
    assert "GPU topology: NVLink (NV18)" in out.stdout
    assert "Kubernetes: killed by the out-of-memory killer, exit code 137, 3 restarts" in out.stdout
    assert "Traceback" not in out.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logforensics", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


def test_env_and_artifacts_flags_give_each_side_its_files(tmp_path):
    base = write(tmp_path / "b.log", READY)
    fail = write(tmp_path / "f.log", READY)
    benv = write(tmp_path / "b-env.txt", CHECK_ENV.format(l="NV18"))
    fenv = write(tmp_path / "f-env.txt", CHECK_ENV.format(l="SYS"))
    pod = write(tmp_path / "k8s" / "pod.txt", DESCRIBE)
    out = run_cli("diff", base, fail, "--baseline-env", benv, "--env", fenv, "--artifacts", str(tmp_path / "k8s"),
                  "--json", "-")
    d = json.loads(out.stdout)
    assert "the environment differs (GPU topology NVLink (NV18) -> PCIe only (SYS))" in d["verdict"]
    assert d["failing"]["artefacts"]["terminations"][0]["file"] == pod
    assert d["baseline"]["artefacts"]["terminations"] == []
    bad = run_cli("summary", fail, "--artifacts", str(tmp_path / "missing.txt"))
    assert bad.returncode == 2 and bad.stderr.strip().endswith("missing.txt: no such file")


def test_the_html_report_and_the_bundle_show_what_is_beside_the_logs(tmp_path):
    write(tmp_path / "run" / "server.log", STARTING)
    write(tmp_path / "run" / "env.txt", CHECK_ENV.format(l="NV18").replace("gpu-node-17", "x"))
    write(tmp_path / "run" / "slurm.err", SLURM)
    report = str(tmp_path / "r.html")
    out = run_cli("diff", str(tmp_path / "run"), str(tmp_path / "run"), "-o", report, "--fail-on", "never")
    assert out.returncode == 0, out.stderr
    html = open(report, encoding="utf-8").read()
    assert "Beside the logs" in html and "GPU topology: NVLink (NV18)" in html
    assert "Slurm: killed by the out-of-memory killer" in html
    md = run_cli("bundle", str(tmp_path / "run")).stdout
    assert "### run: beside the logs" in md and "- driver: 550.54.15 (`env.txt:7`)" in md
    assert "gpu-node-17" not in md  # the Slurm host is redacted with the rest


def test_a_large_binary_beside_the_log_costs_one_small_read(tmp_path):
    write(tmp_path / "run" / "server.log", READY)
    big = tmp_path / "run" / "core.12345"
    with open(big, "wb") as fh:
        fh.seek(256 << 20)
        fh.write(b"\0")
    opened: list[int] = []
    import builtins

    real = builtins.open

    def counting(file, mode="r", *a, **k):  # the reads of the big file: their sizes
        fh = real(file, mode, *a, **k)
        if str(file) == str(big):
            read = fh.read
            fh.read = lambda n=-1: opened.append(n) or read(n)  # type: ignore[method-assign]
        return fh

    builtins.open = counting
    try:
        s = summarize_run(str(tmp_path / "run"))
    finally:
        builtins.open = real
    assert s.outcome == "ready" and s.artefacts is None
    assert opened and all(0 < n <= 64 << 10 for n in opened)


@pytest.mark.parametrize("pure", ["0", "1"])
def test_slurm_records_in_the_job_output_itself_end_the_run(tmp_path, pure):
    """Slurm writes its records into the job's output: read from the log, on both paths."""
    killed = write(tmp_path / "job-4242.out", STARTING + SLURM.splitlines()[2] + "\n")
    cut = write(tmp_path / "job-4243.out", READY + SLURM.splitlines()[1] + "\n")
    out = run_cli("summary", killed, "--json") if pure == "0" else subprocess.run(
        [sys.executable, "-m", "logforensics", "summary", killed, "--json"], capture_output=True, text=True,
        env={**os.environ, "LOGFORENSICS_PURE": "1"})
    s = json.loads(out.stdout)
    assert s["outcome"] == "crashed" and (s["crash"]["file"], s["crash"]["line"], s["crash"]["source"]) == \
        (killed, 3, "slurm")
    assert s["outcome_reason"].startswith("killed by the out-of-memory killer (Slurm: slurmstepd: error: Detected 1")
    s = summarize_run(cut)
    assert s.outcome == "ready" and s.stopped is not None and s.stopped.line == 5
    rows = [json.loads(x) for x in run_cli("parse", killed, "--format", "jsonl", "--kind", "job_end").stdout.split("\n")
            if x]
    assert [(r["source"], r["cause"], r["job"]) for r in rows] == [("slurm", "oom_killed", "4242.0")]


def test_the_fleet_store_has_an_environments_table(tmp_path):
    for name, link, driver, end in (("run-a", "NV18", "550.54.15", DESCRIBE), ("run-b", "SYS", "535.104.05", "")):
        write(tmp_path / "fleet" / name / "server.log", READY if not end else STARTING)
        write(tmp_path / "fleet" / name / "env.txt", CHECK_ENV.format(l=link).replace("550.54.15", driver))
        if end:
            write(tmp_path / "fleet" / name / "pod.txt", end)
    store = str(tmp_path / "store")
    out = run_cli("scan", str(tmp_path / "fleet"), "--store", store, "--group-by", "dir")
    assert out.returncode == 0, out.stderr
    q = run_cli("query", "--store", store, "--format", "json",
                "SELECT r.source, r.outcome, e.driver, e.topology, e.gpu_count, e.end_cause, e.provenance "
                "FROM runs r JOIN environments e USING (run_id) ORDER BY r.source")
    assert q.returncode == 0, q.stderr
    rows = json.loads(q.stdout)
    a, b = (str(tmp_path / "fleet" / n) for n in ("run-a", "run-b"))
    assert [(r["source"], r["outcome"], r["driver"], r["topology"], r["gpu_count"], r["end_cause"]) for r in rows] == [
        (a, "crashed", "550.54.15", "NVLink (NV18)", 8, "oom_killed"), (b, "ready", "535.104.05", "PCIe only (SYS)", 8,
                                                                          None)]
    assert json.loads(rows[0]["provenance"])["driver"] == os.path.join(a, "env.txt") + ":7"


def test_a_rescan_rereads_a_run_whose_artefact_alone_changed(tmp_path):
    """The files beside a run are part of it: a changed, added or removed artefact is read
    again on the next scan, and the environments table then holds the new facts."""
    run = tmp_path / "fleet" / "run-a"
    write(run / "server.log", READY)
    env_file = write(run / "env.txt", CHECK_ENV.format(l="NV18"))
    store = str(tmp_path / "store")

    def scan() -> str:
        out = run_cli("scan", str(tmp_path / "fleet"), "--store", store, "--group-by", "dir")
        assert out.returncode == 0, out.stderr
        return out.stdout

    def driver() -> list:
        q = run_cli("query", "--store", store, "--format", "json", "SELECT driver, end_cause FROM environments")
        return [(r["driver"], r["end_cause"]) for r in json.loads(q.stdout)]

    assert "parsed 1," in scan() and driver() == [("550.54.15", None)]
    assert "parsed 0, skipped 1 unchanged (1 files)" in scan()
    with open(env_file, "w", encoding="utf-8") as f:  # the log is untouched
        f.write(CHECK_ENV.format(l="NV18").replace("550.54.15", "535.104.05"))
    assert "parsed 1," in scan() and driver() == [("535.104.05", None)]
    write(run / "pod.txt", DESCRIBE)  # an artefact added
    assert "parsed 1," in scan() and driver() == [("535.104.05", "oom_killed")]
    os.remove(run / "pod.txt")  # and removed
    assert "parsed 1," in scan() and driver() == [("535.104.05", None)]


def test_a_scan_finds_a_runs_crash_dump_in_the_dump_folders_layout_as_summary_does(tmp_path):
    """``<run>/crash-dumps/<host>/crash_dump_<ts>.pkl``: a subfolder with no log is part of the
    run above it (as ``summary DIR`` reads it); a subfolder with logs is a run of its own."""
    import pickle

    run = tmp_path / "fleet" / "run-a"
    write(run / "server.log", STARTING)
    dump = run / "crash-dumps" / "gpu-node-17" / "crash_dump_2025-06-01_10-01-00.pkl"
    dump.parent.mkdir(parents=True)
    dump.write_bytes(pickle.dumps({"server_args": _Args(), "launch_command": "python3 -m sglang.launch_server",
                                   "requests": [({"text": "hi"}, {}, 1748772000.0, 1748772001.5)]}, protocol=4))
    write(run / "node-b" / "server.log", READY)  # a run of its own, with its own pod record
    write(run / "node-b" / "pod.txt", DESCRIBE)
    store = str(tmp_path / "store")
    out = run_cli("scan", str(tmp_path / "fleet"), "--store", store, "--group-by", "dir")
    assert out.returncode == 0, out.stderr
    q = run_cli("query", "--store", store, "--format", "json",
                "SELECT r.source, json_extract_string(s.summary, '$.artefacts.dumps[0].replay') AS replay, "
                "e.end_cause FROM runs r JOIN summaries s USING (run_id) LEFT JOIN environments e USING (run_id) "
                "ORDER BY r.source")
    assert q.returncode == 0, q.stderr
    rows = [(r["source"], r["replay"], r["end_cause"]) for r in json.loads(q.stdout)]
    assert rows == [(str(run), "python3 scripts/playground/replay_request_dump.py --input-file "
                     f"{dump} --host 127.0.0.1 --port 30000", None),
                    (str(run / "node-b"), None, "oom_killed")]


class _Args:  # SGLang's ServerArgs as a crash dump pickles it: an object whose state is a dict
    def __init__(self) -> None:
        self.model_path, self.tp_size, self.host, self.port = "/models/m", 1, "127.0.0.1", 30000


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crash_dump_under_the_run_directory_is_summarised_with_its_replay_command(tmp_path):
    import pickle

    write(tmp_path / "run" / "server.log", STARTING)
    dump = tmp_path / "run" / "crash-dumps" / "gpu-node-17" / "crash_dump_2025-06-01_10-01-00.pkl"
    dump.parent.mkdir(parents=True)
    dump.write_bytes(pickle.dumps({"server_args": _Args(), "launch_command": "python3 -m sglang.launch_server",
                                   "requests": [({"text": "hi"}, {"meta_info": {"finish_reason": {"type": "stop"}}},
                                                 1748772000.0, 1748772001.5),
                                                ({"text": "yo"}, {}, 1748772001.0, 1748772004.0)]}, protocol=4))
    marker = tmp_path / "pwned"
    (tmp_path / "run" / "evil.pkl").write_bytes(pickle.dumps(_Evil(str(marker)), protocol=4))
    out = run_cli("summary", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    assert not marker.exists()  # never unpickled
    assert "crash dump: requests 2, unfinished 1" in out.stdout
    assert "replay: python3 scripts/playground/replay_request_dump.py --input-file" in out.stdout
    s = json.loads(run_cli("summary", str(tmp_path / "run"), "--json").stdout)
    dumps = {d["file"]: d for d in s["artefacts"]["dumps"]}
    assert dumps[str(dump)]["replay"] == \
        f"python3 scripts/playground/replay_request_dump.py --input-file {dump} --host 127.0.0.1 --port 30000"
    assert dumps[str(dump)]["launch_command"] == "python3 -m sglang.launch_server"
    assert dumps[str(dump)]["server_args"]["model_path"] == "/models/m"
    assert "posix.system" in json.dumps(dumps[str(tmp_path / "run" / "evil.pkl")])


def test_health_answering_while_health_generate_fails_is_success_without_work(tmp_path):
    """The incident bundle's endpoint records ({ok, status, path, json|text|error}, as its
    collect-bundle writes them): /health 200, /health_generate 503 fails the check."""
    write(tmp_path / "run" / "server.log", READY)
    write(tmp_path / "run" / "bundle" / "health.json",
          json.dumps({"ok": True, "status": 200, "path": "/health", "text": ""}))
    gen = write(tmp_path / "run" / "bundle" / "health_generate.json",
                json.dumps({"ok": False, "status": 503, "path": "/health_generate", "error": "HTTP Error 503"}))
    out = run_cli("diff", str(tmp_path / "run"), str(tmp_path / "run"), "--json", "-")
    assert out.returncode == 1, out.stderr
    d = json.loads(out.stdout)
    val = [f for f in d["findings"] if f["rule"] == "VAL01"]
    assert val and "/health answers while /health_generate fails (503)" in val[0]["title"]
    assert val[0]["evidence"][0]["file"] == gen
    os.unlink(gen)
    write(gen, json.dumps({"ok": True, "status": 200, "path": "/health_generate", "text": ""}))
    d = json.loads(run_cli("diff", str(tmp_path / "run"), str(tmp_path / "run"), "--json", "-").stdout)
    assert not [f for f in d["findings"] if f["rule"] == "VAL01"]


SCONTROL = """\
JobId=4242 JobName=sglang-serve
   UserId=u(1000) GroupId=g(1000) MCS_label=N/A
   JobState={state} Reason={reason} Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={code}
   RunTime=01:00:03 TimeLimit=01:00:00 TimeMin=N/A
   NodeList=gpu-node-17
   NumNodes=1 NumCPUs={cpus} NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   TRES=cpu={cpus},mem=64G,node=1,billing={cpus},gres/gpu=8
"""


def test_scontrol_gives_the_end_and_the_allocation(tmp_path):
    path = write(tmp_path / "job.txt", SCONTROL.format(state="TIMEOUT", reason="TimeLimit", code="0:15", cpus=2))
    assert sniff(path) == "slurm-job"
    arts = read_artefacts([path])
    assert [(t.cause, t.line, t.detail["reason"]) for t in arts.terminations] == [("time_limit", 3, "TimeLimit")]
    facts = {k: (c.value, c.line) for k, c in arts.environment.facts.items()}
    assert facts == {"cpu_limit": ("2 cores (NumCPUs=2)", 7), "memory_limit": ("64.00 GiB (mem=64G)", 8), "gpu_count": ("8", 8)}
    done = write(tmp_path / "ok.txt", SCONTROL.format(state="COMPLETED", reason="None", code="0:0", cpus=64))
    assert read_artefacts([done]).terminations == ()


def test_a_job_given_2_cpus_instead_of_64_is_what_differs(tmp_path):
    for side, cpus in (("base", 64), ("fail", 2)):
        write(tmp_path / side / "server.log", READY)
        write(tmp_path / side / "job.txt", SCONTROL.format(state="RUNNING", reason="None", code="0:0", cpus=cpus))
    d = diagnose_runs(str(tmp_path / "fail"), str(tmp_path / "base"))
    assert "the environment differs (CPU allocation 64 cores (NumCPUs=64) -> 2 cores (NumCPUs=2))" in d.verdict


@pytest.mark.parametrize(("reader", "text", "written"), [
    (orch.read_k8s_describe, DESCRIBE.replace("64Gi", "512Mi"), "512.00 MiB (512Mi)"),
    (orch.read_k8s_describe, DESCRIBE.replace("64Gi", "64G"), "59.60 GiB (64G)"),  # Kubernetes' G is 10^9
    (orch.read_k8s_describe, DESCRIBE.replace("64Gi", "129e6"), "123.02 MiB (129e6)"),
    (orch.read_k8s_yaml, POD_YAML.replace("512Gi", "768Mi"), "768.00 MiB (768Mi)"),
    (orch.read_scontrol, SCONTROL.format(state="RUNNING", reason="None", code="0:0", cpus=2).replace("64G", "512M"),
     "512.00 MiB (mem=512M)"),  # Slurm's M and G are powers of 1024
    (orch.read_scontrol, SCONTROL.format(state="RUNNING", reason="None", code="0:0", cpus=2).replace("64G", "4000"),
     "3.91 GiB (mem=4000)"),  # a bare Slurm figure is MiB
    (orch.read_k8s_describe, DESCRIBE.replace("64Gi", "lots"), "lots"),  # no quantity: its own text, not guessed
])
def test_a_memory_allocation_is_written_by_the_one_formatter_with_the_orchestrators_own_text(reader, text, written):
    _, facts = reader("x.txt", lines(text))
    assert facts["memory_limit"].value == written


def test_an_allocation_under_1_gib_reads_in_mib_in_the_diff_the_report_and_the_bundle(tmp_path):
    """A container given 16 MiB against a pod given 64 GiB: every output writes the small one
    in MiB (``0.02 GiB`` said nothing), and 64Gi against 65536Mi is one allocation."""
    small = json.dumps([{**DOCKER[0], "HostConfig": {"NanoCpus": 2000000000, "Memory": 16 * 2**20}}], indent=4)
    write(tmp_path / "base" / "server.log", READY)
    write(tmp_path / "base" / "pod.txt", DESCRIBE)
    write(tmp_path / "fail" / "server.log", READY)
    write(tmp_path / "fail" / "inspect.json", small)
    d = diagnose_runs(str(tmp_path / "fail"), str(tmp_path / "base"))
    assert "memory allocation 64.00 GiB (64Gi) -> 16.00 MiB (Memory: 16777216)" in d.verdict
    report = str(tmp_path / "r.html")
    out = run_cli("diff", str(tmp_path / "base"), str(tmp_path / "fail"), "-o", report, "--fail-on", "never")
    assert out.returncode == 0, out.stderr
    md = run_cli("bundle", str(tmp_path / "fail")).stdout
    summary = run_cli("summary", str(tmp_path / "fail")).stdout
    for text in (out.stdout, open(report, encoding="utf-8").read(), md, summary):
        assert "memory allocation: 16.00 MiB (Memory: 16777216)" in text or \
            "memory allocation 64.00 GiB (64Gi) -&gt; 16.00 MiB" in text or "-> 16.00 MiB" in text
        assert "0.02 GiB" not in text
    write(tmp_path / "same" / "server.log", READY)
    write(tmp_path / "same" / "pod.txt", DESCRIBE.replace("64Gi", "65536Mi"))
    same = diagnose_runs(str(tmp_path / "same"), str(tmp_path / "base"))
    assert "memory allocation" not in same.verdict


def test_slurm_variables_the_log_exports_are_the_allocation(tmp_path):
    for side, cpus in (("base", 64), ("fail", 2)):
        write(tmp_path / side / "server.log", f"export SLURM_CPUS_ON_NODE={cpus}\n" + READY)
    d = diagnose_runs(str(tmp_path / "fail" / "server.log"), str(tmp_path / "base" / "server.log"))
    assert "the environment differs (CPU allocation 64 cores (SLURM_CPUS_ON_NODE=64) -> 2 cores (SLURM_CPUS_ON_NODE=2))" in d.verdict


def test_a_server_log_with_check_env_pasted_on_top_stays_a_log(tmp_path):
    log = write(tmp_path / "report.txt", CHECK_ENV.format(l="NV18") + READY)
    assert sniff(log) is None
    assert run_files([log]).paths == [log]


def test_a_log_that_just_stops_asks_for_the_record_of_its_end_unless_one_is_beside_it(tmp_path):
    base = write(tmp_path / "b.log", READY)
    d = diagnose_runs(write(tmp_path / "stops" / "server.log", STARTING), base)
    assert d.failing.outcome == "incomplete"
    assert any("kubectl describe pod, docker inspect" in c for c in d.conclusion.collect), d.conclusion.collect
    write(tmp_path / "cancelled" / "server.log", STARTING)
    write(tmp_path / "cancelled" / "slurm.err", SLURM.splitlines()[1] + "\n")  # the time limit: still incomplete
    d = diagnose_runs(str(tmp_path / "cancelled"), base)
    assert d.failing.outcome == "incomplete" and d.failing.artefacts.terminations
    assert not any("kubectl describe pod" in c for c in d.conclusion.collect), d.conclusion.collect


def test_a_crash_dumps_request_times_are_written_as_utc_stamps_beside_the_log(tmp_path):
    """``first_start``/``last_end`` are the dump host's ``time.time()`` (UTC): summary, the
    HTML report of a diff and the bundle write them as stamps saying their clock; the JSON keeps
    the numbers (saved summaries read back)."""
    import pickle

    write(tmp_path / "run" / "server.log", STARTING)
    dump = tmp_path / "run" / "gpu-node-17" / "crash_dump_2025-06-01_10-01-00.pkl"
    dump.parent.mkdir(parents=True)
    dump.write_bytes(pickle.dumps({"server_args": _Args(), "requests": [
        ({"text": "hi"}, {"meta_info": {"finish_reason": {"type": "stop"}}}, 1748772000.0, 1748772001.5),
        ({"text": "yo"}, {}, 1748772001.0, 1748772004.25)]}, protocol=4))
    run = str(tmp_path / "run")
    said = "first_start 2025-06-01 10:00:00 UTC, last_end 2025-06-01 10:00:04.250 UTC"
    assert said in run_cli("summary", run).stdout.replace("\n", " ").replace("│", "")
    report = str(tmp_path / "r.html")
    assert run_cli("diff", run, run, "-o", report, "--fail-on", "never").returncode == 0
    assert said in open(report, encoding="utf-8").read()
    assert said in run_cli("bundle", run).stdout
    figures = json.loads(run_cli("summary", run, "--json").stdout)["artefacts"]["dumps"][0]["figures"]
    assert (figures["first_start"], figures["last_end"]) == (1748772000.0, 1748772004.25)


def test_summary_of_a_log_that_just_stops_asks_for_the_record_of_its_end_as_diff_does(tmp_path):
    from logforensics.model.beside import END_RECORD

    log = write(tmp_path / "stops" / "server.log", STARTING)
    said = " ".join(run_cli("summary", log).stdout.split())
    assert f"To tell why it stops, collect {END_RECORD}" in said
    d = diagnose_runs(log, write(tmp_path / "b.log", READY))
    assert END_RECORD in d.conclusion.collect  # one wording for both
    write(tmp_path / "stops" / "slurm.err", SLURM.splitlines()[1] + "\n")  # the time limit: still incomplete
    assert "kubectl describe pod" not in run_cli("summary", str(tmp_path / "stops")).stdout
    assert "kubectl describe pod" not in run_cli("summary", write(tmp_path / "r.log", READY)).stdout


@pytest.mark.parametrize(("text", "written"), [("2000m", "2 cores (2000m)"), ("500m", "0.5 cores (500m)"),
                                               ("1", "1 core (1)"), ("lots", "lots")])
def test_a_cpu_allocation_is_written_in_cores_with_the_orchestrators_own_text(text, written):
    _, facts = orch.read_k8s_describe("x.txt", lines(DESCRIBE.replace("cpu:             2\n", f"cpu:             {text}\n")))
    assert facts["cpu_limit"].value == written


def test_a_pods_2000m_and_a_containers_two_nanocpus_are_one_cpu_allocation(tmp_path):
    """Kubernetes' ``2000m`` and Docker's ``NanoCpus: 2000000000`` are both 2 cores: compared as
    quantities, as memory is, they are equal; 2000m against 4 cores differs, in cores."""
    docker = json.dumps([{**DOCKER[0], "HostConfig": {"NanoCpus": 2000000000, "Memory": 64 * 2**30}}], indent=4)
    write(tmp_path / "base" / "server.log", READY)
    write(tmp_path / "base" / "pod.txt", DESCRIBE.replace("cpu:             2\n", "cpu:             2000m\n"))
    write(tmp_path / "fail" / "server.log", READY)
    write(tmp_path / "fail" / "inspect.json", docker)
    d = diagnose_runs(str(tmp_path / "fail"), str(tmp_path / "base"))
    assert "CPU allocation" not in d.verdict
    assert "CPU allocation" in d.facts.environment.same
    write(tmp_path / "four" / "server.log", READY)
    write(tmp_path / "four" / "inspect.json", docker.replace("2000000000", "4000000000"))
    d = diagnose_runs(str(tmp_path / "four"), str(tmp_path / "base"))
    assert "CPU allocation 2 cores (2000m) -> 4 cores (NanoCpus: 4000000000)" in d.verdict


def test_a_cpu_allocation_saved_before_the_cores_were_written_compares_as_cores():
    from logforensics.diagnose.environment import same_value

    assert same_value("cpu_limit", "2000m", "2 cores (NanoCpus: 2000000000)")
    assert same_value("cpu_limit", "64 (SLURM_CPUS_ON_NODE)", "64 cores (NumCPUs=64)")
    assert not same_value("cpu_limit", "2", "64 cores (NumCPUs=64)")


def test_request_times_no_date_has_are_written_as_the_numbers_they_are():
    from logforensics.artefacts.types import Artefacts, Dump
    from logforensics.render.beside import beside_lines

    dump = Dump("crash_dump", "d.pkl", {"first_start": 1e300, "last_end": float("nan"), "span_s": 1.0})
    [line] = [ln.text for ln in beside_lines(Artefacts(dumps=(dump,)))]
    assert line.startswith("crash dump: first_start 1000000000") and ", last_end nan, span_s 1" in line
    assert "UTC" not in line  # a crafted dump's figure is no time: shown as the number, no traceback
