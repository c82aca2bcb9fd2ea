"""``python -m autograder``: the command line (:mod:`.main`) and its commands."""
