"""nbgrader configuration for the course directory (this repository's root).

source/<assignment>/   instructor notebooks (built by tools/build_notebooks.py)
release/<assignment>/  student versions (nbgrader generate_assignment; committed)
submitted/, autograded/, feedback/  created by nbgrader when grading a class
"""
import os

c = get_config()  # noqa: F821 - provided by nbgrader

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "jax-scaling"
c.CourseDirectory.db_url = os.environ.get(
    "NBGRADER_DB_URL", "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db"))

# nbgrader's exchange (release_assignment, fetch_assignment, submit, collect): by default the
# system-wide /usr/local/share/nbgrader/exchange. Name it in /etc/jupyter/nbgrader_config.py
# (c.Exchange.root = "/srv/nbgrader/exchange"), which the students' nbgrader reads too; this
# file is read by the instructor's commands only. Keep it outside this folder, mode 1777
# (docs/instructor.md, "Handing out and collecting").

# Files a student folder may contain besides the notebook.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".pytest_cache"]

# What students see where a solution was removed.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding never runs student code in a kernel here: the notebook runs in the sandbox and the
# hidden cells' points come from the trusted grader (autograder.classroom.nbgrader_plugin.GradeInSandbox).
from autograder.classroom.nbgrader_plugin import configure  # noqa: E402

configure(c)
# Grading options (the same as grade-all's; see docs/instructor.md, "Two doors into one
# gradebook"). Every hand-in of this course folder is graded on one secret seed, drawn once and
# kept in .autograder/seed, which `python -m autograder grade-all` on this folder uses too: both
# paths give one grade.
# c.GradeInSandbox.seed = 1234            # fix it instead (to reproduce a verdict)
# c.GradeInSandbox.quick = False          # fewer meshes and cases
# c.GradeInSandbox.with_speed = True      # the speed check
c.GradeInSandbox.function_timeout = 150   # seconds per graded function
c.GradeInSandbox.load_timeout = 120       # seconds to load one hand-in
c.GradeInSandbox.cell_timeout = 150       # seconds per cell when the notebook runs for feedback
#                                         (up to its last graded cell; a cell past it ends that
#                                         run, and the student's feedback says so)
# `nbgrader validate` still executes the instructor's own notebooks in a kernel.
c.Execute.timeout = 900
c.Execute.allow_errors = True
