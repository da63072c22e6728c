"""Redaction against a corpus of secret formats, in every output that leaves the machine:
``bundle`` (Markdown), and ``--redact`` on ``diff``'s HTML and JSON and ``summary --json``.

The corpus (``tests/data/redaction_corpus.tsv``) holds each secret in the log line SGLang,
NCCL, c10d or a launcher would print it in; its ``keep`` rows are what must survive. The
outputs are checked against their unredacted twins: a secret that the unredacted output
shows must be gone from the redacted one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logforensics.render.redact import Redactor

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "data" / "redaction_corpus.tsv"


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for raw in CORPUS.read_text(encoding="utf-8").splitlines():
        if not raw or raw.startswith("#"):
            continue
        kind, secret, line = raw.split("\t")
        rows.append((kind, secret, line.encode("ascii").decode("unicode_escape")))
    return rows


ROWS = _rows()
SECRETS = [r for r in ROWS if r[0] != "keep"]
KEEP = [r for r in ROWS if r[0] == "keep"]


def _redact(line: str, keep_prompts: bool = False) -> tuple[str, Redactor]:
    r = Redactor(keep_prompts)
    r.learn(line)
    return r.text(line), r


@pytest.mark.parametrize(("kind", "secret", "line"), SECRETS, ids=[f"{k}:{s[:24]}" for k, s, _ in SECRETS])
def test_each_secret_of_the_corpus_is_replaced_by_its_kind(kind: str, secret: str, line: str) -> None:
    assert secret in line
    out, r = _redact(line)
    assert secret not in out, out
    label = kind.removeprefix("prompt:")
    assert r.counts(out)[label] >= 1, (label, out)


@pytest.mark.parametrize(("kind", "keep", "line"), KEEP, ids=[k for _, k, _ in KEEP])
def test_what_is_not_private_survives(kind: str, keep: str, line: str) -> None:
    out, _ = _redact(line)
    assert keep in out, out


def test_prompts_are_kept_only_with_keep_prompts() -> None:
    prompts = [r for r in SECRETS if r[0].startswith("prompt:")]
    assert prompts
    for _, secret, line in prompts:
        out, _ = _redact(line, keep_prompts=True)
        assert secret in out, out
    # the secrets of a request line are still replaced
    out, _ = _redact("Receive: obj=GenerateReqInput(text='hi', api_key='sk-live-9f8e7d6c5b4a3210')", keep_prompts=True)
    assert "text='hi'" in out and "sk-live-9f8e7d6c5b4a3210" not in out


def test_a_hostname_learned_in_one_place_is_replaced_everywhere() -> None:
    r = Redactor()
    lines = ["node-17:12345:12345 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>",
             "[2025-03-08 12:00:09 TP0] RuntimeError: node-17 stopped answering"]
    r.learn(lines)
    out = [r.text(x) for x in lines]
    assert all("node-17" not in x for x in out)
    placeholder = out[0].split(":", 1)[0]
    assert placeholder.startswith("<hostname-") and placeholder in out[1]  # one name, one placeholder


def test_a_value_under_a_secrets_name_is_replaced_in_a_summary_tree() -> None:
    r = Redactor()
    tree = {"env": {"AWS_SECRET_ACCESS_KEY": "plainvalue", "CUDA_VISIBLE_DEVICES": "0,1"},
            "server_args": {"api_key": None, "max_total_tokens": 320000, "hf_token": "abc"}}
    out = r.tree(tree)
    assert out["env"]["AWS_SECRET_ACCESS_KEY"].startswith("<API-key-or-token-")
    assert out["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert out["server_args"] == {"api_key": None, "max_total_tokens": 320000, "hf_token": out["server_args"]["hf_token"]}
    assert out["server_args"]["hf_token"] != "abc"


HOSTILE = {
    "letters": "a", "sk- run": "sk-", "at signs": "a@", "dotted digits": "1.", "hex and colons": "ab:",
    "colons": ":", "PEM markers": "-----BEGIN PRIVATE KEY-----", "JWT heads": "eyJa.", "open quotes": "text='",
    "key=": "key=", "token ids": "input_ids=[", "Bearer": "Bearer ", "URL credentials": "a://b:c",
    "home": "/home/", "IPv4": "10.1.2.3 ", "NCCL prefixes": "a:1:2 [0] ", "emails": "a.b@c.d",
    "password:": "password: ", "base64": "QUJDRGVmZ2hpams0NTY3ODkw+/",
}


@pytest.mark.parametrize("unit", list(HOSTILE.values()), ids=list(HOSTILE))
def test_redaction_is_linear_in_a_hostile_line(unit: str) -> None:
    """A MiB line built to make a backtracking pattern restart at every position: linear
    time (4x the text costs about 4x, never 16x) and a bounded cost per MiB."""

    def once(text: str) -> float:
        r = Redactor()
        t = time.perf_counter()
        r.learn(text)
        r.text(text)
        return time.perf_counter() - t

    head = "[2026-03-12 16:43:01 TP1] "
    small, large = head + unit * ((1 << 18) // len(unit)), head + unit * ((1 << 20) // len(unit))
    costs: dict[str, float] = {"small": float("inf"), "large": float("inf")}
    for _ in range(5):  # interleaved, the best of five: a shared machine's load moves
        costs["small"] = min(costs["small"], once(small))
        costs["large"] = min(costs["large"], once(large))
    assert costs["large"] < 8 * costs["small"] + 0.1, costs  # linear: about 4x; quadratic: 16x
    assert costs["large"] < 10.0, costs  # quadratic, a MiB of these costs minutes


# ------------------------------------------------------------------ the outputs, end to end
def _log(tmp_path: Path) -> Path:
    """A crashed two-rank run whose launch line, environment, server_args, NCCL lines and
    request logs carry the corpus, and whose traceback's message holds every line of it."""
    body = "\n".join(line.replace("\n", " ") for _, _, line in SECRETS)
    text = (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 "
        "python3 -m sglang.launch_server --model-path /home/alice/models/secret-llama --tp 2 --host node-17 "
        "--api-key sk-proj-4f9a2c71d0b8e6a3 --dist-init-addr infer-node-3:5000\n"
        "[2025-03-08 12:00:01] server_args=ServerArgs(model_path='/home/alice/models/secret-llama', tp_size=2, "
        "host='node-17', port=30000, api_key='sk-proj-4f9a2c71d0b8e6a3', mem_fraction_static=0.81, log_requests=True)\n"
        "[2025-03-08 12:00:02 TP0] Load weight begin. avail mem=78.50 GB\n"
        "[2025-03-08 12:00:02 TP1] Load weight begin. avail mem=78.50 GB\n"
        "node-17:12345:12345 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>\n"
        "[2025-03-08 12:01:00] Receive: obj=GenerateReqInput(rid='r1', text='my private question about my bank account', "
        "sampling_params={'max_new_tokens': 8})\n"
        "[2025-03-08 12:01:03 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/home/alice/venv/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2420, in '
        "run_scheduler_process\n"
        "    scheduler.event_loop_overlap()\n"
        "RuntimeError: request failed for text='my private question about my bank account' from node-17\n"
        f"{body}\n"
    )
    path = tmp_path / "server.log"
    path.write_text(text, encoding="utf-8")
    return path


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "logforensics", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def _outputs(tmp_path: Path, log: Path, redact: bool, keep_prompts: bool = False) -> dict[str, str]:
    tag = f"{redact}{keep_prompts}"
    md, html, js = tmp_path / f"b{tag}.md", tmp_path / f"r{tag}.html", tmp_path / f"d{tag}.json"
    extra = ["--keep-prompts"] if keep_prompts else []
    _cli("bundle", str(log), "-o", str(md), *extra, *([] if redact else ["--no-redact"]))
    flag = ["--redact", *extra] if redact else []
    _cli("diff", str(log), str(log), "-o", str(html), "--json", str(js), "--fail-on", "never", *flag)
    summary = _cli("summary", str(log), "--json", *flag)
    json.loads(summary)
    json.loads(js.read_text(encoding="utf-8"))
    return {"bundle": md.read_text(encoding="utf-8"), "html": html.read_text(encoding="utf-8"),
            "diff --json": js.read_text(encoding="utf-8"), "summary --json": summary}


def _shown(text: str, secret: str) -> bool:
    # JSON escapes '/' never, but a quote or a backslash would be: look for either form
    return secret in text or json.dumps(secret)[1:-1] in text


def test_every_output_that_leaves_the_machine_redacts_the_corpus(tmp_path: Path) -> None:
    log = _log(tmp_path)
    plain = _outputs(tmp_path, log, redact=False)
    red = _outputs(tmp_path, log, redact=True)
    for output, text in plain.items():
        shown = [s for _, s, _ in SECRETS if _shown(text, s)]
        assert len(shown) >= 15, (output, len(shown))  # the test means something for this output
        leaked = [s for s in shown if _shown(red[output], s)]
        assert not leaked, (output, leaked)
    # still useful: ranks, memory figures, the exception, the file and line
    for output in ("bundle", "html", "summary --json"):
        text = red[output]
        assert "TP0" in text and "78.5" in text and "RuntimeError" in text, output
    assert "scheduler.py" in red["bundle"] and "2420" in red["bundle"]
    tail = red["bundle"].rsplit("---", 1)[1]
    for kind in ("hostname", "IP address", "request text", "password", "home directory", "model path"):
        assert kind in tail, kind


def test_keep_prompts_keeps_the_request_text_and_nothing_else(tmp_path: Path) -> None:
    log = _log(tmp_path)
    kept = _outputs(tmp_path, log, redact=True, keep_prompts=True)
    assert "my private question about my bank account" in kept["bundle"] + kept["summary --json"]
    for output, text in kept.items():
        for secret in ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "node-17", "/home/alice"):
            assert not _shown(text, secret), (output, secret)


def test_prose_after_a_flag_and_public_documentation_hosts_are_not_learned_as_hosts() -> None:
    """The analyzer's own advice ("check --dist-init-addr and the network") once made 'and' a host,
    replaced in every sentence (real-unseen 367); a link to PyTorch's documentation in an OOM
    message is not the user's host (360). A host the log names after the flag still is."""
    advice = "on several nodes it usually means a node never joined: check --dist-init-addr and the network."
    oom = ("See documentation for Memory Management  "
           "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
    own = "--dist-init-addr gpu-head-7:5000 then http://gpu-head-7:30000/health"
    r = Redactor()
    r.learn([advice, oom, own])
    assert r.text(advice) == advice and r.text(oom) == oom
    assert "gpu-head-7" not in r.text(own) and "<hostname-1>" in r.text(own)


def test_the_directories_a_python_environment_was_made_in_outside_home_are_redacted() -> None:
    """real-unseen 365: a cluster's group space names the group and the user before the venv (404:
    a venv of any name, the directory that holds lib/pythonX.Y/site-packages); a
    system prefix (/usr, /opt/conda, an image's /sgl-workspace) names no one and stays."""
    private = ('  File "/groups/mm6677_gp/gbk2114/eic_stuff/.venv/lib/python3.12/site-packages/sglang/srt/'
               'managers/scheduler.py", line 1165, in event_loop_overlap')
    out, r = _redact(private)
    assert "gbk2114" not in out and "mm6677_gp" not in out
    assert out.startswith('  File "<environment-directory-1>/.venv/lib/python3.12/site-packages/sglang/')
    named = ("/data04/deepak/kvcached/scripts/sglang-kvcached-venv/lib/python3.12/site-packages/sglang/srt/"
             "managers/scheduler.py")  # real-unseen 404: an environment of its own name
    assert _redact(named)[0] == ("<environment-directory-1>/sglang-kvcached-venv/lib/python3.12/site-packages/"
                                 "sglang/srt/managers/scheduler.py")
    conda = "/scratch/u123/miniconda3/envs/sgl/lib/python3.10/site-packages/sglang/a.py"
    assert _redact(conda)[0] == "<environment-directory-1>/miniconda3/envs/sgl/lib/python3.10/site-packages/sglang/a.py"
    for public in ("/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py",
                   "/opt/conda/lib/python3.10/site-packages/sglang/srt/server.py",
                   "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py",
                   "/usr/local/app/micromamba/envs/slime/lib/python3.12/subprocess.py"):
        assert _redact(public)[0] == public
