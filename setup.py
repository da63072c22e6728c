"""Build hook: the optional C scanner (see logforensics/read/_scan.c).

Everything else is declared in pyproject.toml. The extension is optional: where no C
compiler or Python headers are available, ``pip install .`` still succeeds and the
pure-Python path reads logs with identical results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logforensics.read._scan",
            sources=["logforensics/read/_scan.c"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
        Extension(
            "logforensics.read._emit",
            sources=["logforensics/read/_emit.c"],
            depends=["logforensics/read/_shape.h"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
    ]
)
