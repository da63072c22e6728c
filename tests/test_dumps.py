"""Crash dumps, crash snapshots, incident-bundle JSON and /metrics text (artefacts.dumps).

The dumps are real pickles made here with the standard library in the shape SGLang's
``dump_requests_before_crash`` writes (a ServerArgs dataclass, request dataclasses, the
output dicts of finished and in-flight requests); the JSON has the keys of SGLang's own
writers. The reader must get every figure back, and must never run what a pickle names.
"""

from __future__ import annotations

import collections
import copyreg
import csv
import dataclasses
import io
import json
import os
import pickle
import pickletools
import random
import re
from pathlib import Path
from typing import Any

import pytest

from logforensics.artefacts import pickled
from logforensics.artefacts.crashdump import read_crash_dump
from logforensics.artefacts.incident import read_json_artefact, read_metrics_text


@dataclasses.dataclass
class ServerArgs:
    model_path: str = "meta-llama/Llama-3.1-8B-Instruct"
    tp_size: int = 2
    dp_size: int = 1
    host: str = "10.1.2.3"
    port: int = 30001
    mem_fraction_static: float = 0.88
    enable_metrics: bool = True
    crash_dump_folder: str | None = "/var/dumps"
    cuda_graph_bs: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 4])
    json_model_override_args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class GenerateReqInput:
    rid: str
    text: str
    sampling_params: dict[str, Any]
    stream: bool = False


class SlottedArgs:
    """A class with __slots__ and no __dict__: pickle's state is (None, {slot: value})."""

    __slots__ = ("model_path", "port")

    def __init__(self) -> None:
        self.model_path = "Qwen/Qwen2.5-7B"
        self.port = 30000


class ListState:
    """A class whose pickled state is a list, not a dict."""

    def __getstate__(self) -> list[int]:
        return [1, 2, 3]

    def __setstate__(self, state: list[int]) -> None:
        pass


class RunsCommand:
    """Unpickling this runs a shell command (a crafted crash dump would carry one)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


LAUNCH = "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2 --port 30001"
T0 = 1764900000.25


def _finished(kind: str) -> dict[str, Any]:
    return {"text": "Paris.", "output_ids": [1, 2, 3],
            "meta_info": {"id": "x", "finish_reason": {"type": kind}, "prompt_tokens": 9, "completion_tokens": 3}}


def _payload() -> dict[str, Any]:
    """SGLang's crash-dump dict: two finished requests, three in flight (in each of the
    forms SGLang has written them), one request object and one dict shared (memo refs)."""
    shared_params = {"max_new_tokens": 64, "temperature": 0.0}
    a = GenerateReqInput("a", "What is the capital of France?", shared_params)
    b = GenerateReqInput("b", "Hello", shared_params, stream=True)
    requests = [
        (a, _finished("stop"), T0, T0 + 1.5),
        (b, _finished("abort"), T0 + 2.0, T0 + 2.5),
        (a, {}, T0 + 3.0, T0 + 9.0),                                      # v0.4: {} for in-flight
        (b, {"text": "Par", "output_ids": [5, 6]}, T0 + 4.0, T0 + 9.0),   # get_crash_dump_output()
        (b, {"text": "P", "meta_info": {"finish_reason": None}}, T0 + 5.0, T0 + 9.25),  # last streamed chunk
    ]
    return {"server_args": ServerArgs(), "requests": requests, "launch_command": LAUNCH}


EXPECTED_ARGS = {k: v for k, v in dataclasses.asdict(ServerArgs()).items() if not isinstance(v, (list, dict))}


def _write(tmp_path: Path, obj: Any, protocol: int = 4, name: str = "crash_dump_2025-12-05_07-00-00.pkl") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_every_figure_of_a_crash_dump_comes_back(tmp_path: Path, protocol: int) -> None:
    path = _write(tmp_path, _payload(), protocol)
    assert any(op.name.endswith("GET") for op, _, _ in pickletools.genops(path.read_bytes()))  # memo refs in play
    dump = read_crash_dump(str(path))
    assert dump.kind == "crash_dump" and dump.file == str(path)
    f = dump.figures
    assert f["requests"] == 5
    assert f["unfinished"] == 3
    assert f["finish_reasons"] == {"stop": 1, "abort": 1}
    assert f["request_class"] == f"{__name__}.GenerateReqInput"
    assert f["first_start"] == T0 and f["last_end"] == T0 + 9.25
    assert f["span_s"] == pytest.approx(9.25)
    assert f["server_args_class"] == f"{__name__}.ServerArgs"
    assert {f"{__name__}.ServerArgs", f"{__name__}.GenerateReqInput"} <= set(f["globals"])
    assert f.get("protocol") == (protocol if protocol >= 2 else None)
    assert dump.server_args == EXPECTED_ARGS
    assert dump.launch_command == LAUNCH
    assert dump.replay == (f"python3 scripts/playground/replay_request_dump.py --input-file {path}"
                           " --host 10.1.2.3 --port 30001")
    assert dump.unread == []


def test_replay_quotes_the_path_and_leaves_a_wildcard_host_to_the_default(tmp_path: Path) -> None:
    payload = _payload()
    payload["server_args"] = dataclasses.replace(ServerArgs(), host="0.0.0.0", port=8000)
    folder = tmp_path / "dumps of node 3"
    folder.mkdir()
    path = _write(folder, payload)
    assert read_crash_dump(str(path)).replay == (
        f"python3 scripts/playground/replay_request_dump.py --input-file '{path}' --port 8000")


def test_the_other_shapes_sglang_has_written(tmp_path: Path) -> None:
    records = _payload()["requests"]
    # server_args as a dict and the command as argv
    d = read_crash_dump(str(_write(tmp_path, {"server_args": {"port": 31000, "tp_size": 4, "cuda_graph_bs": [1]},
                                              "requests": records, "launch_command": LAUNCH.split()})))
    assert d.server_args == {"port": 31000, "tp_size": 4} and d.launch_command == LAUNCH
    assert d.replay is not None and d.replay.endswith("--port 31000")
    # a --dump-requests-folder file: no launch command; server_args None when it would not pickle
    d = read_crash_dump(str(_write(tmp_path, {"server_args": None, "requests": records[:2]})))
    assert d.figures["requests"] == 2 and d.figures["unfinished"] == 0 and d.launch_command is None
    assert d.server_args == {} and any("server_args is None" in u for u in d.unread)
    # the earliest request dumps: a bare list of records
    d = read_crash_dump(str(_write(tmp_path, records)))
    assert d.figures["requests"] == 5 and d.figures["unfinished"] == 3
    # the finished-request ring is a deque: pickled as deque() plus appends
    d = read_crash_dump(str(_write(tmp_path, {"requests": collections.deque(records)})))
    assert d.figures["requests"] == 5 and d.figures["first_start"] == T0
    # a record that is not a 4-tuple is counted apart, the rest still read
    d = read_crash_dump(str(_write(tmp_path, {"requests": [*records, ("short",)]})))
    assert d.figures["requests"] == 5 and any("1 request record" in u for u in d.unread)
    # a finish reason given as a bare string is counted under that string
    d = read_crash_dump(str(_write(tmp_path, {"requests": [(1, {"meta_info": {"finish_reason": "length"}}, T0, T0 + 1)]})))
    assert d.figures["finish_reasons"] == {"length": 1} and d.figures["request_class"] == "int"
    # no requests, no replay
    d = read_crash_dump(str(_write(tmp_path, {"server_args": ServerArgs(), "requests": []})))
    assert d.figures["requests"] == 0 and d.replay is None


def test_slot_state_and_a_state_that_is_not_a_dict(tmp_path: Path) -> None:
    d = read_crash_dump(str(_write(tmp_path, {"server_args": SlottedArgs(), "requests": []}, protocol=2)))
    assert d.server_args == {"model_path": "Qwen/Qwen2.5-7B", "port": 30000}
    d = read_crash_dump(str(_write(tmp_path, {"server_args": ListState(), "requests": []})))
    assert d.server_args == {}
    assert f"the state of {__name__}.ListState is a list, not a dict" in d.unread
    assert f"server_args is a {__name__}.ListState(...) call without a dict state" in d.unread


class KeywordArgs:
    """Pickled with NEWOBJ_EX (protocol 4): keyword arguments to __new__."""

    def __new__(cls, *args: Any, **kwargs: Any) -> KeywordArgs:
        return super().__new__(cls)

    def __init__(self, port: int = 0) -> None:
        self.port = port

    def __getnewargs_ex__(self) -> tuple[tuple[int], dict[str, int]]:
        return (1,), {"b": 2}


class TensorPickler(pickle.Pickler):
    """Puts request objects out of band by persistent id (PERSID / BINPERSID)."""

    def persistent_id(self, obj: Any) -> str | None:
        return f"req-{obj.rid}" if isinstance(obj, GenerateReqInput) else None


def test_the_rarer_opcodes(tmp_path: Path) -> None:
    path = tmp_path / "rare.pkl"
    sa = "sglang.srt.server_args.ServerArgs"
    # protocol 0 INST and protocol 1 OBJ, as Python 2 pickled old-style classes
    inst = (b"(dp0\nS'server_args'\np1\n(isglang.srt.server_args\nServerArgs\np2\n(dp3\nS'port'\np4\nI30000\n"
            b"sbsS'requests'\np5\n(lp6\ns.")
    obj = (b"}q\x00(X\x0b\x00\x00\x00server_argsq\x01(csglang.srt.server_args\nServerArgs\nq\x02oq\x03}q\x04"
           b"X\x04\x00\x00\x00portq\x05M0usbX\x08\x00\x00\x00requestsq\x06]q\x07u.")
    for data in (inst, obj):
        path.write_bytes(data)
        d = read_crash_dump(str(path))
        assert d.server_args == {"port": 30000} and d.figures["server_args_class"] == sa and d.unread == []
    # NEWOBJ_EX
    d = read_crash_dump(str(_write(tmp_path, {"server_args": KeywordArgs(31000), "requests": []}, protocol=4)))
    assert d.server_args == {"port": 31000} and d.figures["server_args_class"] == f"{__name__}.KeywordArgs"
    # persistent ids, sets and frozensets (EMPTY_SET, ADDITEMS, FROZENSET from protocol 4)
    buf = io.BytesIO()
    for protocol in (0, 2, 4):
        buf.seek(0)
        buf.truncate()
        TensorPickler(buf, protocol=protocol).dump({**_payload(), "tags": {"a", 1}, "frozen": frozenset({"b"})})
        path.write_bytes(buf.getvalue())
        d = read_crash_dump(str(path))
        assert d.figures["requests"] == 5 and d.figures["request_class"] == "a persistent id", protocol
        assert d.server_args == EXPECTED_ARGS and d.unread == []
    # an out-of-band buffer (protocol 5) and an extension code (copyreg's registry)
    copyreg.add_extension(__name__, "ServerArgs", 240)
    try:
        data = pickle.dumps({"server_args": ServerArgs(), "requests": [(pickle.PickleBuffer(b"abc"), {}, T0, T0)]},
                            protocol=5, buffer_callback=lambda _: False)
    finally:
        copyreg.remove_extension(__name__, "ServerArgs", 240)
    path.write_bytes(data)
    d = read_crash_dump(str(path))
    assert d.figures["request_class"] == "an out-of-band buffer" and d.figures["unfinished"] == 1
    assert d.figures["server_args_class"] == "extension code 240" and d.server_args == EXPECTED_ARGS


def test_a_dump_that_would_run_a_command_is_read_without_running_it(tmp_path: Path) -> None:
    # the payload is live: loading it with pickle runs the command
    control = tmp_path / "control-marker"
    pickle.loads(pickle.dumps(RunsCommand(control)))
    assert control.exists()

    marker = tmp_path / "marker"
    crafted = {"server_args": RunsCommand(marker),
               "requests": [(RunsCommand(marker), _finished("stop"), T0, T0 + 1)],
               "launch_command": RunsCommand(marker)}
    system = f"{os.system.__module__}.system"   # posix.system
    for protocol in (0, 2, 5):
        d = read_crash_dump(str(_write(tmp_path, crafted, protocol)))
        assert not marker.exists()
        assert system in d.figures["globals"]
        assert d.figures["request_class"] == system
        assert f"server_args is a {system}(...) call without a dict state" in d.unread
        assert f"launch_command is a {system}(...) call, not a string" in d.unread
        assert d.server_args == {} and d.launch_command is None
    d = read_crash_dump(str(_write(tmp_path, RunsCommand(marker))))
    assert not marker.exists()
    assert d.figures["globals"] == [system]
    assert f"the pickle holds a {system}(...) call, not a dict of requests" in d.unread


def test_a_truncated_dump_gives_what_it_holds(tmp_path: Path) -> None:
    data = pickle.dumps(_payload(), protocol=4)
    path = tmp_path / "cut.pkl"
    seen_partial = False
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        try:
            d = read_crash_dump(str(path))
        except ValueError as e:
            assert "not a pickle" in str(e) and cut < 40, (cut, e)   # only a cut before anything is read
            continue
        assert any("the file ends before the pickle does" in u for u in d.unread), (cut, d.unread)
        n = d.figures.get("requests", 0)
        assert 0 <= n <= 5
        if 0 < n < 5:
            seen_partial = True
            assert d.server_args == EXPECTED_ARGS   # it comes before the requests
    assert seen_partial
    path.write_bytes(data[:-1])   # only STOP missing: everything is there
    d = read_crash_dump(str(path))
    assert d.figures["requests"] == 5 and d.figures["unfinished"] == 3 and d.launch_command == LAUNCH


def test_an_unknown_opcode_stops_the_walk_but_not_the_reading(tmp_path: Path) -> None:
    data = pickle.dumps(_payload(), protocol=4)
    path = tmp_path / "odd.pkl"
    path.write_bytes(data[:-1] + b"\xff" + data[-1:])
    d = read_crash_dump(str(path))
    assert d.figures["requests"] == 5 and d.server_args == EXPECTED_ARGS
    assert len(d.unread) == 1 and "unknown" in d.unread[0] and f"unreadable from byte {len(data)}" in d.unread[0]


def test_what_is_not_a_dump_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = {"empty.pkl": b"", "text.pkl": b"hello, this is a log line\n", "json.pkl": b'{"requests": []}'}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError) as e:
            read_crash_dump(str(tmp_path / name))
        assert "\n" not in str(e.value) and str(e.value).startswith(("empty file", "not a pickle")), str(e.value)
    with pytest.raises(ValueError, match="cannot read"):
        read_crash_dump(str(tmp_path / "missing.pkl"))
    os.mkfifo(tmp_path / "pipe.pkl")   # opening it to read would wait for a writer
    with pytest.raises(ValueError, match="not a regular file"):
        read_crash_dump(str(tmp_path / "pipe.pkl"))
    huge = tmp_path / "huge.pkl"
    with open(huge, "wb") as f:
        f.truncate(pickled.MAX_BYTES + 1)   # sparse: nothing is written to disk
    with pytest.raises(ValueError, match="over the 1073741824-byte limit"):
        read_crash_dump(str(huge))
    huge.unlink()
    path = _write(tmp_path, _payload())
    monkeypatch.setattr(pickled, "MAX_OPCODES", 50)
    with pytest.raises(ValueError, match="more than 50 pickle opcodes"):
        read_crash_dump(str(path))


def test_deep_nesting_is_refused_and_shallow_enough_is_read(tmp_path: Path) -> None:
    path = tmp_path / "deep.pkl"
    deep = {
        "lists": b"\x80\x04" + b"]" * 5000 + b"a" * 4999 + b".",               # [[[...]]]
        "tuple key": b"\x80\x04}" + b")" + b"\x85" * 5000 + b"K\x01s.",       # {((((),),),): 1}
        "dicts": b"\x80\x04}" + b"\x8c\x01k}" * 2999 + b"s" * 2999 + b".",     # {"k": {"k": ...}}
        "calls": b"\x80\x04\x8c\x01m\x8c\x01f\x93" + b"N\x85R" * 3000 + b".",  # m.f(None)(None)...
    }
    for data in deep.values():
        path.write_bytes(data)
        with pytest.raises(ValueError, match="nest deeper than 1000 levels"):
            read_crash_dump(str(path))
    path.write_bytes(b"\x80\x04" + b"]" * 900 + b"a" * 899 + b".")
    d = read_crash_dump(str(path))
    assert d.figures["requests"] == 0 and "1 request record(s) are not (request, output, start, end) tuples" in d.unread


def test_keys_that_would_hash_deeply_become_placeholders(tmp_path: Path) -> None:
    d = read_crash_dump(str(_write(tmp_path, {("a", ("b",)): 1, "requests": _payload()["requests"]})))
    assert d.figures["requests"] == 5
    assert "a tuple used as a dict key or set member was replaced by a placeholder" in d.unread


def test_corrupted_dumps_give_a_dump_or_a_one_line_error(tmp_path: Path) -> None:
    data = bytearray(pickle.dumps(_payload(), protocol=2))
    rng = random.Random(20251205)
    path = tmp_path / "fuzz.pkl"
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(2, len(mutated))] = rng.randrange(256)
        path.write_bytes(bytes(mutated))
        try:
            d = read_crash_dump(str(path))
        except ValueError as e:
            assert "\n" not in str(e)
            continue
        assert d.kind == "crash_dump" and all(isinstance(u, str) for u in d.unread)
        json.dumps(d.to_dict(), default=str)


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------

def _roundtrip(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def test_a_crash_snapshot(tmp_path: Path) -> None:
    snapshot = _roundtrip({   # crash_snapshot.py dump_crash_snapshot's payload
        "reason": "scheduler exception",
        "timestamp": "2025-12-05T07:01:02.345678",
        "hostname": "node-3",
        "pid": 4242,
        "scheduler": {"forward_ct": 1834, "num_running_reqs": 12, "waiting_queue_len": 3,
                      "max_total_num_tokens": 20480, "tp_rank": 0, "pp_rank": 0},
        "recent_host_pool_io": [
            {"kind": "load_to_device", "t": 1764918062.1, "pid": 4242, "num_tokens": 128},
            {"kind": "backup_from_device", "t": 1764918062.3, "pid": 4242, "num_tokens": 64, "layer_id": 7},
        ],
        "extra": {"device": 0, "note": "sticky error"},
        "traceback": "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                     "RuntimeError: CUDA error: an illegal memory access was encountered\n\n",
    })
    d = read_json_artefact("anything.json", snapshot)
    assert d is not None and d.kind == "crash_snapshot" and d.file == "anything.json"
    assert d.figures == {
        "reason": "scheduler exception", "timestamp": "2025-12-05T07:01:02.345678", "hostname": "node-3",
        "pid": 4242, "forward_ct": 1834, "num_running_reqs": 12, "waiting_queue_len": 3,
        "max_total_num_tokens": 20480, "tp_rank": 0, "pp_rank": 0, "recent_host_pool_io": 2,
        "last_host_pool_io": {"kind": "backup_from_device", "t": 1764918062.3, "pid": 4242,
                              "num_tokens": 64, "layer_id": 7},
        "extra": {"device": 0, "note": "sticky error"},
        "traceback": "RuntimeError: CUDA error: an illegal memory access was encountered",
    }


def _state(dp: int) -> dict[str, Any]:
    """One DP rank's internal state: the server args repeated, then its own keys."""
    return {"model_path": "Qwen/Qwen2.5-0.5B", "tp_size": 1, "dp_size": 2, "last_gen_throughput": 120.5 + dp,
            "memory_usage": {"weight": 0.98, "kvcache": 0.23, "token_capacity": 20480, "graph": 0},
            "effective_max_running_requests_per_dp": 64, "waiting_queue_rids": ["r1", "r2"],
            "step_time_dict": {"1": [0.1]}}


SERVER_INFO = {"model_path": "Qwen/Qwen2.5-0.5B", "tp_size": 1, "dp_size": 2, "port": 30000,
               "mem_fraction_static": 0.907, "cuda_graph_bs": [1, 2, 4], "crash_dump_folder": None,
               "status": "ready", "max_total_num_tokens": 20480, "max_req_input_len": 32762,
               "internal_states": [_state(0), _state(1)], "version": "0.5.6"}


def test_server_info() -> None:
    d = read_json_artefact("x", _roundtrip(SERVER_INFO))
    assert d is not None and d.kind == "incident"
    own = {"memory_usage": {"weight": 0.98, "kvcache": 0.23, "token_capacity": 20480, "graph": 0},
           "effective_max_running_requests_per_dp": 64}
    assert d.figures == {"version": "0.5.6", "max_total_num_tokens": 20480, "max_req_input_len": 32762,
                         "internal_states": [{"last_gen_throughput": 120.5, **own},
                                             {"last_gen_throughput": 121.5, **own}]}
    assert d.server_args == {"model_path": "Qwen/Qwen2.5-0.5B", "tp_size": 1, "dp_size": 2, "port": 30000,
                             "mem_fraction_static": 0.907, "crash_dump_folder": None}
    single = read_json_artefact("x", {**SERVER_INFO, "internal_states": _state(0)})   # one state, not a list
    assert single is not None and single.figures["internal_states"] == [{"last_gen_throughput": 120.5, **own}]


def _rank(dp: int, running: int, waiting: int, usage: float, throughput: float, hit: float) -> dict[str, Any]:
    return {"dp_rank": dp, "timestamp": 1764918062.0, "num_running_reqs": running, "num_waiting_reqs": waiting,
            "num_used_tokens": 1000 * running, "max_total_num_tokens": 20480, "token_usage": usage,
            "gen_throughput": throughput, "cache_hit_rate": hit, "max_running_requests": 64,
            "memory": {"weight_gb": 0.98, "kv_cache_gb": 0.23, "graph_gb": 0.0, "token_capacity": 20480},
            "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 1}}


def test_loads_of_two_dp_ranks() -> None:
    loads = _roundtrip({"timestamp": "2025-12-05T07:01:02+00:00", "version": "0.5.6",
                        "accelerator": "NVIDIA H100 80GB HBM3", "num_accelerators": 1,
                        "loads": [_rank(0, 3, 2, 0.41, 29.75, 0.97), _rank(1, 5, 0, 0.9, 30.0, 0.5)]})
    d = read_json_artefact("x", loads)
    assert d is not None and d.kind == "incident"
    f = d.figures
    assert (f["num_running_reqs"], f["num_waiting_reqs"], f["num_used_tokens"], f["gen_throughput"]) == (8, 2, 8000, 59.75)
    assert (f["token_usage"], f["cache_hit_rate"], f["max_total_num_tokens"], f["max_running_requests"]) == (0.9, 0.97, 20480, 64)
    assert f["combined"]["num_running_reqs"] == "sum" and f["combined"]["token_usage"] == "max"
    assert f["loads"][1]["queues"] == {"waiting": 0, "grammar": 0, "paused": 0, "retracted": 1}
    assert (f["version"], f["accelerator"], f["num_accelerators"]) == ("0.5.6", "NVIDIA H100 80GB HBM3", 1)
    assert "dp_rank" not in f and "aggregate" not in f
    # the 2025 form, with the server's own aggregate
    old = {"timestamp": "t", "version": "0.5.2", "dp_rank_count": 1, "loads": [_rank(0, 1, 0, 0.05, 120.5, 0.2)],
           "aggregate": {"total_running_reqs": 1, "total_waiting_reqs": 0, "avg_token_usage": 0.05}}
    d = read_json_artefact("x", old)
    assert d is not None and d.figures["dp_rank_count"] == 1 and d.figures["num_running_reqs"] == 1
    assert d.figures["aggregate"] == {"total_running_reqs": 1, "total_waiting_reqs": 0, "avg_token_usage": 0.05}
    assert "combined" not in d.figures


def test_the_files_of_an_incident_bundle() -> None:
    # a failed endpoint, as collect-bundle saves it
    failed = {"ok": False, "status": 503, "path": "/health_generate", "error": "\nService Unavailable\nmore"}
    d = read_json_artefact("health_generate.txt.error.json", failed)
    assert d is not None and d.kind == "incident"
    assert d.figures == {"path": "/health_generate", "ok": False, "status": 503, "error": "Service Unavailable"}
    d = read_json_artefact("x", {"ok": True, "status": 200, "path": "/v1/loads", "text": "<html>",
                                 "decode_error": "response was not valid JSON"})
    assert d is not None and d.figures == {"path": "/v1/loads", "ok": True, "status": 200,
                                           "decode_error": "response was not valid JSON"}
    # a JSON endpoint, wrapped
    d = read_json_artefact("server_info.json", {"ok": True, "status": 200, "path": "/server_info", "json": SERVER_INFO})
    assert d is not None and d.figures["status"] == 200 and d.figures["path"] == "/server_info"
    assert d.figures["version"] == "0.5.6" and d.server_args["port"] == 30000
    d = read_json_artefact("m.json", {"ok": True, "status": 200, "path": "/model_info",
                                      "json": {"model_path": "m", "is_generation": True, "weight_version": "v7"}})
    assert d is not None and d.figures == {"model_path": "m", "is_generation": True, "weight_version": "v7",
                                           "path": "/model_info", "ok": True, "status": 200}
    # metadata.json and the summarize-bundle report
    meta = {"artifact_type": "incident_bundle", "base_url": "http://127.0.0.1:30000", "collected_at": "20251205_070102",
            "token_provided": False, "timeout_seconds": 10.0}
    d = read_json_artefact("metadata.json", meta)
    assert d is not None and d.figures == meta
    report = {"artifact_type": "incident_bundle", "bundle_dir": "/somewhere", "base_url": "http://h:1",
              "collected_at": "c", "health": {"health_ok": True, "health_generate_ok": False},
              "model": {"model_path": "m", "served_model_name": "m", "model_type": None},
              "topology": {"tp_size": 8, "dp_size": 1, "disaggregation_mode": "null"},
              "capacity": {"max_total_num_tokens": 20480, "weight_gb": 0.98},
              "point_in_time_load": {"running_reqs": 1, "waiting_reqs": 4, "token_usage": 0.93,
                                     "queues": {"waiting": 4}},
              "metrics": {"request_count": 2.0, "avg_ttft_seconds": 3.1,
                          "stage_avg_seconds_max_tp_rank": {"prefill_forward": 2.9}},
              "signals": ["/health is green but /health_generate failed."]}
    d = read_json_artefact("SUMMARY_REPORT.json", report)
    assert d is not None
    assert d.figures == {"artifact_type": "incident_bundle", "base_url": "http://h:1", "collected_at": "c",
                         "health_ok": True, "health_generate_ok": False, "max_total_num_tokens": 20480,
                         "weight_gb": 0.98, "running_reqs": 1, "waiting_reqs": 4, "token_usage": 0.93,
                         "queues": {"waiting": 4}, "request_count": 2.0, "avg_ttft_seconds": 3.1,
                         "stage_avg_seconds_max_tp_rank": {"prefill_forward": 2.9},
                         "signals": ["/health is green but /health_generate failed."]}
    assert d.server_args == {"model_path": "m", "served_model_name": "m", "tp_size": 8, "dp_size": 1,
                             "disaggregation_mode": "null"}


def test_other_json_is_not_recognised_whatever_its_name() -> None:
    for other in ([], "text", 3, {}, {"a": 1}, {"loads": [1, 2]}, {"loads": [{"truck": 1}]},
                  {"reason": "x"}, {"internal_states": []}, {"model_path": "m"},
                  {"ok": True, "status": 200}, {"path": "/x", "status": 200, "ok": True},
                  {"path": "x", "status": 200, "ok": True, "json": {}}):
        assert read_json_artefact("server_info.json", other) is None, other
    assert read_json_artefact("notes.txt", SERVER_INFO) is not None


# ---------------------------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------------------------

def _labels(dp: int, tp: int, **extra: str) -> str:
    labels = {"model_name": "m", "engine_type": "unified", "tp_rank": str(tp), "pp_rank": "0",
              "moe_ep_rank": "0", **extra, "dp_rank": str(dp)}
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


# Two DP ranks (tp_rank 0 and 2), each also reported by a second TP rank with other numbers
# (--enable-metrics-for-all-schedulers), priority breakdowns, counters, a histogram.
METRICS = f"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{_labels(0, 0)}}} 3.0
sglang:num_running_reqs{{{_labels(0, 1)}}} 300.0
sglang:num_running_reqs{{{_labels(1, 2)}}} 5.0
sglang:num_running_reqs{{{_labels(1, 3)}}} 500.0
sglang:num_queue_reqs{{{_labels(0, 0, priority="")}}} 4.0
sglang:num_queue_reqs{{{_labels(0, 0, priority="1")}}} 3.0
sglang:num_queue_reqs{{{_labels(0, 0, priority="2")}}} 1.0
sglang:num_queue_reqs{{{_labels(1, 2, priority="")}}} 2.0
sglang:token_usage{{{_labels(0, 0)}}} 0.5
sglang:token_usage{{{_labels(1, 2)}}} 0.9
sglang:cache_hit_rate{{{_labels(0, 0)}}} 0.25
sglang:cache_hit_rate{{{_labels(1, 2)}}} 0.75
sglang:gen_throughput{{{_labels(0, 0)}}} 100.5
sglang:gen_throughput{{{_labels(1, 2)}}} 50.25
sglang:max_total_num_tokens{{{_labels(0, 0)}}} 20480.0
sglang:max_total_num_tokens{{{_labels(1, 2)}}} 20480.0
sglang:fwd_occupancy{{{_labels(0, 0)}}} NaN
sglang:routing_key_running_req_count_bucket{{{_labels(0, 0, le="1")}}} 2.0
sglang:routing_key_running_req_count_gcount{{{_labels(0, 0)}}} 2.0
sglang:routing_key_running_req_count_gcount{{{_labels(1, 2)}}} 3.0
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{{_labels(0, 0)}}} 2.0
sglang:num_retracted_requests_total{{{_labels(1, 2)}}} 1.0
sglang:num_retracted_requests_created{{{_labels(1, 2)}}} 1.764918e+09
sglang:prompt_tokens_total{{model_name="m",is_streaming="true"}} 100.0
sglang:prompt_tokens_total{{model_name="m",is_streaming="false"}} 50.0
sglang:time_to_first_token_seconds_bucket{{model_name="m",le="0.1"}} 1.0
sglang:time_to_first_token_seconds_bucket{{model_name="m",le="+Inf"}} 3.0
sglang:time_to_first_token_seconds_sum{{model_name="m"}} 0.5
sglang:time_to_first_token_seconds_count{{model_name="m"}} 3.0
sglang:realtime_tokens_total{{{_labels(0, 0, mode="decode")}}} 10.0
sglang:realtime_tokens_total{{{_labels(1, 2, mode="decode")}}} 20.0
sglang:realtime_tokens_total{{{_labels(0, 0, mode="prefill_compute")}}} 5.0 1764918062000
process_cpu_seconds_total 12.5
python_info{{implementation="CPython",version="3.11"}} 1.0
"""

EXPECTED_METRICS = {
    "num_running_reqs": 8.0, "num_queue_reqs": 6.0, "token_usage": 0.9, "cache_hit_rate": 0.75,
    "gen_throughput": 150.75, "max_total_num_tokens": 20480.0, "num_retracted_requests_total": 3.0,
    "prompt_tokens_total": 150.0, "time_to_first_token_seconds_sum": 0.5, "time_to_first_token_seconds_count": 3.0,
    'realtime_tokens_total{mode="decode"}': 30.0, 'realtime_tokens_total{mode="prefill_compute"}': 5.0,
    "routing_key_running_req_count_gcount": 5.0,
    "combined": {"routing_key_running_req_count_gcount": "sum", "num_running_reqs": "sum", "num_queue_reqs": "sum", "token_usage": "max", "cache_hit_rate": "max",
                 "gen_throughput": "sum", "max_total_num_tokens": "max", "num_retracted_requests_total": "sum",
                 "prompt_tokens_total": "sum", 'realtime_tokens_total{mode="decode"}': "sum"},
}


def test_metrics_pooled_over_dp_ranks_once_per_scheduler() -> None:
    d = read_metrics_text("metrics.txt", METRICS)
    assert d is not None and d.kind == "incident" and d.file == "metrics.txt"
    assert d.figures == EXPECTED_METRICS
    assert d.unread == []
    assert list(d.figures)[:6] == ["num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput",
                                   "cache_hit_rate", "num_retracted_requests_total"]   # the load first


def test_metrics_under_ray_read_alike() -> None:
    d = read_metrics_text("m", METRICS.replace("sglang:", "sglang_"))
    assert d is not None and d.figures == EXPECTED_METRICS


def test_metrics_without_sglang_or_with_bad_lines() -> None:
    assert read_metrics_text("m", "") is None
    assert read_metrics_text("m", 'vllm:num_requests_running{model_name="m"} 3.0\nprocess_open_fds 9\n') is None
    text = ('sglang:num_running_reqs{model_name="a \\"quoted\\", name",dp_rank="0"} 2\n'
            'sglang:num_running_reqs{model_name="b",dp_rank="1",} 3\n'
            "sglang:num_queue_reqs{broken 1\n"
            "sglang:token_usage 0.5 123 extra\n"
            "sglang:gen_throughput notanumber\n")
    d = read_metrics_text("m", text)
    assert d is not None
    assert d.figures == {"num_running_reqs": 5.0, "combined": {"num_running_reqs": "sum"}}
    assert d.unread == ["3 line(s) are not Prometheus samples"]


REAL = Path(__file__).parent.parent / "fixtures" / "artefacts"


def test_real_metrics_pastes_read_as_their_labels_say() -> None:
    with open(REAL / "SOURCES.tsv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if r["kind"] == "sglang-metrics"]
    assert len(rows) >= 3
    for row in rows:
        d = read_metrics_text(row["file"], (REAL / row["file"]).read_text(encoding="utf-8"))
        assert d is not None, row["file"]
        labelled = dict(re.findall(r"(\w+)=([0-9.]+)(?:;|$)", row["what_it_shows"]))
        for name, value in labelled.items():
            assert d.figures[name] == float(value), (row["file"], name)
        assert not any("{" in name for name in d.figures), row["file"]   # no pid, name or rank figures
    d = read_metrics_text("x", (REAL / "sglang-metrics-dp-rank-pid-labels.txt").read_text(encoding="utf-8"))
    assert d is not None and d.figures == {"num_retracted_reqs": 0.0, "num_paused_reqs": 0.0,
                                           "combined": {"num_retracted_reqs": "sum", "num_paused_reqs": "sum"}}


def test_real_server_info_reads_as_its_label_says() -> None:
    """A real ``/get_server_info`` answer (``SOURCES.tsv`` kind ``sglang-server-info``): found by its
    content, its figures and server args the ones the label gives from its text."""
    from logforensics.artefacts.sniff import read_artefacts

    with open(REAL / "SOURCES.tsv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if r["kind"] == "sglang-server-info"]
    assert rows
    for row in rows:
        arts = read_artefacts([str(REAL / row["file"])])
        assert arts.unknown == {} and len(arts.dumps) == 1, row["file"]
        d = arts.dumps[0]
        assert d.kind == "incident"
        said = dict(re.findall(r"(\w+)=([\w./-]+)", row["what_it_shows"]))
        assert d.figures["version"] == said["version"]
        for name in ("max_total_num_tokens", "max_req_input_len"):
            assert d.figures[name] == int(said[name]), name
        for name in ("tp_size", "chunked_prefill_size", "max_total_tokens"):
            assert d.server_args[name] == int(said[name]), name
        assert d.server_args["model_path"] == said["model_path"]
        assert "max_total_num_tokens" not in d.server_args  # the scheduler's, not a setting
        states = d.figures["internal_states"]
        assert states[0]["last_gen_throughput"] == float(said["last_gen_throughput"])
        assert states[0]["memory_usage"]["token_capacity"] == int(said["token_capacity"])


def test_real_v1_loads_answers_read_as_their_labels_say(tmp_path: Path) -> None:
    """Real ``/v1/loads`` answers (``SOURCES.tsv`` kind ``sglang-v1-loads``): found by their
    content under any name, their figures the label's, each DP rank kept in the order served,
    the figures of several ranks combined (counts summed, capacities the largest), and the
    answer shown beside a server log in ``summary``."""
    from logforensics.artefacts.sniff import read_artefacts

    with open(REAL / "SOURCES.tsv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if r["kind"] == "sglang-v1-loads"]
    assert len(rows) == 2
    for row in rows:
        renamed = tmp_path / "answer"   # sniffed by content, not by name
        renamed.write_bytes((REAL / row["file"]).read_bytes())
        arts = read_artefacts([str(renamed)])
        assert arts.unknown == {} and [d.kind for d in arts.dumps] == ["incident"], row["file"]
        f = arts.dumps[0].figures
        said = dict(re.findall(r"(\w+)=([\w.]+)", row["what_it_shows"]))
        assert f["version"] == said["version"]
        assert f["dp_rank_count"] == int(said["dp_rank_count"]) == len(f["loads"])
        for name in ("num_running_reqs", "max_total_num_tokens", "max_running_requests"):
            assert f[name] == int(said[name]), (row["file"], name)
        assert f["aggregate"]["total_reqs"] == int(said["total_reqs"])
    one = read_artefacts([str(REAL / rows[0]["file"])]).dumps[0].figures
    assert (one["num_used_tokens"], one["token_usage"], one["gen_throughput"]) == (178496, 0.3273, 171.81)
    assert one["loads"][0]["memory"] == {"weight_gb": 89.244, "kv_cache_gb": 31.221, "graph_gb": 1.32,
                                         "token_capacity": 545344}
    dp8 = read_artefacts([str(REAL / rows[1]["file"])]).dumps[0].figures
    assert [r["dp_rank"] for r in dp8["loads"]] == [0, 3, 1, 4, 5, 2, 6, 7]
    assert {r["disaggregation"]["mode"] for r in dp8["loads"]} == {"prefill"}
    assert dp8["combined"]["num_running_reqs"] == "sum" and dp8["combined"]["max_total_num_tokens"] == "max"
    run = tmp_path / "run"
    run.mkdir()
    (run / "server.log").write_text("[2026-05-10 05:40:00 TP0] Load weight begin. avail mem=78.50 GB\n")
    (run / "loads.json").write_bytes((REAL / rows[0]["file"]).read_bytes())
    from click.testing import CliRunner

    from logforensics.cli import main
    s = json.loads(CliRunner().invoke(main, ["summary", "--json", str(run)]).stdout)
    [shown] = s["artefacts"]["dumps"]
    assert shown["file"].endswith("loads.json") and shown["figures"]["num_running_reqs"] == 4


def test_beside_a_log_each_is_found_by_content_and_survives_a_saved_summary(tmp_path: Path) -> None:
    from logforensics.artefacts.sniff import read_artefacts
    from logforensics.artefacts.types import Dump

    crash = _write(tmp_path, _payload(), protocol=4, name="a.bin")
    info = tmp_path / "b.txt"
    info.write_text(json.dumps(SERVER_INFO, indent=2))
    metrics = tmp_path / "c"
    metrics.write_text(METRICS)
    arts = read_artefacts([str(crash), str(info), str(metrics)])
    assert [(d.kind, d.file) for d in arts.dumps] == [("crash_dump", str(crash)), ("incident", str(info)),
                                                      ("incident", str(metrics))]
    assert arts.unknown == {}
    for d in arts.dumps:
        assert Dump.from_dict(json.loads(json.dumps(d.to_dict()))) == d
