"""``python -m autograder doctor``: is this machine ready to grade?

Prints the JAX version (and whether it is inside the course's tested range), the devices, whether
student code can be isolated, what bounds a sandbox's memory and whether sandboxes share the
CPU fairly (the cgroup ``cpu`` controller), whether the TPU model loads and reads this JAX's
programs, whether a right hand-in of one function gets full marks when graded end to end (the
sandbox's export, the judge, the model: what a host's accelerator or a missing module breaks),
the nbgrader version (optional: nbgrader's own path and ``grade-all --gradebook``), whether Dask ``distributed`` is there and the cluster's client credentials are configured
(optional: grading on a cluster). Exits 1, with the
command that fixes it, when something grading needs is missing; optional parts and a JAX newer
than the tested range are reported without failing, so a cluster worker without nbgrader is
ready.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from ..core import versions


@dataclass
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    #: False: reported, but its absence does not fail the doctor
    required: bool = True

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.required else "note")
        text = f"[{mark}] {self.name}: {self.detail}"
        if self.fix and not self.ok:
            text += f"\n       fix: {self.fix}"
        return text


def _dist_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_jax() -> Finding:
    import jax

    v = jax.__version__
    where = versions.support(v)
    pin = f'pip install "jax>={versions.JAX_MIN},<{versions.JAX_BELOW}" ' \
          f'"jaxlib>={versions.JAX_MIN},<{versions.JAX_BELOW}"'
    jaxlib = _dist_version("jaxlib") or "?"
    if where == "old":
        return Finding("JAX", False, f"{v} (jaxlib {jaxlib}) is older than the course supports "
                       f"({versions.range_text()})", fix=pin)
    if where == "newer":
        return Finding("JAX", True, f"{v} (jaxlib {jaxlib}) is NEWER than the tested range "
                       f"({versions.range_text()}): verdicts may differ from the tested ones; "
                       f"to grade on a tested release: {pin}")
    return Finding("JAX", True, f"{v} (jaxlib {jaxlib}), inside the tested range "
                   f"({versions.range_text()})")


def check_devices() -> Finding:
    """JAX's default backend, the course's devices, where the grader's processes run and
    whether the speed check is timed or modeled here."""
    from ..core.devices import N_DEVICES, describe_devices, is_accelerator, setup_devices
    from ..supervisor.platform import grader_platform

    try:
        setup_devices()
        text = describe_devices().split("\n", 1)[1].replace("\n", "; ")
        gp = grader_platform()
        speed = ("the speed check is timed on these devices against the jit baseline (the "
                 "modeled TPU figure beside it)" if is_accelerator() else
                 "the speed check is modeled on a TPU (wall-clock on emulated devices would say "
                 "nothing)")
        return Finding("devices", True, f"{text}; grading processes: {gp.how}; {speed}")
    except Exception as e:  # noqa: BLE001 - reported with the fix
        return Finding("devices", False, f"the course's {N_DEVICES} devices are not available "
                       f"({type(e).__name__}: {e})",
                       fix=f"run with JAX_NUM_CPU_DEVICES={N_DEVICES} in a fresh Python (nothing "
                       "may use JAX before the grader sets up its devices)")


def check_isolation() -> Finding:
    from ..isolation import sandbox as isolation

    av = isolation.available()
    if av.ok:
        return Finding("isolation", True, av.how)
    return Finding("isolation", False, f"student code cannot be sandboxed: {av.how}",
                   fix="install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; "
                   "as root `make venv` does it) and allow user namespaces; grading without it "
                   "needs --no-isolation on every command, and every report then says so")


def check_memory_bound() -> Finding:
    """What bounds a sandbox's memory: a control group the kernel enforces, where one can be
    made here, beside the judge's watchdog (which is always on)."""
    from ..isolation import cgroup

    return Finding("memory bound", cgroup.support() is not None, cgroup.describe(),
                   fix="run the grader as root on a machine with a writable cgroup file system "
                   "(v2 with the memory and pids controllers, or v1) for a bound the kernel "
                   "enforces; the watchdog alone still stops a sandbox past its limit",
                   required=False)


def check_cpu_share() -> Finding:
    """Whether each sandbox gets its own, equal share of the CPU (the cgroup ``cpu``
    controller): without it a hand-in's busy processes can slow a classmate's, said out loud
    here (a note: grading still works, its limits stretch to match)."""
    from ..isolation import cgroup

    return Finding("CPU share", cgroup.cpu_support() is not None, cgroup.cpu_describe(),
                   fix="run the grader as root on a machine whose cgroup file system offers the "
                   "cpu controller (v1: a writable cpu hierarchy; v2: cpu in the grader's "
                   "cgroup.subtree_control, e.g. systemd-run -p Delegate=yes)", required=False)


def check_tpumodel() -> Finding:
    """Load the TPU model and model a small ring written with ``fori_loop`` on a 2x4 mesh: three
    hops must come out as three communications (this JAX's loop lowering is read)."""
    fix = ("reinstall the package in a JAX of the tested range "
           f'(pip install -e . "jax>={versions.JAX_MIN},<{versions.JAX_BELOW}"); if it still '
           "fails, report it: without the model the speed check falls back to wall-clock")
    try:
        import jax
        import numpy as np
        from jax.sharding import PartitionSpec as P

        from ..core import devices
        from ..core.meshes import make_mesh
        from ..tpumodel import model_function

        mesh = make_mesh(2, 4)
        perm = [(j, (j + 1) % 4) for j in range(4)]

        def ring(a):
            return jax.lax.fori_loop(0, 3, lambda i, x: jax.lax.ppermute(x, "Y", perm), a)

        f = devices.jit(jax.shard_map(ring, mesh=mesh, in_specs=P("X", "Y"),
                                      out_specs=P("X", "Y"), check_vma=False))
        a = devices.place(np.zeros((16, 32), np.float32), mesh, P("X", "Y"))
        m = model_function(f, (a,), mesh)
        hops = sum(t.kind == "comm" for t in m.timeline.tasks)
    except Exception as e:  # noqa: BLE001 - reported with the fix
        return Finding("TPU model", False, f"could not model a small program "
                       f"({type(e).__name__}: {str(e)[:300]})", fix=fix)
    if hops != 3:
        return Finding("TPU model", False, f"a 3-step fori_loop ring came out as {hops} "
                       "communications (this JAX's loops are misread)", fix=fix)
    return Finding("TPU model", True, f"loads; a 3-step fori_loop ring modeled on TPU {m.chip} "
                   f"in {m.time_us:.2f} us")


#: a hand-in of one function, right in every check (ps1's first exercise: as small as a graded
#: program gets), which the doctor grades end to end
HANDIN = """import jax
from jax.sharding import NamedSharding, PartitionSpec as P


def shard_average_jit(A, mesh):
    blocks = A.reshape(mesh.shape["X"], -1, A.shape[1])
    blocks = jax.lax.with_sharding_constraint(blocks, NamedSharding(mesh, P("X", None, "Y")))
    return blocks.mean(axis=1)
"""
HANDIN_FUNCTION = "shard_average_jit"


def check_grading() -> Finding:
    """Grade :data:`HANDIN` end to end as ``grade`` does (exported in the sandbox, judged by a
    judge process, priced by the model or timed): full marks, or the cause. Without isolation it
    is graded without the sandbox and said so (the isolation line fails the doctor anyway)."""
    from ..isolation import sandbox

    return _graded(sandbox.available().ok)


@functools.lru_cache(maxsize=2)
def _graded(isolated: bool) -> Finding:
    import tempfile
    from pathlib import Path

    from ..supervisor.options import Options
    from ..supervisor.supervise import grade_submission

    fix = ("the cause is above; fix it and run the doctor again (python -m autograder grade "
           "FILE shows the same report for any hand-in)")
    with tempfile.TemporaryDirectory(prefix="autograder-doctor-") as d:
        path = Path(d) / "doctor_handin.py"
        path.write_text(HANDIN)
        try:
            res = grade_submission(path, Options(assignment="ps1_sharding", seed=0,
                                                 isolation=isolated, only=[HANDIN_FUNCTION],
                                                 cache_dir=None))
        except Exception as e:  # noqa: BLE001 - the grader could not start: reported
            return Finding("grading", False, f"grading a right hand-in of {HANDIN_FUNCTION} "
                           f"could not start ({type(e).__name__}: {e})", fix=fix)
    fn = res.functions.get(HANDIN_FUNCTION)
    how = "in the sandbox" if isolated else "WITHOUT the sandbox (isolation is missing)"
    if fn is None or fn.regrade or fn.score < fn.max_score:
        why = (fn.regrade if fn is not None and fn.regrade else
               "; ".join(f"{c.name}: {c.message}" for c in (fn.checks if fn else [])
                         if not c.passed) or "no verdict")
        return Finding("grading", False, f"a right hand-in of {HANDIN_FUNCTION}, graded end to "
                       f"end {how}, did not get full marks: {why[:1500]}", fix=fix)
    speed = next((c.message for c in fn.checks if c.name == "speed"), "")
    return Finding("grading", True, f"a right hand-in of {HANDIN_FUNCTION} graded end to end "
                   f"{how}: {fn.score:g}/{fn.max_score:g} (speed: {speed[:160]}...)")


def check_nbgrader() -> Finding:
    """nbgrader is optional: ``grade``, ``grade-all`` and a Dask grading worker (the wheel's
    ``[cluster]`` install) grade without it; only nbgrader's own path (``nbgrader autograde``,
    the release folders) and ``grade-all --gradebook`` need it, and ``--gradebook`` says so
    before grading."""
    v = _dist_version("nbgrader")
    if v is None:
        return Finding("nbgrader", False, "not installed: grading here (grade, grade-all, a Dask "
                       "worker) does not need it; `nbgrader autograde`, `nbgrader "
                       "generate_assignment` and `grade-all --gradebook` do",
                       fix="pip install 'jax-scaling-course[nbgrader]' (or pip install "
                       "nbgrader==0.9.6)", required=False)
    return Finding("nbgrader", True, v, required=False)


def check_distributed() -> Finding:
    v = _dist_version("distributed") if importlib.util.find_spec("distributed") else None
    if v is None:
        return Finding("distributed", False, "not installed (only `grade-all --scheduler`, "
                       "grading on a Dask cluster, needs it)",
                       fix="pip install 'jax-scaling-course[cluster]'", required=False)
    return Finding("distributed", True, f"{v} (grade-all --scheduler is available)",
                   required=False)


def check_cluster_credentials() -> Finding:
    """Optional: the client credentials ``grade-all --scheduler`` uses by default
    (``$AUTOGRADER_CLUSTER_CREDENTIALS``), checked as grade-all checks them."""
    import os

    from ..classroom import credentials

    fix = ("python -m autograder cluster-certs FOLDER, then export "
           f"{credentials.ENV}=FOLDER (docs/cluster.md)")
    if not os.environ.get(credentials.ENV):
        return Finding("cluster credentials", False, f"{credentials.ENV} is not set (only "
                       "grade-all --scheduler needs them, or its --cluster-credentials)",
                       fix=fix, required=False)
    try:
        creds = credentials.load()
    except ImportError:
        return Finding("cluster credentials", False, "cannot be checked without cryptography",
                       fix="pip install 'jax-scaling-course[cluster]'", required=False)
    except credentials.CredentialsError as e:
        return Finding("cluster credentials", False, str(e), fix=fix, required=False)
    return Finding("cluster credentials", True, f"{creds.folder}: the client's certificate, "
                   f"signed by its ca.pem, valid until {credentials.expires(creds):%Y-%m-%d} "
                   "(grade-all --scheduler tls://... uses them)", required=False)


CHECKS: tuple[Callable[[], Finding], ...] = (check_jax, check_devices, check_isolation,
                                             check_memory_bound, check_cpu_share,
                                             check_tpumodel, check_grading, check_nbgrader,
                                             check_distributed, check_cluster_credentials)


def run(out=print) -> int:
    """Run every check, print one line each (and the fix of each failure); 0 when nothing an
    instructor needs is missing, else 1."""
    found = {}
    # the sandbox probe and the end-to-end grading start processes: before JAX starts its
    # threads in this one
    first = (check_isolation, check_grading)
    for check in sorted(CHECKS, key=lambda c: c not in first):
        try:
            found[check] = check()
        except Exception as e:  # noqa: BLE001 - a broken check is a failure, never a crash
            found[check] = Finding(check.__name__.removeprefix("check_"), False,
                                   f"the check itself failed ({type(e).__name__}: {e})")
    findings = [found[c] for c in CHECKS]
    for f in findings:
        out(f.line())
    missing = [f for f in findings if f.required and not f.ok]
    from .. import __version__

    out(f"Python {sys.version.split()[0]}; autograder {__version__} at {_here()}")
    if missing:
        out(f"not ready to grade: {', '.join(f.name for f in missing)} (fixes above)")
        return 1
    out("ready to grade")
    return 0


def _here() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[1])


def add_parser(sub) -> None:
    d = sub.add_parser("doctor", help="check this machine: JAX, devices, isolation, TPU model, "
                       "nbgrader (exit 1 with the fix when something is missing)")
    d.set_defaults(func=lambda a: run())
