"""How the run was configured: ``server_args``, the launch command, environment, versions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event
from .defaults import defaults_table
from .registry import handles
from .serverargs import args_from_command, env_from_command, parse_server_args

if TYPE_CHECKING:
    from .run import RunModel


@dataclass
class Config:
    """Settings the log shows; the first dump or command wins, environment adds up."""

    server_args: dict[str, Any] = field(default_factory=dict)
    server_args_form: str | None = None
    server_args_seen: bool = False
    launch_command: str | None = None
    launch_args: dict[str, Any] = field(default_factory=dict)
    #: the launch command's last line ended with a backslash: the next indented line goes on with it
    continued: bool = False
    env: dict[str, str] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)

    def merge(self, later: Config) -> None:
        """First values kept (server_args, launch command and args, versions); the
        environment takes later assignments."""
        if not self.server_args and later.server_args_seen:
            self.server_args, self.server_args_form = later.server_args, later.server_args_form
        self.server_args_seen = self.server_args_seen or later.server_args_seen
        if self.launch_command is None:  # (and whether it goes on past the later part's end)
            self.launch_command, self.continued = later.launch_command, later.continued
        self.env.update(later.env)
        if not self.launch_args:
            self.launch_args = later.launch_args
        for key, value in later.versions.items():
            self.versions.setdefault(key, value)


@handles("server_args")
def on_server_args(m: RunModel, ev: Event) -> None:
    c = m.config
    c.server_args_seen = True
    if not c.server_args:
        c.server_args, c.server_args_form = parse_server_args(ev.fields.get("raw", ""))
        m.notices.add("server_args", ev)


#: Commands whose options are the server's settings (ServerArgs): the server, and the
#: benchmarks that run the engine in their own process. A client benchmark
#: (``sglang.bench_serving``) has options of its own (``--num-prompts``, ``--request-rate``).
SERVER_COMMAND = re.compile(r"sglang\.(launch_server|bench_one_batch|bench_offline_throughput)(?![\w.])"
                            r"|sglang/launch_server\.py|(?<![\w/])sglang serve(?!\w)")


@handles("launch_command")
def on_launch_command(m: RunModel, ev: Event) -> None:
    cmd = ev.fields.get("command") or ev.text
    if not SERVER_COMMAND.search(cmd):
        m.notices.add("client_command", ev)  # a client's command line: not the server's settings
        return
    _server_command(m, ev, cmd)


@handles("pyspy_process")
def on_pyspy_process(m: RunModel, ev: Event) -> None:
    """py-spy's dump of a process begins with its command line ("Process 544105: python3 -m
    sglang.launch_server --tp-size 16 ..."): where it is the server's, its launch command."""
    title = str(ev.fields.get("title") or "")
    if SERVER_COMMAND.search(title):
        _server_command(m, ev, title)


def _server_command(m: RunModel, ev: Event, cmd: str) -> None:
    c = m.config
    if c.launch_command is None:
        c.launch_command = _unwrapped(cmd)
        c.continued = _goes_on(cmd)
        m.notices.add("launch_command", ev)
    c.env.update(env_from_command(_unwrapped(cmd)))
    if not c.launch_args:
        c.launch_args = launch_flags(_unwrapped(cmd))


def _goes_on(line: str) -> bool:
    """Whether a shell line ends with a backslash: the command goes on on the next line."""
    return line.rstrip().endswith("\\")


def _unwrapped(line: str) -> str:
    """A command line without the backslash that continues it."""
    return line.rstrip().removesuffix("\\").rstrip() if _goes_on(line) else line


#: Kinds whose handler acts only while the model waits for them (the indented lines that go on
#: with a launch command ending in a backslash): the bulk reader takes them as passive lines
#: otherwise (``columns.ready_table``), and the clock does not count them (``run._CLOCKED``).
AWAITED = frozenset({"indented"})


@handles("indented")
def on_indented(m: RunModel, ev: Event) -> None:
    """An indented line right after a launch command's line that ends with a backslash goes on
    with the command (a launch script's options one per line: "python3 -m sglang.launch_server \\",
    "    --model-path ... \\", ...): its settings are the command's."""
    c = m.config
    if not c.continued or c.launch_command is None:
        return
    c.launch_command = f"{c.launch_command} {_unwrapped(ev.text.strip())}"
    c.continued = _goes_on(ev.text)
    c.env.update(env_from_command(c.launch_command))
    c.launch_args = launch_flags(c.launch_command)


@handles("env")
def on_env(m: RunModel, ev: Event) -> None:
    if ev.fields.get("name"):
        m.config.env[ev.fields["name"]] = (ev.fields.get("value") or "").strip("'\"")
        m.notices.add("env", ev)  # the line a setting read from the log rests on


@handles("nccl_version", "nccl_version_native")
def on_nccl_version(m: RunModel, ev: Event) -> None:
    version = ev.fields.get("version")
    if version:
        m.config.versions.setdefault("nccl", version.split("+")[0])
        if "+cuda" in version:
            m.config.versions.setdefault("cuda", version.split("+cuda")[1])


@handles("sglang_version_banner")
def on_sglang_version(m: RunModel, ev: Event) -> None:
    """The SGLang version a container's banner names (NVIDIA's: "SGLang Version 0.5.11+05fb6a52")."""
    if ev.fields.get("version"):
        m.config.versions.setdefault("sglang", ev.fields["version"])
        m.notices.add("sglang_version", ev)  # the line the version rests on


@handles("custom_ar_disabled", "unbalanced_memory", "dp_attention_adjust")
def on_notable(m: RunModel, ev: Event) -> None:
    """Records kept as evidence for the rules, under their own kind."""
    m.notices.add(ev.kind, ev)


@handles("retract")
def on_retract(m: RunModel, ev: Event) -> None:
    """A retraction: evidence for the rules, and the pool that bound it (``model.pools``). The
    scheduler retracts requests of a decode batch (``update_running_batch``): the rank serves
    (``PHASE_OF_KIND``), and the line is a served batch's."""
    m.timeline.last_serving_line = ev.line
    m.notices.add(ev.kind, ev)
    m.pools.retraction(ev)


def launch_flags(command: str) -> dict[str, Any]:
    """A launch command's options (``flags``), without a last option that takes a value and has
    none on the line (``--por`` at a terminal's hard wrap of ``--port 8998``, or a command cut
    there): SGLang's argparse would have refused it, so its value is beyond the line, not True.
    An option is read as argparse does, by its name or a unique prefix of one (``allow_abbrev``),
    among the ``ServerArgs`` fields of the versions in ``serverargs_defaults.tsv``."""
    words = args_from_command(command)
    out = flags(words)
    last = words[-1] if words else ""
    if last.startswith("--") and "=" not in last:
        key = last[2:].replace("-", "_")
        default = _server_field_default(key)
        if out.get(key) is True and default is not None and default not in ("True", "False"):
            del out[key]
    return out


def _server_field_default(key: str) -> str | None:
    """The declared default of the ServerArgs field an option names, by its name or a unique
    prefix of one (argparse's abbreviation), or None when it names none."""
    fields: dict[str, str] = {}
    for table in defaults_table().values():
        fields.update(table)
    if key in fields:
        return fields[key]
    named = [f for f in fields if f.startswith(key)]
    return fields[named[0]] if len(named) == 1 else None


def flags(words: list[str]) -> dict[str, Any]:
    """``--tp 8 --enable-x --cuda-graph-bs 1 2 4`` -> {"tp": 8, "enable_x": True,
    "cuda_graph_bs": [1, 2, 4]}: the launch command's options (an option of several values,
    argparse's ``nargs="+"``, is a list; a shell's operators and redirections end a value)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--") and len(word) > 2:
            key, eq, value = word[2:].partition("=")
            key = key.replace("-", "_")
            if eq:
                out[key] = _scalar(value)
            else:
                j = i + 1
                while j < len(words) and not words[j].startswith("--") and not _SHELL.search(words[j]):
                    j += 1
                values = [_scalar(w) for w in words[i + 1:j]]
                out[key] = True if not values else values[0] if len(values) == 1 else values
                i = j - 1
        i += 1
    return out


#: A shell's word that ends an option's values: an operator or a redirection (``|``, ``&&``,
#: ``2>&1``, ``> server.log``).
_SHELL = re.compile(r"^(?:[|&;]+|\d*[<>].*)$")


def _scalar(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text
