"""UNTRUSTED: the worker that runs student code, inside the sandbox.

``python -m autograder.worker`` (:mod:`.process`) loads a submission and answers export requests
with serialized ``jax.export`` programs (:mod:`.exporting`). It decides nothing: whatever it says
is data the judge checks. It imports only :mod:`autograder.core`, and the sandbox mounts only
this package and that one (:func:`autograder.isolation.sandbox.python_binds`).
:mod:`.local` is the same exporter for trusted code in the grader's own process.
"""
