"""Compile every module of this Python's site-packages to bytecode, on every core.

The installs (the Makefile's ``.venv``, ``tools/test_latest.sh``'s ``.venv-latest``) run pip
with ``--no-compile``, then this: pip compiles one module at a time (29 of the 51 s of the newer
JAX's install here), this on every core (12 s). Never left out: where
``$PYTHONDONTWRITEBYTECODE`` is set (this machine, CI) nothing else writes the bytecode, and
every process of the suite would compile jax's, numpy's and scipy's modules again as it imports
them (about 2 s of CPU each). A module that does not compile (a package's old test file) is
skipped, as pip skips it.

    .venv/bin/python tools/compile_site.py
"""
import compileall
import os
import sys
import sysconfig
import warnings


def main() -> int:
    # the packages' own SyntaxWarnings, here and in the pool's processes
    warnings.simplefilter("ignore")
    os.environ["PYTHONWARNINGS"] = "ignore"
    for where in sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}):
        compileall.compile_dir(where, quiet=2, workers=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
