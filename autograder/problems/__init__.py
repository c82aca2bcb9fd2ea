"""One module per assignment; each registers its graded functions on import.

Add a problem by adding a ``register(Problem(...))`` entry to the assignment's module (or a new
module here for a new assignment): the CLI, pytest, the notebooks' checks and the nbgrader cells
pick it up from the registry.
"""
