"""A deterministic model of how a per-device program would run on a TPU.

    from autograder.tpumodel import profile
    report = profile(fn, "matmul_allgather", mesh, args)   # or a Problem object
    print(report.text()); report.png  # a timeline picture

The model reads the module XLA produces right after SPMD partitioning (see :mod:`.api`), costs
compute by roofline and collectives by ring algorithms over the mesh axes (:mod:`.cost`, chip
figures in :mod:`.chips`), and schedules them with one compute stream and one lane per link
direction (:mod:`.schedule`).
"""
from .api import (
           compare,
           default_modeler,
           grading_modeler,
           model_function,
           model_hlo,
           partitioned_hlo,
)
from .chips import CHIPS, DEFAULT_CHIP, get_chip
from .hlo import ModelError
from .profile import Profile, profile

__all__ = ["CHIPS", "DEFAULT_CHIP", "ModelError", "Profile", "compare", "default_modeler",
           "get_chip", "grading_modeler", "model_function", "model_hlo", "partitioned_hlo",
           "profile"]
