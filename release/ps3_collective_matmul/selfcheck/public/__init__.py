"""The student's self-check: the public check (:mod:`.check`) and the notebook tools
(:mod:`.tools`). tools/build_notebooks.py copies this package, with the public parts of the course
and the model it imports, into each release folder's ``selfcheck/``."""
