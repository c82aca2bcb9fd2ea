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

# Files a student folder may contain besides the notebook.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".pytest_cache"]

# What students see where a solution was removed.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Grading a function compiles it on several meshes: give cells room, and the whole notebook too.
c.Execute.timeout = 900
c.Execute.interrupt_on_timeout = True
c.Execute.allow_errors = True
