"""The one redactor of every output that leaves the machine (``bundle``; ``--redact`` on
``diff`` and ``summary``): one table of patterns with their labels, used by all of them.

Values are replaced by numbered placeholders (``<IP-address-2>``): the same value gets the
same number everywhere in one report, so a reader can still follow one host or key across
lines. Hostnames as NCCL, c10d and launchers print them (``node-17:123:456 [0] NCCL INFO``,
``[host-a12:rank3]``, ``HOSTNAME=...``) are short names that no pattern can tell from a word:
:meth:`Redactor.learn` collects them (and the model paths of the launch) from the whole
report first, and then every occurrence is replaced.

A log is untrusted text, so the time is linear in its length: each rule is searched once
over the text; a rule begins with a literal, or a look-behind lets it begin only where a run
of its characters begins, and what must come before a required part is bounded (``{0,64}``)
or cannot overlap it, so no start is tried twice over the same characters. The rules' spans
are merged by precedence (a rule listed earlier keeps its span), so a prompt or a private key
is replaced whole even when it holds an address.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_SECRET_WORDS = ("secret", "token", "key", "password", "passwd", "pwd", "credential", "credentials", "auth",
                 "signature", "sig", "cookie", "keyid", "key_id", "key-id")
#: A name that ends in one of the words: checked behind the name, which is matched as a whole run.
_ENDS_SECRET = "(?:" + "|".join(f"(?<={w})" for w in _SECRET_WORDS) + ")"
#: Names that mean a secret even before an unquoted ``:`` (``password: x``); ``#token: 12`` is
#: a count in SGLang's batch lines, so ``token`` alone needs ``=`` or quotes.
_STRONG_WORDS = ("secret", "password", "passwd", "api_key", "apikey", "api-key", "access_key", "secret_key",
                 "private_key", "credential", "credentials")
_ENDS_STRONG = "(?:" + "|".join(f"(?<={w})" for w in _STRONG_WORDS) + ")"
#: A whole run of name characters, taken at once (a look-ahead does not backtrack): a name that
#: is not followed by its separator costs one scan, not one per length.
_NAME = r"(?<![A-Za-z0-9_.-])(?=(?P<n>[A-Za-z0-9_.-]{1,64}))(?P=n)"
_VALUE = r"""(?P<v>'[^'\n]*'?|"[^"\n]*"?|[^\s'",;&)}\]<]+)"""
_PY_STR = r"""'(?:[^'\\\n]|\\.)*'?|"(?:[^"\\\n]|\\.)*"?"""
_WORD = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


@dataclass(frozen=True)
class Rule:
    """One kind of private text: the match's group ``v`` is replaced, the rest is context,
    kept. ``check(text, start, end)`` gives the span to replace, or None to refuse it;
    ``prompt``: request text, kept under ``--keep-prompts``."""

    label: str
    pattern: re.Pattern[str]
    prompt: bool = False
    check: Callable[[str, int, int], tuple[int, int] | None] | None = None
    #: groups of lower-case strings: the rule can match only where each group has one in the
    #: text (a ``str.find`` is far cheaper than a search that tries every position)
    needs: tuple[tuple[str, ...], ...] = ()


def _rule(label: str, pattern: str, *needs: tuple[str, ...], prompt: bool = False,
          check: Callable[[str, int, int], tuple[int, int] | None] | None = None, flags: int = 0) -> Rule:
    return Rule(label, re.compile(pattern, flags), prompt, check, needs)


_WORDS = tuple(sorted({w.replace("_", "").replace("-", "") for w in ("secret", "token", "key", "pass", "pwd",
                                                                         "credential", "auth", "sig", "cookie")}))
_STRONG = ("secret", "pass", "key", "credential")


def _ipv4(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Octets up to 255, not loopback or 0.0.0.0."""
    if text.startswith(("127.", "0.0.0.0"), start) or max(map(int, text[start:end].split("."))) > 255:
        return None
    return start, end


def _base64(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Random bytes' base64 (upper and lower case and digits, few slashes), not a long word or path."""
    value = text[start:end]
    ok = (any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)
          and value.count("/") * 16 <= len(value))
    return (start, end) if ok else None


_LOWER_RUN = re.compile(r"[a-z]+")


def _base64_tail(text: str, start: int, end: int) -> tuple[int, int] | None:
    """A line's last word as a private key's last line is (random base64), not a name in
    CamelCase (``CompressedTensorsWNA16MarlinMoEMethod``): a name's lower-case runs are words,
    3 letters long or more on average; random base64's are under 2."""
    runs = _LOWER_RUN.findall(text, start, end)
    if runs and sum(map(len, runs)) >= 3 * len(runs):
        return None
    return _base64(text, start, end)


def _ipv6_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The address in a run of hex digits, colons and dots (``[0]eth0:fe80::1%eth0`` gives
    its run from ``0:``; the interface's digit is dropped), or None: not an address, loopback
    or ``::``, or the front of a C++ name (``c10d::ProcessGroupNCCL``)."""
    if end < len(text) and text[end] in _WORD:
        return None
    value = text[start:end].rstrip(".")
    end = start + len(value)
    if start and text[start - 1] in _WORD and ":" in value:  # eth0:fe80::1: the run began inside a name
        cut = value.index(":") + 1
        start, value = start + cut, value[cut:]
    address = value.split("%")[0]
    if ("::" not in address and address.count(":") < 6) or sum(1 for g in address.split(":") if g) < 2:
        return None  # a time (12:01:03), a pid:tid pair
    try:
        ip = ipaddress.IPv6Address(value)
    except ValueError:
        return None
    return None if ip.is_loopback or ip.is_unspecified else (start, end)


#: The table, in order of precedence: where two rules' spans overlap, the one listed first
#: is kept (a prompt holding an address is one prompt; a key that is a JWT is one JWT), but
#: a longer span that holds another whole replaces it.
RULES: tuple[Rule, ...] = (
    _rule("private key", r"(?P<v>-----BEGIN[A-Z0-9 ]{0,32}PRIVATE KEY-----[A-Za-z0-9+/=\s\\]*"
                         r"(?:-----END[A-Z0-9 ]{0,32}PRIVATE KEY-----)?)", ("private key-----",)),
    # Prompts and completions: request logs (text=, prompt=, messages=, 'text': in a
    # response), token-id lists.
    _rule("request text", r"(?<![A-Za-z0-9_])(?P<n>text|prompt|prompts|content|input_text|output_text|generated_text"
                          r"|messages|completion|completions)['\"]?[ \t]{0,4}[=:][ \t]{0,4}(?P<v>" + _PY_STR
                          + r"""|\[(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|[^\]'"\n])*\]?)""", ("text", "prompt", "content", "messages", "completion"), prompt=True),
    _rule("request text", r"(?<![A-Za-z0-9_])(?P<n>(?:[A-Za-z]{1,20}_){0,3}(?:input|output|prompt|completion)_"
                          r"(?:token_)?ids|input_embeds)['\"]?[ \t]{0,4}[=:][ \t]{0,4}(?P<v>\[[\[\]0-9, \t.]*)", ("_ids", "input_embeds"),
          prompt=True),
    _rule("JWT", r"(?<![A-Za-z0-9_-])(?P<v>eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)", ("eyj",)),
    _rule("AWS access key id", r"(?<![A-Za-z0-9])(?P<v>(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)"
                               r"[A-Z0-9]{16})(?![A-Za-z0-9])", ("akia", "asia", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "abia", "acca")),
    _rule("GCP API key", r"(?<![A-Za-z0-9_-])(?P<v>AIza[0-9A-Za-z_-]{35})", ("aiza",)),
    _rule("Slack token", r"(?<![A-Za-z0-9_-])(?P<v>xox[abposre]-[A-Za-z0-9-]{8,}|xapp-[A-Za-z0-9-]{8,})", ("xox", "xapp-")),
    _rule("Slack token", r"(?P<v>hooks\.slack\.com/services/[A-Za-z0-9/_-]+)", ("hooks.slack.com",)),
    _rule("API key or token", r"(?<![A-Za-z0-9_-])(?P<v>sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{16,}"
                              r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
                              r"|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,})", ("sk-", "hf_", "gh", "glpat-", "npm_", "pypi-")),
    # name=value: an environment assignment, a server_args field, a query parameter
    # (X-Amz-Signature, sig), a connection string's AccountKey, a command-line flag.
    _rule("secret", _NAME + _ENDS_SECRET + r"['\"]?[ \t]{0,4}=[ \t]{0,4}" + _VALUE, ("=",), _WORDS, flags=re.IGNORECASE),
    _rule("secret", r"['\"]" + _NAME + _ENDS_SECRET + r"['\"][ \t]{0,4}:[ \t]{0,4}" + _VALUE, (":",), _WORDS, flags=re.IGNORECASE),
    _rule("secret", _NAME + _ENDS_STRONG + r"[ \t]{0,4}:[ \t]{1,4}" + _VALUE, (":",), _STRONG, flags=re.IGNORECASE),
    _rule("secret", r"(?<![A-Za-z0-9_-])(?=(?P<n>--[A-Za-z0-9-]{1,64}))(?P=n)" + _ENDS_SECRET
          + r"[ \t]{1,4}(?P<v>[^\s'\"<-][^\s'\"]*)", ("--",), _WORDS, flags=re.IGNORECASE),
    _rule("secret", r"(?P<n>(?:Bearer|Basic|token))[ \t]{1,4}(?P<v>[A-Za-z0-9._~+/=-]{8,})", ("bearer", "basic", "token"), flags=re.IGNORECASE),
    _rule("password", r"://[^\s/:@'\"<]{0,64}:(?=(?P<v>[^\s/@'\"<]{1,128}))(?P=v)@", ("://",), ("@",)),
    _rule("email address", r"(?<![A-Za-z0-9._%+-])(?P<v>(?=(?P<local>[A-Za-z0-9._%+-]{1,64}))(?P=local)@[A-Za-z0-9-]{1,63}"
                           r"(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24})(?![A-Za-z0-9-])", ("@",)),
    _rule("home directory", r"/(?:home|Users)/(?P<v>[^/\s'\",)<]+)", ("/home/", "/users/")),
    _rule("home directory", r"[A-Za-z]:\\{1,2}Users\\{1,2}(?P<v>[^\\\s'\",)<]+)", ("users\\",)),
    _rule("home directory", r"(?<![\w.-])(?P<v>/root)(?=/)", ("/root/",)),
    # where a Python environment was made outside a home directory (a cluster's group or scratch
    # space: "/groups/<group>/<user>/proj/.venv/lib/python3.12/site-packages/..."; an environment of
    # any name is the directory that holds lib/pythonX.Y/site-packages): the directories before it
    # name people; a system prefix (/usr, /opt, an image's /sgl-workspace) does not
    _rule("environment directory", r"(?<![\w./>~-])(?P<v>/(?!(?:usr|opt|sgl-workspace|root|home|Users|tmp|workspace|app"
                                   r"|var|etc|lib|lib64|bin|sbin|proc|sys|dev|srv|snap)/)[^\s'\"<>:,()\[\]]{1,200}?)"
                                   r"(?=/(?:\.?venv|\.?env|\.conda|conda|miniconda3|anaconda3|micromamba|mambaforge"
                                   r"|miniforge3)/|/[^/\s'\"<>:,()\[\]]{1,100}/lib/python\d\.\d{1,2}/(?:site|dist)-packages/)",
          ("venv/", "env/", "conda", "micromamba", "mambaforge", "miniforge", "-packages/")),
    _rule("hostname", r"(?<![A-Za-z0-9.-])(?P<v>[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9-]{1,63}){0,8}"
                      r"\.(?:svc\.cluster\.local|cluster\.local|internal|local|corp|lan|intranet|intra|localdomain"
                      r"|home\.arpa))(?![A-Za-z0-9-])", (".internal", ".local", ".corp", ".lan", ".intra", ".home.arpa"), flags=re.IGNORECASE),
    _rule("IP address", r"(?<![0-9A-Fa-f:.])(?P<v>[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[0-9A-Za-z_.-]{1,16})?)", (":",),
          check=_ipv6_span),
    _rule("IP address", r"(?P<v>\d(?<![\d.]\d)\d{0,2}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?!\.?\d)", (".",),
          check=_ipv4),
    # The rest of a private key whose lines were logged one by one, and any long base64 blob;
    # a key's last line is shorter than 64: a shorter run is taken where it ends its line (a
    # backslash or two may follow: a continuation, escaped or not).
    _rule("base64 data", r"(?<![A-Za-z0-9+/])(?P<v>[A-Za-z0-9+/]{64,}={0,2})", check=_base64),
    _rule("base64 data", r"""(?<![^\s\]|>)"'])(?P<v>[A-Za-z0-9+/]{24,63}={0,2})\\{0,2}[ \t]*(?:\n|$)""", check=_base64_tail),
)

#: Where a short hostname is named (learned, then replaced wherever it occurs).
_HOST = r"([A-Za-z0-9][A-Za-z0-9_.-]{0,62})"
_LEARN_HOSTS = tuple(re.compile(p) for p in (
    r"(?<![A-Za-z0-9_.-])" + _HOST + r":\d{1,10}:\d{1,10} \[\d{1,6}\]",  # NCCL: host:pid:tid [dev] NCCL INFO ...
    r"\[" + _HOST + r":rank\d{1,6}\]",
    r"\[" + _HOST + r"\]:\d{1,6}",  # c10d: [host]:port
    r"(?i)(?<![A-Za-z0-9_])(?:hostname|host_name|host|node_?name|master_addr|dist_init_addr|nccl_init_addr"
    r"|slurmd_nodename|slurm_nodelist|slurm_job_nodelist)['\"]?[ \t]{0,4}[=:][ \t]{0,4}['\"]?" + _HOST,
    r"--(?:host|hostname|dist-init-addr|master-addr|nccl-init-addr|node-name)[ =]['\"]?" + _HOST,
    r"://" + _HOST + r"(?::\d{1,6})?(?:[/\s'\")]|$)",
    # SGLang's dump folder names its host: <crash-dump-folder>/<host>/crash_dump_<ts>.pkl, crash_snapshot_...
    r"(?<![^/\\\s'\"])" + _HOST + r"[/\\]crash_(?:dump|snapshot)_",
))
_LEARN_MODEL = re.compile(r"(?:--(?:model-path|model|tokenizer-path|served-model-name)[ =]|"
                          r"(?<![A-Za-z0-9_])(?:model_path|tokenizer_path|served_model_name)['\"]?[ \t]{0,4}[=:][ \t]{0,4})"
                          r"['\"]?([^\s'\",)]+)")
_NOT_HOSTS = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "none", "null", "auto", "true", "false",
                        "rank", "port", "tcp", "http", "https", "file", "unix", "env"})
#: Words a flag or a key may be followed by in prose (this package's own advice: "check
#: --dist-init-addr and the network"): never host names, and each would be replaced everywhere.
_PROSE = frozenset({"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "if", "in", "is", "it", "its",
                    "not", "of", "on", "or", "set", "so", "that", "the", "then", "this", "to", "was", "with"})
#: Public hosts that SGLang's, PyTorch's and their libraries' own messages link to (documentation,
#: source, model hubs): not the user's, and a reader needs them to follow the link.
_PUBLIC_HOSTS = ("pytorch.org", "github.com", "githubusercontent.com", "huggingface.co", "hf.co", "python.org",
                 "nvidia.com", "sglang.ai", "readthedocs.io", "pypi.org", "ray.io", "amd.com")
_PLACEHOLDER = re.compile(r"<[A-Za-z][A-Za-z0-9-]*-\d+>")
_EMPTY = frozenset({"", "none", "null", "true", "false", "[]"})


def _label(label: str, name: str | None) -> str:
    if label != "secret":
        return label
    low = (name or "").lower()
    if low.endswith(("private_key", "privatekey", "private-key")):
        return "private key"
    if "pass" in low or "pwd" in low:
        return "password"
    if "sig" in low or "credential" in low:
        return "signature or credential"
    return "API key or token"


_SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{0,64}" + _ENDS_SECRET + r"\Z", re.IGNORECASE)


def secret_name(name: str) -> bool:
    """A setting or variable whose value is a secret by its name (``AWS_SECRET_ACCESS_KEY``,
    ``api_key``, ``AccountKey``; not ``max_total_tokens`` or ``tokenizer_path``)."""
    return _SECRET_NAME.fullmatch(name) is not None


class Redactor:
    """Replaces private text by placeholders; one instance for one report, so that a value
    has one placeholder throughout. ``learn`` everything that will be shown first, then
    ``text`` (a string) or ``tree`` (a summary, a diagnosis, its JSON form)."""

    def __init__(self, keep_prompts: bool = False) -> None:
        self.keep_prompts = keep_prompts
        self._hosts: set[str] = set()
        self._models: set[str] = set()
        self._names: dict[tuple[str, str], str] = {}
        self._numbers: Counter[str] = Counter()
        self._labels: dict[str, str] = {}
        self._rules: tuple[Rule, ...] | None = None

    # -- learning ------------------------------------------------------------------------
    def learn(self, value: Any) -> None:
        """Collect the short hostnames and model paths named anywhere in ``value`` (a string
        or a tree of them)."""
        for key, text in _strings(value):
            if key is not None:
                text = f"{key}={text}"
            if "/" in text:
                for m in _LEARN_MODEL.finditer(text):
                    path = m.group(1).rstrip(".:;")
                    if "/" in path and len(path) > 2:
                        self._models.add(path)
            for pattern in _LEARN_HOSTS:
                for m in pattern.finditer(text):
                    self._learn_host(m.group(1))
        self._rules = None

    def _learn_host(self, host: str) -> None:
        name = host.rstrip(".-_")
        low = name.lower()
        if len(name) < 2 or low in _NOT_HOSTS or low in _PROSE or not any(c.isalpha() for c in name) or _is_ip(name) \
                or any(low == h or low.endswith("." + h) for h in _PUBLIC_HOSTS):
            return
        self._hosts.add(name)

    # -- replacing -----------------------------------------------------------------------
    def text(self, text: str, shape: bool = False) -> str:
        """``text`` with every private value replaced. ``shape``: a line's shape (its numbers
        masked as ``N``, ``model.coverage.shape``), searched with the ``N`` read as a digit:
        a private key's line has no digit left in its shape."""
        if not text:
            return text
        spans: list[tuple[int, int, str]] = []
        probe = text.replace("N", "0") if shape else text
        low = probe.lower()
        for rule in self._active():
            if not all(any(n in low for n in group) for group in rule.needs):
                continue
            if rule.check is None and not rule.prompt and rule.label != "secret":  # the value as matched
                group, name, label = rule.pattern.groupindex["v"], self.placeholder, rule.label
                found = [(s, e, name(label, probe[s:e])) for s, e in (m.span(group) for m in rule.pattern.finditer(probe))]
            else:
                found = [s for m in rule.pattern.finditer(probe) if (s := self._span(rule, m)) is not None]
            if found:
                spans = _merge(spans, found, rule.label == "secret")
        if not spans:
            return text
        out: list[str] = []
        at = 0
        for start, end, placeholder in spans:
            out += (text[at:start], placeholder)
            at = end
        out.append(text[at:])
        return "".join(out)

    def tree(self, value: T) -> T:
        """A copy of ``value`` (dataclasses, mappings, lists, tuples, strings) with every string
        redacted, keys too; a value under a secret's name (``HF_TOKEN``, ``api_key``) whole."""
        out: T = _walk(value, self)
        return out

    def counts(self, shown: str) -> Counter[str]:
        """Kind -> how many placeholders ``shown`` holds (what its reader sees replaced)."""
        out: Counter[str] = Counter()
        for m in _PLACEHOLDER.finditer(shown):
            label = self._labels.get(m.group(0))
            if label:
                out[label] += 1
        return out

    def placeholder(self, label: str, value: str) -> str:
        key = (label, value)
        name = self._names.get(key)
        if name is None:
            self._numbers[label] += 1
            name = f"<{label.replace(' ', '-')}-{self._numbers[label]}>"
            self._names[key] = name
            self._labels[name] = label
        return name

    def _active(self) -> tuple[Rule, ...]:
        """The table, less request text under --keep-prompts, with the learned names: model
        paths before the secrets' rules (a path is one value), hostnames with the hostnames."""
        if self._rules is None:
            rules = [r for r in RULES if not (self.keep_prompts and r.prompt)]
            learned = []
            if self._models:
                paths = sorted(self._models, key=len, reverse=True)
                learned.append(_rule("model path", "(?P<v>" + "|".join(re.escape(p) for p in paths) + ")",
                                     tuple(p.lower() for p in paths)))
            if self._hosts:
                hosts = sorted(self._hosts, key=len, reverse=True)
                learned.append(_rule("hostname", r"(?<![A-Za-z0-9_.-])(?P<v>" + "|".join(re.escape(h) for h in hosts)
                                     + r")(?![A-Za-z0-9_])", tuple(h.lower() for h in hosts)))
            at = next(i for i, r in enumerate(rules) if r.label == "email address")
            self._rules = tuple(rules[:at] + learned + rules[at:])
        return self._rules

    def _span(self, rule: Rule, m: re.Match[str]) -> tuple[int, int, str] | None:
        start, end = m.span("v")
        if rule.check is not None:
            found = rule.check(m.string, start, end)
            if found is None:
                return None
            start, end = found
        value = m.string[start:end]
        if rule.prompt:
            value = value.rstrip(", \t")
            end = start + len(value)
        if rule.prompt or rule.label == "secret":
            if value.strip("'\"").lower() in _EMPTY or _PLACEHOLDER.fullmatch(value):
                return None
        name = m.group("n") if rule.label == "secret" else None
        return start, end, self.placeholder(_label(rule.label, name), value)


def _merge(kept: list[tuple[int, int, str]], new: list[tuple[int, int, str]],
           subsume: bool) -> list[tuple[int, int, str]]:
    """``kept`` with ``new``'s spans (both sorted and disjoint): one that overlaps a kept span
    is dropped, unless ``subsume`` and it holds the kept spans it meets whole and is longer
    than each (a secret's value that begins with an AWS key id is one value)."""
    out: list[tuple[int, int, str]] = []
    i = 0
    for span in new:
        start, end, _ = span
        while i < len(kept) and kept[i][1] <= start:
            out.append(kept[i])
            i += 1
        j = i
        while j < len(kept) and kept[j][0] < end:
            j += 1
        if i == j:
            out.append(span)
        elif subsume and all(start <= s and e <= end and e - s < end - start for s, e, _ in kept[i:j]):
            out.append(span)
            i = j
    out += kept[i:]
    return out


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _strings(value: Any, key: Any = None) -> Iterable[tuple[str | None, str]]:
    """(the key it is under, the string) for every string in a tree."""
    if isinstance(value, str):
        yield (key if isinstance(key, str) else None), value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name), f.name)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str):
                yield None, k
            yield from _strings(v, k)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v, key)


#: Where a summary or diagnosis holds lines' shapes: a field, and a mapping from shape to count.
_SHAPE_KEYS = frozenset({"shape", "unrecognised_shapes"})


def _walk(value: Any, r: Redactor, key: Any = None) -> Any:
    if isinstance(value, str):
        if isinstance(key, str) and value.strip("'\"").lower() not in _EMPTY and secret_name(key):
            return r.placeholder(_label("secret", key), value)
        return r.text(value, shape=key in _SHAPE_KEYS)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _walk(getattr(value, f.name), r, f.name)
                                             for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        shapes = key in _SHAPE_KEYS
        return type(value)({(r.text(k, shapes) if isinstance(k, str) else k): _walk(v, r, k)  # type: ignore[call-arg]
                            for k, v in value.items()})
    if isinstance(value, list):
        return [_walk(v, r, key) for v in value]
    if isinstance(value, tuple):
        return tuple(_walk(v, r, key) for v in value)
    if isinstance(value, (set, frozenset)):
        return type(value)(_walk(v, r, key) for v in value)
    return value


def redacted_if(value: T, redact: bool, keep_prompts: bool = False) -> T:
    """``value`` as an output written with or without ``--redact`` shows it."""
    return redacted(value, keep_prompts) if redact else value


def redacted(value: T, keep_prompts: bool = False) -> T:
    """``value`` (a diagnosis, a run summary) with everything private replaced, as ``--redact``
    writes it: the names are learned from all of it first, so a host is one placeholder throughout."""
    r = Redactor(keep_prompts)
    r.learn(value)
    return r.tree(value)
