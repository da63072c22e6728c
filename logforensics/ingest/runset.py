"""Which files make one run: a file, several files, a directory or a quoted glob.

A launch that spans machines writes one log per node (Slurm's ``%x_%j_node$SLURM_NODEID.out``,
one ``kubectl logs`` per LeaderWorkerSet pod, ``node0.log`` / ``node1.log``), and a
prefill/decode launch one per server plus the router's. Every command that takes a run
turns its arguments into the run's files here, once, and labels each file with the node
its name gives (``node1``, ``node_rank1``, ``job_42_node1``; with several files and no
node number, the name itself, as for a pod: ``sglang-0-1``). A label that only the text
gives (``--node-rank 1``, ``node_rank=1``, a Ray ``ip=``) is found when the file is read
(``model.nodes``).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..artefacts.sniff import is_artefact, sniff, walk
from ..model.nodes import NodeSummary, node_label_of_args
from ..read.fastpath import LineClassifier
from ..read.segments import LOCAL_PROC_WRAPPER
from .batch import read_file
from .files import InputError, blocks
from .live import LiveRun

#: What a directory's log files are called (each also compressed).
LOG_SUFFIXES = (".log", ".out", ".err")
COMPRESSED_SUFFIXES = ("", ".gz", ".bz2", ".xz", ".zst")
_NAMES = tuple(s + c for s in LOG_SUFFIXES for c in COMPRESSED_SUFFIXES)
_GLOB_CHARS = re.compile(r"[*?\[]")
#: A node number in a file name: ``node1``, ``node_1``, ``node-rank1``, ``node_rank_1``.
_NODE = re.compile(r"(?<![a-z0-9])node(?:[_-]?rank)?[_-]?(\d+)(?![0-9])", re.IGNORECASE)
_STRIP = re.compile(r"(?:\.(?:log|out|err))?(?:\.(?:gz|bz2|xz|zst))?$", re.IGNORECASE)


@dataclass(frozen=True)
class LogFile:
    """One file of a run and the node its name gives (None: the name gives none)."""

    path: str
    node: str | None


@dataclass(frozen=True)
class RunFiles:
    """The files of one run, in node order, and the words that named it; ``artefacts``: the
    files beside the logs that their content shows to be an environment, an orchestrator's
    records or a dump (``artefacts.sniff``), found under a directory or given."""

    source: str
    files: tuple[LogFile, ...]
    artefacts: tuple[str, ...] = ()

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def single(self) -> bool:
        return len(self.files) == 1


def node_from_name(path: str) -> str | None:
    """``node1`` for ``node1.log``, ``job_42_node1.out`` or ``node_rank1.log.gz``; else None."""
    m = _NODE.search(os.path.basename(path))
    return f"node{int(m.group(1))}" if m else None


#: Kubernetes' own log paths: ``/var/log/pods/NS_POD_UID/CONTAINER/0.log`` and
#: ``/var/log/containers/POD_NS_CONTAINER-ID.log`` (the CRI format inside).
_POD_PATHS = (re.compile(r"/pods/[^/_]+_(?P<pod>[^/_]+)_[^/]+/[^/]+/\d+\.log(?:\.\d+)?(?:\.gz)?$"),
              re.compile(r"/containers/(?P<pod>[^/_]+)_[^/_]+_[^/]+\.log$"))


def pod_from_path(path: str) -> str | None:
    """The pod a kubelet log file belongs to, from its path (the file itself is ``0.log``)."""
    p = os.path.abspath(path).replace(os.sep, "/")
    for rx in _POD_PATHS:
        m = rx.search(p)
        if m:
            return m.group("pod")
    return None


def file_stem(path: str) -> str:
    """The file's name without its log and compression suffixes: a pod name, a role."""
    return _STRIP.sub("", os.path.basename(path)) or os.path.basename(path)


def is_log_name(name: str) -> bool:
    """A name a directory's log files have: ``*.log``, ``*.out``, ``*.err`` (compressed or not)."""
    return name.lower().endswith(_NAMES) and not name.startswith(".")


def run_files(args: Sequence[str], artefacts: Sequence[str] = ()) -> RunFiles:
    """The run that ``args`` name: each a file, ``-`` (standard input), a directory (its log
    files, and the artefacts anywhere under it) or a glob; ``artefacts``: files or
    directories given as artefacts (``--artifacts``). A file whose content is an artefact
    is one, whatever its name. Raises InputError with a one-line reason when one names
    nothing."""
    if not args:
        raise InputError("no log given")
    paths: list[str] = []
    beside: list[str] = []
    for arg in artefacts:
        if not os.path.exists(arg):
            raise InputError(f"{arg}: no such file")
        beside += walk(arg) if os.path.isdir(arg) else [arg]
    for arg in args:
        if arg == "-":
            found = ["-"]
        elif os.path.isdir(arg):
            under = walk(arg)
            beside += [p for p in under if is_artefact(p)]
            top = os.path.dirname(os.path.join(arg, "x"))
            found = sorted(p for p in under if os.path.dirname(p) == top and is_log_name(os.path.basename(p))
                           and p not in beside)
            if not found:
                raise InputError(f"{arg}: a directory without log files ({', '.join('*' + s for s in LOG_SUFFIXES)})")
        elif not os.path.lexists(arg) and _GLOB_CHARS.search(arg):
            found = sorted(p for p in glob.glob(arg) if os.path.isfile(p))
            if not found:
                raise InputError(f"{arg}: no file matches")
        elif not os.path.lexists(arg):
            raise InputError(f"{arg}: no such file")
        else:
            found = [arg]
        for p in found:
            if p != "-" and os.path.isfile(p) and is_artefact(p):
                beside.append(p)
            elif p not in paths:
                paths.append(p)
    if not paths:
        raise InputError(f"{beside[0]}: an artefact ({sniff(beside[0])}), not a server log; give the log too")
    if paths.count("-") and len(paths) > 1:
        raise InputError("standard input ('-') cannot be one of several files of a run")
    source = args[0] if len(args) == 1 else " ".join(args)
    return RunFiles(source, labelled(paths), tuple(dict.fromkeys(beside)))


def labelled(paths: Sequence[str]) -> tuple[LogFile, ...]:
    """The files with their node labels, in node order (files that need not exist yet)."""
    named = [node_from_name(p) or pod_from_path(p) for p in paths]
    if len(paths) > 1:
        named = [n or file_stem(p) for n, p in zip(named, paths)]
        named = _unique(named, list(paths))
    return tuple(sorted((LogFile(p, n) for p, n in zip(paths, named)), key=lambda f: _node_order(f)))


def _unique(labels: list[str | None], paths: list[str]) -> list[str | None]:
    """Two files that name the same node (``a/node1.log``, ``b/node1.log``) keep their names."""
    seen: dict[str | None, int] = {}
    for n in labels:
        seen[n] = seen.get(n, 0) + 1
    return [file_stem(p) if seen[n] > 1 else n for n, p in zip(labels, paths)]


def _node_order(f: LogFile) -> tuple[int, int, str]:
    m = re.fullmatch(r"node(\d+)", f.node or "")
    return (0, int(m.group(1)), f.path) if m else (1, 0, f.path)


#: Bytes of a file's head read to learn its node when its name gives none.
PROBE_BYTES = 256 << 10


def probe_node(path: str, memo: LineClassifier | None = None) -> str | None:
    """The node a file's head names: ``node_rank`` in ``server_args`` or ``--node-rank`` in
    the launch command (``node<N>``), else the one node that wrappers on its lines name, unless
    Ray's wrappers show processes of its driver's node too (``(X pid=N)``, without ``ip=``).
    ``memo``: a classifier whose learned line shapes the probe shares (``read_file``)."""
    return _probe(path, memo)[0]


def _probe(path: str, memo: LineClassifier | None) -> tuple[str | None, LiveRun | None]:
    """:func:`probe_node`, and the probe's run when its head was the whole file: read to
    its end, closed, with its warnings, as ``read_file`` would have read it without a node."""
    if path == "-":
        return None, None
    run = LiveRun(path)
    if memo is not None:
        run.parser.classifier.share_memo(memo)
    wrapped: set[str] = set()
    unnamed = False  # lines of a Ray process on the driver's node: a node no wrapper names
    read = 0
    whole = None
    try:
        for block in blocks(path, warn=run.parser.stats.warnings.append):
            unnamed = unnamed or LOCAL_PROC_WRAPPER.search(block) is not None
            for ev in run.feed(block):
                if ev.node:
                    wrapped.add(ev.node)
            read += len(block)
            if read >= PROBE_BYTES:  # a start-up record that waits for the next line is read too
                wrapped.update(ev.node for ev in run.settle() if ev.node)
                break
        else:  # the whole file: what the parser still holds (bytes that wait for its verdict on text)
            wrapped.update(ev.node for ev in run.close() if ev.node)
            whole = run
    except InputError:
        return None, None
    config = run.model.config  # what node_label reads of a summary, without summarising
    label = node_label_of_args(None, config.server_args, config.launch_args)
    if label:
        return label, whole
    return (wrapped.pop() if len(wrapped) == 1 and not unnamed else None), whole


def node_summary(live: LiveRun, node: str | None, file: str) -> NodeSummary:
    """A file read to its end (``live``) as one part of a run, for ``model.nodes.combine``."""
    return NodeSummary(node=node, file=file, summary=live.summary(), role=live.pd.role,
                       rank_nodes=dict(live.rank_nodes), pd=live.pd.to_dict())


def resolve_node(f: LogFile, memo: LineClassifier | None = None) -> str | None:
    """A file's node: from its name, else from its head (:func:`probe_node`), else the
    label ``run_files`` gave it (its name, in a run of several files)."""
    return _resolve(f, memo)[0]


def _resolve(f: LogFile, memo: LineClassifier | None) -> tuple[str | None, LiveRun | None]:
    """:func:`resolve_node`, and the probe's run of the whole file when it read one."""
    if f.node and (node_from_name(f.path) or pod_from_path(f.path)):
        return f.node, None
    node, whole = _probe(f.path, memo)
    return node or f.node, whole


def read_run(run: RunFiles, *, progress: Callable[[int], None] | None = None,
             memo: LineClassifier | None = None) -> list[NodeSummary]:
    """Each file of the run read alone (``read_file``: the one parser and run model), with
    its node: from its name, else from its head (:func:`probe_node`), else its name. The
    probes and reads share one memo of line shapes (``memo``, or a new one); a file the
    probe read whole, and which names no node, is not read again."""
    memo = memo if memo is not None else LineClassifier(None)
    parts = []
    for f in run.files:
        node, whole = _resolve(f, memo)
        # a file no longer than the probe's head, of no node, was read whole by the probe:
        # the same run as reading it again (the event path; the bulk path is proven equal)
        if whole is not None and node is None and progress is None:
            live = whole
        else:
            live = read_file(f.path, progress=progress, node=node, memo=memo)
        parts.append(node_summary(live, node, f.path))
    return parts
