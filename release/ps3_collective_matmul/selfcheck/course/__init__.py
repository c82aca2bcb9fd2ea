"""The course: what is graded, and by which rules.

One registry entry per graded function (:mod:`.problems`, looked up through :mod:`.registry`),
its NumPy reference and input maker (:mod:`.references`), its jit baseline (:mod:`.baselines`),
its structure rules (:mod:`.rules`), the checks that turn evidence into verdicts
(:mod:`.checks`) and the bar each notebook shows (:mod:`.bars`). A new problem is one entry here.

Trusted content: the sandbox never sees it. The self-check carries the public part of it.
"""
