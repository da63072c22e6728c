"""Build hook: the optional C scanner (logforensics/read/_scan.c), the JSON-lines emitter
(read/_emit.c), the walker of unrecognised lines (read/_other.c) and the serving windows (model/_windows.c).

Everything else is declared in pyproject.toml. The extensions are optional: where no C
compiler or Python headers are available, ``pip install .`` still succeeds and the
pure-Python path reads logs with identical results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logforensics.read._scan",
            sources=["logforensics/read/_scan.c"],
            depends=["logforensics/read/_shape.h"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
        Extension(
            "logforensics.read._emit",
            sources=["logforensics/read/_emit.c"],
            depends=["logforensics/read/_shape.h", "logforensics/read/_utf8.h"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
        Extension(
            "logforensics.read._other",
            sources=["logforensics/read/_other.c"],
            depends=["logforensics/read/_utf8.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "logforensics.model._windows",
            sources=["logforensics/model/_windows.c"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
    ]
)
