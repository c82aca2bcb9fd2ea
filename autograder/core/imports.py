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
