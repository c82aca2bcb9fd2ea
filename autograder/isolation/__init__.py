"""Isolation: the bubblewrap sandbox student code runs in, its limits, and ending it as a whole
(:mod:`.sandbox`). Knows nothing of grading."""
