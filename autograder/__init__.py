"""Course package for JAX multi-device parallelism ("How To Scale Your Model", part 10).

``autograder`` holds the problem registry, the checks and the ways in: the CLI
(``python -m autograder``), the pytest suite (``pytest autograder``) and the nbgrader hidden
cells (:func:`autograder.nb.grade`).
"""
__version__ = "0.1.0"
