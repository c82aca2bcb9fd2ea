"""Class tools: grading a whole class (:mod:`.batch`, on a Dask cluster :mod:`.cluster`), the
class report, nbgrader's gradebook, the nbgrader autograde step (:mod:`.nbgrader_plugin`) and
the hidden notebook cells' entry point (:mod:`.cells`)."""
