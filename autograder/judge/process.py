"""The trusted grader: submissions graded from the programs their workers export.

    python -m autograder.judge SUBMISSION [--assignment ID] [--only f,g] [--seed N]
        [--quick] [--no-speed] [--no-isolation] [--folder] [--log FILE] [--cache-dir DIR]
    python -m autograder.judge --serve    # warm: options, then one Job after another, on stdin

The command line holds what a person types to grade one hand-in (with
:class:`~autograder.core.records.Limits`' defaults). With ``--serve`` (and no other flag) it reads
its options from its stdin, once, as a :class:`~autograder.core.records.JudgeOptions` record
(the limits within it), then grades one :class:`~autograder.core.records.Job` after another,
each with a fresh sandbox of its own, and says :class:`~autograder.core.records.Ready` after
each; JAX stays imported and the baselines' modules stay read, which is what a warm grader
saves. The supervisor's :class:`~autograder.supervisor.supervise.JudgePool` keeps such
graders.

Started by the supervisor (:mod:`autograder.supervisor`), which reads its records
(:mod:`autograder.core.records`: ``plan``, ``start``, ``result``, ``done``) from stdout and enforces
the time and memory limits. This process never imports or calls student code: it starts the
untrusted worker in its sandbox (:class:`~autograder.judge.artifacts.SandboxExporter`), asks it for
programs, and checks, compiles, runs and measures those programs itself, with inputs drawn from
a secret seed after the programs have arrived, weights and thresholds from its own registry.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ..core.records import Job, JudgeOptions, Limits, RecordError, parse

_T0 = time.perf_counter()


def choose_problems(assignment: str | None, path: Path):
    """The assignment and the problems to grade, decided on this side: as given, or read from
    the hand-in's name (its file or its folder), or from the graded functions its source
    defines, read without running it (never from what the worker says it loaded). A file
    defining functions of several assignments is graded on each of them (the assignment is then
    None); one defining none of them has nothing to grade."""
    from ..core.loader import written_names
    from ..course import registry

    if assignment:
        return assignment, registry.problems(assignment)
    for a in registry.assignments():
        if a in path.stem or a in path.parent.name:
            return a, registry.problems(a)
    try:
        written = written_names(path)
    except Exception:  # noqa: BLE001 - the student's file: unreadable means nothing found
        written = set()
    hit = [a for a in registry.assignments()
           if any(p.name in written for p in registry.problems(a))]
    if len(hit) == 1:
        return hit[0], registry.problems(hit[0])
    return None, [p for a in hit for p in registry.problems(a)]


def enable_cache(cache_dir: str | None) -> None:
    """The trusted side's class-wide cache: the verdicts and the baselines' partitioned
    modules, and, on an accelerator, JAX's persistent compilation cache (``CACHE/xla``) for the
    baselines timed beside the student's program. On CPU no program is timed (the TPU model
    decides) and a submission's programs are compiled once (an identical one reuses the
    verdict), so caching executables would only write them; and the model's compile switches
    that cache off and on process-wide, which must not happen while the compile pool works."""
    if not cache_dir:
        return
    from . import baseline, grading

    baseline.CACHE_DIR = Path(cache_dir)
    if grading.current_platform() == "cpu":
        return
    import jax

    jax.config.update("jax_compilation_cache_dir", str(Path(cache_dir) / "xla"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def warm(assignments: list[str], *, with_speed: bool) -> None:
    """Keep every jit baseline's partitioned module for the TPU model, and, where the speed case
    is timed (a TPU: no model), compile the baseline into the persistent cache. Where the model
    decides (CPU, GPU) no baseline runs, so none is compiled for running."""
    from ..course import registry
    from . import grading

    if not with_speed:
        return
    timed = grading.timed_here()
    for p in registry.problems():
        if (assignments and p.assignment not in assignments) or p.baseline is None:
            continue
        plan = grading.Plan(problem=p, seed=0, quick=False, with_big=True,
                            platform=grading.current_platform())
        layout, case = plan.big("speed")
        mesh = grading.make_mesh(*layout)
        args = grading.place_args(p, case, mesh)
        grading.baseline_text(p, layout, case, mesh, args)
        if timed:
            grading.compile_for(p, p.baseline, mesh, args, baseline=True,
                                options=grading.CompileKind.SPEED.options())


def exporter_for(job: Job, opts: JudgeOptions):
    """The sandboxed worker for this submission (started, not yet waited for)."""
    from ..isolation.sandbox import SandboxLimits
    from .channel import SandboxExporter

    lim = opts.limits
    limits = SandboxLimits(file_size_mb=lim.output_mb, memory_mb=lim.student_memory_mb, **(
        {"address_space_mb": lim.address_space_mb} if lim.address_space_mb else {}))
    exporter = SandboxExporter(Path(job.submission).resolve(), isolated=opts.isolation,
                               statement_s=lim.statement_s, load_s=lim.load_s,
                               log=Path(job.log) if job.log else None, limits=limits,
                               folder=job.folder)
    exporter.skip = list(job.skip)
    exporter.launch()
    return exporter


def run(job: Job, opts: JudgeOptions, send, exporter, *,
        before_done: Optional[Callable[[], None]] = None) -> None:
    """Grade ``job`` with ``exporter`` (its sandboxed worker), sending its records. ``before_done``
    runs just before :class:`Done` is sent (the supervisor may end this process right after)."""
    from ..core import errors
    from ..core.records import Done, Handover, Plan, Restart, Result, Start
    from . import grading
    from .bigcases import BigCaseStore
    from .reuse import VerdictStore
    from .timing import phase

    work = Path(job.submission).resolve()
    try:
        # Planned while the worker loads the submission (both sides would otherwise wait on
        # each other): the functions come from the hand-in's name or its source read without
        # running it, the cases from the seed, never from what the worker says
        assignment, probs = choose_problems(job.assignment, work)
        if job.only:
            only = set(job.only)
            probs = [p for p in probs if p.name in only]
        # A seed of its own: nothing graded before shares its inputs, nothing is kept
        shared = opts.cache_dir and opts.seed is not None
        store = VerdictStore(Path(opts.cache_dir) / "verdicts") if shared else None
        big_cases = BigCaseStore(Path(opts.cache_dir) / "bigcases") if shared else None
        plans, base = [], 0
        with phase("plan the cases (while the worker loads)"):
            for p in probs:
                plans.append(grading.plan_for(p, seed=opts.seed, quick=opts.quick,
                                              with_speed=opts.with_speed, id_base=base,
                                              big_cases=big_cases))
                plans[-1].all_requests()
                base += 10_000
        with phase("wait for the worker to load the submission"):
            exporter.start()
        if exporter.fault:  # no hand-in can be graded here: a regrade
            send(Plan(assignment, [p.name for p in probs], [], exporter.skip))
            for p in probs:
                send(Start(p.name))
                send(Result(p.name, [], regrade=exporter.fault))
            exporter.close()
            if before_done is not None:
                before_done()
            send(Done([]))
            return
        notes = list(exporter.notes)
        if not probs and not job.assignment:
            notes.append("no graded function of any assignment is defined in this file, so its "
                         "assignment cannot be told: nothing was graded")
        send(Plan(assignment, [p.name for p in probs], notes, exporter.skip))
        defined = [p.name in exporter.defined for p in probs]
        # Every request at once: the worker exports back to back while this side compiles
        # and runs what has arrived (replies wait here until their function's turn).
        for p, plan in zip(probs, plans, strict=True):
            if p.name in exporter.defined:
                exporter.submit(plan.all_requests())
        ownership = grading.Ownership(hook=lambda owner: send(Handover(owner)))
        serial = set(job.serial)
        for i, (p, plan) in enumerate(zip(probs, plans, strict=True)):
            ownership.reset()
            send(Start(p.name))
            try:
                with phase(f"function {p.name}"):
                    r = grading.grade_function(p, exporter if defined[i] else None, plan=plan,
                                               export_timeout=opts.limits.export_limit_s(),
                                               with_speed=opts.with_speed, store=store,
                                               timed=opts.timed_speed or grading.timed_here(),
                                               overlap=p.name not in serial,
                                               ownership=ownership)
            except Exception as e:  # noqa: BLE001 - the grader's own code failed: a regrade
                import traceback

                traceback.print_exc()  # into grader.log, which a regrade keeps for the instructor
                send(Result(p.name, [], regrade=grading.fault_text(e)))
            else:
                send(Result(p.name, [c.to_dict() for c in r.checks], reused=r.reused))
            if errors.EXPIRED and i + 1 < len(probs):
                # a time limit ran out on the submission's work, which may still run on XLA's
                # threads here: the functions left get a fresh judge
                send(Restart("a program of the submission ran past its time limit"))
                exporter.close()
                os._exit(0)
        exporter.close()
        if before_done is not None:
            before_done()
        send(Done(list(exporter.late_notes)))
    finally:
        exporter.close()


def _quiet(extra_s: float) -> bool:
    """Whether every thread of the last job has ended (within ``extra_s``): a compile of its
    program still running on a pool thread, or its worker's pipes still read, would reach into
    the next submission's grading, so a grader where one lingers is not given another job. The
    process's own effective clock (:data:`~autograder.core.clock.CLOCK`) is not a job's."""
    import threading

    from ..core.clock import CLOCK

    deadline = time.monotonic() + extra_s
    others = [t for t in threading.enumerate()
              if t is not threading.current_thread() and t is not CLOCK.thread]
    for t in others:
        t.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in others if t.is_alive()]
    if left:
        print(f"threads still running after the submission: {left}; this grader ends",
              file=sys.stderr)
    return not left


def serve(opts: JudgeOptions, send, setup) -> int:
    """Grade one :class:`~autograder.core.records.Job` from stdin after another until stdin
    closes. After each, what the job compiled is dropped and :class:`Ready` is sent; a job that
    ran past a time limit (work of its submission may still run here) ends this process
    instead, so nothing of one submission can reach the next one's verdicts. ``setup()``
    starts JAX; it is called once the first job's worker is loading (the two overlap)."""
    import gc

    from ..core import errors
    from ..core.records import Job, Ready, RecordError, parse
    from . import timing

    first = True
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return 0
        try:
            job = parse(line, allowed=(Job,))
        except RecordError as e:
            print(f"not a job: {e}", file=sys.stderr)
            return 2
        log = os.open(job.grader_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 2)
        os.dup2(log, 1)
        os.close(log)
        os.chdir(job.cwd)
        # what differs per submission comes from the job, the rest from the options record
        exporter = exporter_for(job, opts)
        if first:
            setup()
            timing.add("start (this process and JAX)", time.perf_counter() - _T0)
            first = False
        run(job, opts, send, exporter, before_done=timing.job_record(
            job.assignment or Path(job.submission).stem))
        timing.reset()
        if errors.EXPIRED or not _quiet(extra_s=5.0):
            return 0
        import jax

        from ..core.mlir_reuse import forget

        jax.clear_caches()
        forget()  # no MLIR context of this submission's programs reads the next one's
        gc.collect()
        send(Ready())


def read_options(stream) -> JudgeOptions:
    """The :class:`~autograder.core.records.JudgeOptions` record on the first line of
    ``stream`` (a ``--serve`` judge's stdin): anything else, a field missing or unknown
    included, is a :class:`~autograder.core.records.RecordError` naming it."""
    line = stream.readline()
    if not line:
        raise RecordError("no options record: its input ended first")
    return parse(line, allowed=(JudgeOptions,))


def typed_options(a) -> JudgeOptions:
    """The options a person typed; every limit is :class:`~autograder.core.records.Limits`'
    default."""
    return JudgeOptions(quick=a.quick, seed=a.seed, with_speed=not a.no_speed,
                        timed_speed=a.timed_speed, isolation=not a.no_isolation,
                        cache_dir=a.cache_dir, limits=Limits())


def typed_job(a) -> Job:
    """The one submission a person named on the command line, as a job."""
    return Job(submission=a.submission, cwd=os.getcwd(), grader_log="", log=a.log or "",
               assignment=a.assignment, only=a.only.split(",") if a.only else None,
               folder=a.folder)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.judge")
    ap.add_argument("submission", nargs="?")
    ap.add_argument("--serve", action="store_true",
                    help="grade one Job record from stdin after another (a warm grader); its "
                         "options come first on stdin, as one options record, and no other "
                         "flag is taken")
    ap.add_argument("--assignment")
    ap.add_argument("--only", help="comma-separated functions to grade")
    ap.add_argument("--seed", type=int, default=None, help="default: a fresh secret seed")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--timed-speed", action="store_true",
                    help="time the speed case on emulated CPU devices too (a test, not a grade)")
    ap.add_argument("--no-isolation", action="store_true")
    ap.add_argument("--folder", action="store_true",
                    help="the submission's folder is the student's own: the worker sees it")
    ap.add_argument("--log", help="the untrusted worker's output goes here")
    ap.add_argument("--cache-dir")
    ap.add_argument("--warm", action="append", default=None, metavar="ASSIGNMENT",
                    help="only compile the baselines (of these assignments; 'all' for every one)")
    a = ap.parse_args(argv)
    if a.serve:
        typed = sorted(k for k, v in vars(a).items() if k != "serve" and v != ap.get_default(k))
        if typed:
            ap.error(f"--serve takes its options from its stdin (an options record), not from "
                     f"the command line: {', '.join(typed)} given")
    elif a.warm is None and not a.submission:
        ap.error("a submission is required")
    if a.serve:
        try:
            opts = read_options(sys.stdin.buffer)
        except RecordError as e:
            print(f"python -m autograder.judge --serve: {e}", file=sys.stderr)
            return 2
    else:
        opts = typed_options(a)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(record) -> None:
        out.write(record.to_line())
        out.flush()

    def setup() -> None:
        from ..core.devices import setup_devices
        from ..core.mlir_reuse import reuse_per_thread

        setup_devices()
        reused = reuse_per_thread()
        if reused.startswith("not"):  # said in the grader's log: as correct, and slower
            print(f"MLIR contexts {reused}", file=sys.stderr)
        enable_cache(opts.cache_dir)

    if a.serve:
        return serve(opts, send, setup)
    job = typed_job(a) if a.warm is None else None
    exporter = exporter_for(job, opts) if job is not None else None  # it loads while JAX starts
    setup()
    if a.warm is not None:
        warm([w for w in a.warm if w != "all"], with_speed=opts.with_speed)
        return 0
    from . import timing

    timing.add("start (this process and JAX)", time.perf_counter() - _T0)
    run(job, opts, send, exporter, before_done=timing.job_record(
        job.assignment or Path(job.submission).stem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
