"""TRUSTED: the judge, which grades programs and never runs student code.

``python -m autograder.judge`` (:mod:`.process`) starts the worker in the sandbox
(:mod:`.channel`), takes in each exported program through one checked door
(:func:`.artifacts.load_artifact`), makes the inputs from a secret seed, compiles, runs, reads
the structure (:mod:`autograder.core.stablehlo`), models the speed and hands the evidence to the
course's checks (:mod:`.grading`). It reports to the supervisor in :mod:`autograder.core.records`.
"""
