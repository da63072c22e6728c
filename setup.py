"""Build hook: the optional accelerator, one compiled module (logforensics/native/: the bulk
reader, the walker of unrecognised lines, the writers' rows and columns).

Everything else is declared in pyproject.toml. The module is portable C (no
processor-specific instructions) and optional: where no C compiler or Python headers are
available, ``pip install .`` still succeeds, says so in one line, and the pure-Python path
reads logs with identical results.
"""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

#: What stops a build of one extension: no compiler, no headers, a failed compile or link.
BUILD_ERRORS = (BaseError, CCompilerError, OSError)

#: What a build without the accelerator says, once (the figure: CPU time of summary of a 100 MB
#: serving log, pure against compiled).
PURE_NOTE = ("logforensics: the C accelerator could not be built ({reason}); the pure-Python path will be "
             "used: the same results, about 10x slower")


class OptionalBuildExt(build_ext):
    """build_ext that, where an extension cannot be compiled, goes on without it and says so in
    one line (setuptools' own warning is one per extension and says nothing of the cost)."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.failed: list[str] = []

    def run(self) -> None:
        super().run()
        if self.failed:
            say(PURE_NOTE.format(reason=self.failed[0]))

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except BUILD_ERRORS as e:
            if not ext.optional:
                raise
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.failed.append(first if len(first) <= 80 else first[:77] + "...")


def say(line: str) -> None:
    """The line on stderr, and on the terminal where stderr is not one: pip keeps a build's
    output to itself unless it fails or runs with -v."""
    print(line, file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        return
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            print(line, file=tty)
    except OSError:  # no terminal (CI, a pipe): stderr alone
        pass


setup(
    cmdclass={"build_ext": OptionalBuildExt},
    ext_modules=[
        Extension(
            "logforensics.native._native",
            sources=[f"logforensics/native/{name}.c" for name in ("module", "scan", "other", "emit")],
            depends=[f"logforensics/native/{name}.h" for name in ("native", "shape", "utf8")],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
    ],
)
