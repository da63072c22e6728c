"""Compiled Jinja templates kept between runs, in Jinja's own bytecode cache.

Why: compiling the rules' conditions and texts and the report's template took about half of
a small ``diff``'s time, anew in every process, for text that does not change between runs.
Jinja keeps compiled code in the package's one private cache directory (``cachedir.py``:
the user's own, mode 0700, refused when anyone else owns it or can write it) and compiles
again when the text, Jinja or Python changed. A cache that cannot be read or written is no
cache: the template is compiled as before. ``LOGFORENSICS_NO_CACHE=1`` turns it off.

A template is named by the digest of its text and of the environment that compiles it (the
sandbox's code differs from the report's), so one name is always one compiled code.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

from jinja2 import BaseLoader, Environment, Template, TemplateNotFound, TemplateSyntaxError, nodes
from jinja2.bccache import Bucket, BytecodeCache, FileSystemBytecodeCache
from jinja2.environment import TemplateExpression
from jinja2.parser import Parser

from ..cachedir import private_dir


class _Cache(FileSystemBytecodeCache):
    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a damaged entry: compile again
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:  # full or read-only: the compiled code stays in this process
            pass


@lru_cache(maxsize=1)
def bytecode_cache() -> BytecodeCache | None:
    """Jinja's cache in the user's own directory, or None (turned off, or no safe directory)."""
    directory = private_dir()
    return None if directory is None else _Cache(directory)


class TextLoader(BaseLoader):
    """Templates (``{{ ... }}`` text) or expressions given as text, named by their digest
    (what the bytecode cache keys their compiled code by)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.texts: dict[str, tuple[str, bool]] = {}

    def name(self, text: str, is_expression: bool) -> str:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        name = f"{self.kind}-{'expression' if is_expression else 'template'}-{digest}"
        self.texts[name] = (text, is_expression)
        return name

    def get_source(self, environment: Environment, template: str) -> tuple[str, str | None, Any]:
        try:
            return self.texts[template][0], None, lambda: True
        except KeyError:
            raise TemplateNotFound(template) from None

    def load(self, environment: Environment, name: str, globals: Any = None) -> Template:
        """Jinja's ``BaseLoader.load``, an expression compiled as ``compile_expression`` does."""
        source, _, uptodate = self.get_source(environment, name)
        cache = environment.bytecode_cache
        bucket = cache.get_bucket(environment, name, None, source) if cache is not None else None
        code = bucket.code if bucket is not None else None
        if code is None:
            code = environment.compile(_assignment(environment, source) if self.texts[name][1] else source, name)
            if cache is not None and bucket is not None:
                bucket.code = code
                cache.set_bucket(bucket)
        return environment.template_class.from_code(environment, code, globals, uptodate)


def _assignment(env: Environment, text: str) -> nodes.Template:
    """``result = <text>``: the template ``compile_expression`` builds."""
    parser = Parser(env, text, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
    expr.set_environment(env)
    return nodes.Template([nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)], lineno=1)


def use_cache(env: Environment, kind: str) -> None:
    """Let ``env`` compile text through the cache (see :func:`template` and :func:`expression`)."""
    env.loader = TextLoader(kind)
    env.bytecode_cache = bytecode_cache()


def _loader(env: Environment) -> TextLoader:
    loader = env.loader
    assert isinstance(loader, TextLoader), "use_cache(env) first"
    return loader


def template(env: Environment, text: str) -> Template:
    """``env.from_string(text)``, compiled once for every run. Check the text first, as for
    ``from_string``: this only compiles it."""
    return env.get_template(_loader(env).name(text, False))


def expression(env: Environment, text: str) -> TemplateExpression:
    """``env.compile_expression(text, undefined_to_none=False)``, compiled once for every run."""
    return TemplateExpression(env.get_template(_loader(env).name(text, True)), False)
