"""The supervisor of one submission: starts the judge, enforces time and memory limits, restarts
after a hang or a crash and scores the judge's results with the registry's points
(:mod:`.supervise`); what a grading is told (:mod:`.options`)."""
