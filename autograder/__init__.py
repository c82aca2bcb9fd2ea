"""Course package for JAX multi-device parallelism ("How To Scale Your Model", part 10).

The folders follow who runs what (docs/development.md, "Layout"):

    cli/         python -m autograder
    classroom/   grade-all, Dask, the class report, nbgrader's gradebook and autograde step
    supervisor/  one submission: limits, restarts, scores
    judge/       TRUSTED: grades exported programs, never runs student code
    worker/      UNTRUSTED: runs student code in the sandbox, exports its programs
    public/      the student's self-check (copied into each release folder)
    course/      the problems, references, baselines, rules and checks
    tpumodel/    the modeled TPU
    isolation/   the bubblewrap sandbox
    core/        the shared vocabulary

Each folder imports only the ones listed below it (``[tool.importlinter]`` in pyproject.toml,
checked by ``make test``); the judge, the worker and the self-check never import each other.
"""
__version__ = "0.1.0"
