"""The shared vocabulary: what every side of the package speaks, and nothing that decides a grade.

Records that cross a process boundary (:mod:`.records`), check results (:mod:`.results`), what a
graded function is (:mod:`.problem`), the program types with the jaxpr walker (:mod:`.program`)
and the StableHLO reader (:mod:`.stablehlo`), comparing values and shardings (:mod:`.compare`),
the course's meshes and devices, the supported JAX range, reading a submission's definitions
(:mod:`.loader`), error wording and time limits (:mod:`.errors`) and the grader's identity.

Nothing here imports any other part of the package. The untrusted worker is built on this alone
(it is all the sandbox can read besides the worker), and so is the student's self-check.
"""
