"""Third-party imports the grader makes lighter than their defaults."""
from __future__ import annotations

import sys


def light_nbformat():
    """``nbformat``, imported without jsonschema's IRI checker.

    jsonschema (under nbformat) checks the ``iri`` format with ``rfc3987_syntax`` where that is
    installed (Jupyter's format extras bring it in), and that module builds a parser grammar as
    it is imported: about 1 s of CPU in every process that reads a notebook. No notebook
    schema has an IRI to check, so the module is marked absent (unless something already
    imported it) and jsonschema goes without that one format checker."""
    sys.modules.setdefault("rfc3987_syntax", None)
    import nbformat

    return nbformat


#: what the sandboxed worker imports to read and export any hand-in, beside the package itself
#: (IPython reads a notebook cell's magics; flatbuffers serializes an export)
WORKER_NEEDS = ("numpy", "jax", "jaxlib", "flatbuffers", "IPython")


def unimportable(names: tuple = WORKER_NEEDS) -> list[str]:
    """Those of ``names`` this Python cannot import (found, not imported)."""
    import importlib.util

    out = []
    for name in names:
        try:  # a folder without its files (a namespace package) is not the package
            spec = importlib.util.find_spec(name)
            found = spec is not None and spec.origin not in (None, "namespace")
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def where_found(name: str) -> str:
    """The folder this Python imports ``name`` from ('' where it cannot)."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    if spec.submodule_search_locations:  # a package: the folder that holds it
        return str(Path(next(iter(spec.submodule_search_locations))).parent)
    return str(Path(spec.origin).parent) if spec.origin else ""
