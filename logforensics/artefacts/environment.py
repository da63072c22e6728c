"""A run's environment from the texts engineers attach: ``python3 -m sglang.check_env``,
``nvidia-smi``, ``nvidia-smi topo -m`` (or ``rocm-smi --showtopotype``) and ``pip freeze`` /
``pip list``.

Each text gives facts under comparable names (:data:`KEYS`): package versions, the CUDA
toolkit and driver, the GPUs and how they are linked. ``check_env`` prints ``Key: value``
lines (``GPU 0,1,2,3: NVIDIA H100 80GB HBM3``, ``CUDA Driver Version: 550.54.15``, one line
per package) and then the topology matrix under ``NVIDIA Topology:``; the matrix names each
pair's link (``NV18``: NVLink with 18 links; ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``:
PCIe paths through switches, host bridges or sockets), which is what tells an NVLink box
from a PCIe one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..units import gib
from .types import Cited

#: Facts a diff compares, in the order it states them, with the words it uses.
KEYS = {
    "sglang": "SGLang", "torch": "PyTorch", "cuda": "CUDA toolkit", "driver": "driver",
    "driver_cuda": "driver's CUDA", "rocm": "ROCm", "nccl": "NCCL", "flashinfer": "FlashInfer",
    "sgl_kernel": "sgl-kernel", "triton": "Triton", "transformers": "transformers", "vllm": "vLLM",
    "python": "Python", "gpu": "GPU", "gpu_count": "GPU count", "compute_capability": "compute capability",
    "topology": "GPU topology", "cpu_limit": "CPU allocation", "memory_limit": "memory allocation",
    "hypervisor": "hypervisor", "ulimit_soft": "open-file limit",
}
#: Package names (as pip and check_env print them, lower case, ``_`` for ``-``) -> fact key.
PACKAGES = {
    "sglang": "sglang", "torch": "torch", "pytorch": "torch", "flashinfer_python": "flashinfer",
    "flashinfer": "flashinfer", "sgl_kernel": "sgl_kernel", "triton": "triton", "transformers": "transformers",
    "vllm": "vllm", "nvidia_nccl_cu12": "nccl", "nvidia_nccl_cu13": "nccl", "nvidia_nccl_cu11": "nccl",
}
_NOT_FOUND = ("package not found", "module not found", "not available", "none", "")

_KEYVAL = re.compile(r"^(?P<key>[A-Za-z][\w .,()/+-]*?):(?: (?P<value>.*))?$")
#: check_env's own keys: three of them in a text's first lines make it check_env output.
CHECK_ENV_KEYS = ("Python", "CUDA available", "ROCM available", "PyTorch", "CUDA_HOME", "ROCM_HOME", "NVCC",
                  "HIPCC", "CUDA Driver Version", "CUDA Driver Versions", "ROCM Driver Version", "sglang",
                  "sgl_kernel", "flashinfer_python", "NVIDIA Topology", "AMD Topology", "ulimit soft",
                  "Hypervisor vendor", "NPU available", "CANN_HOME", "Ascend Driver Version", "Ascend Topology")
#: the accelerators: ``GPU 0,1,2,3: NVIDIA H100 80GB HBM3``, Ascend's ``NPU 0,1: Ascend910_9362``
_GPU_KEY = re.compile(r"^(?:GPU|NPU) ([\d,]+)$")
_CC_KEY = re.compile(r"^GPU [\d,]+ Compute Capability$")
_TOPOLOGY_KEYS = ("NVIDIA Topology", "AMD Topology", "Ascend Topology")
_CUDA_RELEASE = re.compile(r"release (\d+\.\d+)")
#: the driver is "Driver Version" until R610, then "KMD Version" (and "CUDA UMD Version")
_SMI_HEAD = re.compile(r"NVIDIA-SMI (\S+)\s+(?:Driver|KMD) Version: (\S+)(?:\s+CUDA (?:UMD )?Version: (\S+))?")
_SMI_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s{2,}(?:On|Off)\s+\|")
#: ``name==1.2`` (``pip freeze``; vLLM's collect_env prefixes ``[pip3] ``)
_PIP_FREEZE = re.compile(r"^(?:\[\w+\] )?([A-Za-z0-9][\w.-]*)==([^\s;#]+)\s*$")
#: ``pip show``: ``Name: torch`` then ``Version: 2.6.0``
_PIP_SHOW = re.compile(r"^\(?(Name|Version): (\S+)\s*$")
_PIP_LIST = re.compile(r"^([A-Za-z0-9][\w.-]*)\s+(\d[\w.+!-]*)\s*(?:\S.*)?$")
#: a row of a topology matrix: ``GPU3`` (nvidia-smi, rocm-smi), ``Phy-ID12`` (Ascend's npu-smi)
_TOPO_ROW = re.compile(r"^(GPU\d+|Phy-ID\d+)\s+(.*)$")
_TOPO_HEAD = re.compile(r"GPU\d+|Phy-ID\d+")
#: a cell of a topology matrix: itself (X; 0 in rocm-smi), NVLink (NV#), AMD's XGMI, Ascend's
#: HCCS (HCCS_SW through a switch) and SIO (the bus between the two dies of one chip), or a PCIe path
_LINK = re.compile(r"^(?:X|NV\d+|NV|XGMI|HCCS|HCCS_SW|SIO|PCIE|PIX|PXB|PHB|NODE|SYS|SOC|\d+)$")
_LINK_WORD = re.compile(r"\b(NV\d+|XGMI|HCCS|HCCS_SW|SIO|PIX|PXB|PHB|NODE|SYS)\b")


#: how each orchestrator writes a memory quantity: its suffixes -> bytes, and the unit of a bare number
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
#: Kubernetes: ``64Gi`` binary, ``64G`` decimal, ``64e9`` and bare numbers bytes, ``m`` a thousandth
_K8S_SUFFIX = {**{f"{k}i": v for k, v in _BINARY.items()}, "Ei": 2**60, "k": 10**3, "M": 10**6, "G": 10**9,
               "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3, "": 1}
_K8S_QUANTITY = re.compile(r"(\d+(?:\.\d+)?)(?:[eE](\d+))?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?")
#: Slurm: ``64G``, ``500000M``, ``4000`` (MiB by default), powers of 1024
_SLURM_QUANTITY = re.compile(r"(\d+(?:\.\d+)?)([KMGTP])?")


def k8s_bytes(text: str) -> float | None:
    """Bytes of a Kubernetes quantity (``64Gi``, ``64G``, ``512Mi``, ``129e6``), or None."""
    m = _K8S_QUANTITY.fullmatch(text.strip())
    if not m:
        return None
    return float(m.group(1)) * 10 ** int(m.group(2) or 0) * _K8S_SUFFIX[m.group(3) or ""]


def slurm_bytes(text: str) -> float | None:
    """Bytes of a Slurm memory figure (``64G``, ``500000M``; a bare number is MiB), or None."""
    m = _SLURM_QUANTITY.fullmatch(text.strip())
    return float(m.group(1)) * _BINARY[m.group(2) or "M"] if m else None


def memory_value(size: float | None, own: str) -> str:
    """A memory allocation's fact: the figure as the project's one formatter writes every
    memory figure (``16.00 MiB``, ``64.00 GiB``), then the orchestrator's own text in
    brackets (``64.00 GiB (64Gi)``, ``59.60 GiB (64G)``, ``16.00 MiB (Memory: 16777216)``);
    the own text alone when it is no quantity this version reads."""
    if size is None or size <= 0:
        return own
    return f"{gib(size / 2**30)} ({own})"


def memory_figure(value: str) -> str:
    """The figure of a :func:`memory_value` (what two allocations are compared by)."""
    return value.split(" (", 1)[0]


#: Slurm's CPUs per node as its variables write them: ``64``, and ``64(x2)`` for two nodes of 64
_SLURM_CPUS = re.compile(r"(\d+)(?:\(x\d+\))?")


def slurm_cores(text: str) -> float | None:
    """CPUs per node of a Slurm figure (``64``, ``64(x2)``), or None (nodes given different
    counts, ``72(x2),36``, are no one figure)."""
    m = _SLURM_CPUS.fullmatch(text.strip())
    return float(m.group(1)) if m else None


def cpu_value(cores: float | None, own: str) -> str:
    """A CPU allocation's fact: the cores (``2 cores``, ``0.5 cores``, ``1 core``), then the
    orchestrator's own text in brackets (``2 cores (2000m)``, ``2 cores (NanoCpus:
    2000000000)``, ``64 cores (NumCPUs=64)``), as :func:`memory_value` writes memory; the own
    text alone when it is no quantity this version reads."""
    if cores is None or cores <= 0:
        return own
    return f"{cores:g} core{'' if cores == 1 else 's'} ({own})"


def cpu_figure(value: str) -> float | None:
    """The cores of a CPU allocation's fact (what two allocations are compared by): its first
    word as a Kubernetes quantity, so ``2 cores (2000m)`` and ``2 cores (NanoCpus:
    2000000000)`` are one allocation, and so are the values summaries saved before the cores
    were written (``2000m``, ``2``, ``64 (SLURM_CPUS_ON_NODE)``). None when it reads none."""
    words = value.split()
    return k8s_bytes(words[0]) if words else None


def _norm(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def _version_of(key: str, value: str) -> str | None:
    v = value.strip()
    return None if v.lower() in _NOT_FOUND else v


class Facts:
    """The facts of one text as they are read: first value of a key wins, with its line."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.facts: dict[str, Cited] = {}

    def put(self, key: str, value: str | None, line: int) -> None:
        if value is not None and value != "" and key not in self.facts:
            self.facts[key] = Cited(value, self.file, line)


def read_check_env(file: str, lines: Iterable[str]) -> dict[str, Cited]:
    """The facts of ``sglang.check_env`` output (CUDA, ROCm), its topology block included."""
    out = Facts(file)
    gpus: list[tuple[str, int, int]] = []  # name, count, line
    topo: list[tuple[str, int]] | None = None
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if topo is not None:  # the matrix runs until the next ``Key: value`` line
            m = _KEYVAL.match(line)
            if m and m.group("key") in CHECK_ENV_KEYS:
                topo_facts(out, topo)
                topo = None
            else:
                topo.append((line, no))
                continue
        m = _KEYVAL.match(line)
        if not m:
            continue
        key, value = m.group("key").strip(), (m.group("value") or "").strip()
        if key in _TOPOLOGY_KEYS:
            if value:  # a matrix given in a few words ("4x B300, NV18 all-to-all"): its link names
                _classify(out, _LINK_WORD.findall(value), 0, no)
            else:
                topo = []
            continue
        g = _GPU_KEY.match(key)
        if g:
            gpus.append((value, len(g.group(1).split(",")), no))
        elif _CC_KEY.match(key):
            out.put("compute_capability", value, no)
        elif key == "Python":
            out.put("python", value.split()[0] if value else None, no)
        elif key == "PyTorch":
            out.put("torch", value, no)
        elif key == "NVCC":
            r = _CUDA_RELEASE.search(value)
            out.put("cuda", r.group(1) if r else None, no)
        elif key == "HIPCC":
            out.put("rocm", value.removeprefix("HIP version:").strip() or None, no)
        elif key in ("CUDA Driver Version", "CUDA Driver Versions", "ROCM Driver Version", "Ascend Driver Version"):
            out.put("driver", _version_of(key, value), no)
        elif key == "Hypervisor vendor":
            out.put("hypervisor", value, no)
        elif key == "ulimit soft":
            out.put("ulimit_soft", value, no)
        elif _norm(key) in PACKAGES:
            out.put(PACKAGES[_norm(key)], _version_of(key, value), no)
    if topo is not None:
        topo_facts(out, topo)
    if gpus:
        gpu_facts(out, gpus)
    return out.facts


def gpu_facts(out: Facts, gpus: list[tuple[str, int, int]]) -> None:
    """``gpu`` (one model, or each with its count) and ``gpu_count``, cited at the first GPU line."""
    counts: dict[str, int] = {}
    for name, n, _ in gpus:
        counts[name] = counts.get(name, 0) + n
    line = gpus[0][2]
    out.put("gpu", next(iter(counts)) if len(counts) == 1 else ", ".join(f"{k} x{n}" for k, n in counts.items()),
            line)
    out.put("gpu_count", str(sum(counts.values())), line)


def topo_facts(out: Facts, rows: list[tuple[str, int]]) -> None:
    """``topology`` from an ``nvidia-smi topo -m`` matrix: the links between GPU pairs,
    ``NVLink (NV18)`` when every pair has NVLink, ``NVLink between some pairs (NV12; PIX, SYS)``
    when only some do, else ``PCIe only (PHB, SYS)``."""
    links: list[str] = []
    first = 0
    gpus = 0
    width = 0  # GPU columns of the header: the NIC columns after them are not GPU links
    for text, no in rows:
        if text[:1].isspace() and _TOPO_HEAD.match(text.split()[0] if text.split() else ""):
            width = width or sum(1 for c in text.split() if _TOPO_HEAD.fullmatch(c))  # the header, indented
            continue
        m = _TOPO_ROW.match(text)
        if not m:
            continue
        cells = m.group(2).split()[:width or None]
        if "X" not in cells and cells.count("0") != 1:  # the row's own cell: X (nvidia-smi) or 0 (rocm-smi)
            continue
        first = first or no
        gpus += 1
        for c in cells:
            if not _LINK.match(c):
                break
            if not c.isdigit() and c != "X":
                links.append(c)
    if first:
        _classify(out, links, gpus, first)


def _classify(out: Facts, links: list[str], gpus: int, line: int) -> None:
    """The ``topology`` fact of the links a matrix names."""
    fast = sorted({c for c in links if c.startswith(("NV", "HCCS")) or c in ("XGMI", "SIO")})
    pcie = sorted({c for c in links if c in _PCIE_ORDER}, key=_PCIE_ORDER.index)
    name = "XGMI" if fast == ["XGMI"] else "NVLink" if all(c.startswith("NV") for c in fast) else ", ".join(fast)
    if not links:
        value = "one GPU" if gpus == 1 else "not shown"
    elif fast and not pcie:
        value = f"{name} ({', '.join(fast)})" if name == "NVLink" else name  # XGMI; Ascend's SIO, HCCS
    elif fast:
        value = f"{name} between some pairs ({', '.join(fast)}; {', '.join(pcie)})"
    else:
        value = f"PCIe only ({', '.join(pcie) or 'PCIE'})"
    out.put("topology", value, line)


_PCIE_ORDER = ["PIX", "PXB", "PHB", "NODE", "SOC", "SYS"]


def read_nvidia_smi(file: str, lines: Iterable[str]) -> dict[str, Cited]:
    """The driver, its CUDA version and the GPUs of ``nvidia-smi``'s table."""
    out = Facts(file)
    gpus: list[tuple[str, int, int]] = []
    for no, raw in enumerate(lines, 1):
        m = _SMI_HEAD.search(raw)
        if m:
            out.put("driver", m.group(2), no)
            out.put("driver_cuda", m.group(3), no)
            continue
        g = _SMI_GPU.match(raw)
        if g:
            gpus.append((g.group(2).strip(), 1, no))
    if gpus:
        gpu_facts(out, gpus)
    return out.facts


def read_topology(file: str, lines: Iterable[str]) -> dict[str, Cited]:
    """``topology`` of an ``nvidia-smi topo -m`` text on its own."""
    out = Facts(file)
    topo_facts(out, [(raw.rstrip("\r\n"), no) for no, raw in enumerate(lines, 1)])
    return out.facts


def read_pip(file: str, lines: Iterable[str]) -> dict[str, Cited]:
    """Versions of the packages :data:`PACKAGES` names, from ``pip freeze``, ``pip list`` or
    ``pip show``."""
    out = Facts(file)
    name = None
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        show = _PIP_SHOW.match(line)
        if show:
            if show.group(1) == "Name":
                name = show.group(2)
            elif name is not None and _norm(name) in PACKAGES:
                out.put(PACKAGES[_norm(name)], show.group(2), no)
            continue
        m = _PIP_FREEZE.match(line) or _PIP_LIST.match(line)
        if m and _norm(m.group(1)) in PACKAGES:
            out.put(PACKAGES[_norm(m.group(1))], m.group(2), no)
    return out.facts


def is_check_env(lines: list[str]) -> bool:
    keys = 0
    for line in lines[:80]:
        m = _KEYVAL.match(line.rstrip("\r\n"))
        if m and (m.group("key") in CHECK_ENV_KEYS or _GPU_KEY.match(m.group("key"))):
            keys += 1
    return keys >= 3


def is_nvidia_smi(lines: list[str]) -> bool:
    return any(_SMI_HEAD.search(line) for line in lines[:40])


def is_topology(lines: list[str]) -> bool:
    rows = [line for line in lines[:80] if _TOPO_ROW.match(line) and " X " in f" {line} "]
    return bool(rows) and any(line[:1].isspace() and "GPU0" in line.split() for line in lines[:80])


def is_pip(lines: list[str]) -> bool:
    """``pip freeze`` (three ``name==version`` lines or more), ``pip show`` (``Name:`` then
    ``Version:``), or ``pip list`` (most lines two columns: a name and a version)."""
    body = [line.strip() for line in lines[:400] if line.strip()]
    if sum(1 for line in body if _PIP_FREEZE.match(line)) >= 3:
        return True
    if any(_PIP_SHOW.match(a) and _PIP_SHOW.match(b) and a.lstrip("(").startswith("Name")
           and b.startswith("Version") for a, b in zip(body, body[1:])):
        return True
    listed = sum(1 for line in body if _PIP_LIST.fullmatch(line) and len(line.split()) <= 3)
    return listed >= 5 and listed >= 0.8 * len(body)
