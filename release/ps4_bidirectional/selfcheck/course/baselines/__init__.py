"""The jit baselines: each graded function's plain global-view computation, which the speed check
(and ``tpu_profile``) compare the student's program with, one module per assignment.

Plain ``jax.numpy`` and nothing of the grader, so that the self-check package can carry a
module as it is and students can model their programs from a release folder alone, except
where the baseline's code would give an exercise's answer away (``Problem.baseline_public``:
ps1's and ps2's modules stay with the grader, and the self-check gets their modeled figures;
tests/test_release_answers.py grades what a release folder carries as a hand-in). The
registry (:mod:`autograder.course.problems`) names one of these per problem.
"""
