"""``python -m autograder grade-all DIR``: the command line of :mod:`autograder.classroom.batch`."""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from ..classroom.batch import UnknownStudent, class_report_path, grade_all


def add_parser(sub) -> None:
    g = sub.add_parser("grade-all", help="grade every submission of a class folder")
    g.add_argument("dir", help="nbgrader course folder (or its submitted/), or a flat folder")
    g.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                   help="submissions graded at once (default: min(2, CPUs))")
    g.add_argument("--out", default="class_grades.csv",
                   help="the CSV (default class_grades.csv; nbgrader export writes grades.csv)")
    g.add_argument("--reports", help="folder of JSON reports (default: next to the CSV)")
    g.add_argument("--force", action="store_true", help="grade again what was graded before")
    g.add_argument("--student", action="append", metavar="NAME",
                   help="grade this student's hand-ins again (repeatable); the rest of the "
                   "class keeps its reports, and the CSV still lists everyone")
    g.add_argument("--quick", action="store_true", help="fewer meshes and cases")
    g.add_argument("--no-speed", action="store_true", help="skip the speed check")
    from .options import SEED_HELP_GRADE_ALL, add_limit_options, add_trust_options

    add_trust_options(g, SEED_HELP_GRADE_ALL)
    add_limit_options(g)
    g.add_argument("--cache-dir", help="the trusted side's class-wide cache (default: "
                   "$AUTOGRADER_CACHE_DIR or ~/.cache/jax-scaling-course)")
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="grade on a Dask cluster secured with the course's certificates: its "
                   "scheduler's address, like tls://host:8786 (the workers need this package, "
                   "bubblewrap and the worker certificate; reports and the CSV are written "
                   "here; docs/cluster.md)")
    g.add_argument("--cluster-credentials", metavar="FOLDER",
                   help="the folder `python -m autograder cluster-certs` wrote (ca.pem, "
                   "client.pem, client-key.pem, mode 0600); default: "
                   "$AUTOGRADER_CLUSTER_CREDENTIALS")
    g.add_argument("--insecure-scheduler", action="store_true",
                   help="allow a plain tcp:// scheduler without credentials: ONLY for a "
                   "cluster on one private machine no one else can reach (anyone who reaches "
                   "the scheduler runs code on the workers and reads the seed and hand-ins)")
    g.add_argument("--roster", metavar="CSV",
                   help="a flat folder exported by an LMS: the LMS's roster (a CSV with a "
                   "header, one column of LMS ids like id or user_id, one of names like "
                   "student or name; or nbgrader's student CSV, id and lms_user_id); each file then belongs to the student whose id the LMS "
                   "wrote in its name, read where the LMS's layout puts it (Canvas: "
                   "name_12345_67890_file.ipynb; Moodle: Full Name_1234_assignsubmission_file_"
                   "file.ipynb), not from the name text a student chose; files it cannot place "
                   "are refused alone")
    g.add_argument("--lms", choices=("canvas", "moodle"),
                   help="with --roster: the LMS whose file-name layout the folder has (default: "
                   "the one every file name fits)")
    g.add_argument("--gradebook", metavar="DB",
                   help="also write the grades into nbgrader's gradebook (an SQLAlchemy URL "
                   "such as sqlite:///gradebook.db, or an sqlite file), per graded cell, for "
                   "formgrader, nbgrader export and generate_feedback")
    g.set_defaults(func=_cmd)


def _cmd(a) -> int:
    from ..classroom.credentials import CredentialsError
    from ..supervisor.options import (
        IsolationUnavailable,
        Options,
        check_options,
    )
    from .options import limits_of, refuse

    if a.gradebook:  # said before any grading, not after
        try:
            import nbgrader.api  # noqa: F401
        except ImportError:
            print("--gradebook needs nbgrader: pip install '.[nbgrader]'", file=sys.stderr)
            return 2
        from ..classroom.gradebook import ROOT as PACKAGE_ROOT
        from ..classroom.gradebook_sync import before_grading
        from ..classroom.seed import course_root

        why = before_grading(a.gradebook, course_root(Path(a.dir)) or PACKAGE_ROOT)
        if why:
            print(why, file=sys.stderr)
            return 2

    root = Path(a.dir)
    if not root.is_dir():
        print(f"no such folder: {root}", file=sys.stderr)
        return 2
    roster = None
    if a.roster:  # checked before anything is graded
        from ..classroom.roster import RosterError, read
        from ..classroom.seed import course_root

        if course_root(root) is not None or (root / "submitted").is_dir():
            print(f"--roster places the files of a flat folder; {root} is an nbgrader course "
                  "folder, whose students are its folders' names: leave --roster out",
                  file=sys.stderr)
            return 2
        try:
            roster = dataclasses.replace(read(Path(a.roster)), lms=a.lms)
        except RosterError as e:
            return refuse(e)
    elif a.lms:
        print("--lms goes with --roster", file=sys.stderr)
        return 2
    opts = Options(quick=a.quick, seed=a.seed, with_speed=not a.no_speed, limits=limits_of(a),
                   isolation=not a.no_isolation)
    if a.cache_dir:
        opts.cache_dir = Path(a.cache_dir)
    security = None
    if a.scheduler:
        from ..classroom.cluster import ClusterUnavailable, require_distributed

        try:
            require_distributed()
        except ClusterUnavailable as e:
            print(e, file=sys.stderr)
            return 2
        try:
            security = _cluster_security(a)
        except CredentialsError as e:  # said before anything is graded
            print(f"refusing the scheduler: {e}", file=sys.stderr)
            return 2
    elif a.cluster_credentials or a.insecure_scheduler:
        print("--cluster-credentials and --insecure-scheduler go with --scheduler",
              file=sys.stderr)
        return 2
    try:
        # on a cluster, each worker checks that it can isolate student code (this machine
        # runs none)
        check_options(dataclasses.replace(opts, isolation=False) if a.scheduler else opts)
    except (ValueError, IsolationUnavailable) as e:
        return refuse(e)
    t0 = time.monotonic()
    try:
        outcomes = grade_all(root, workers=a.workers, out=Path(a.out),
                             reports=Path(a.reports) if a.reports else None,
                             force=True if a.force else frozenset(a.student or ()) or False,
                             opts=opts, progress=not a.no_progress, scheduler=a.scheduler,
                             security=security, insecure_scheduler=a.insecure_scheduler,
                             roster=roster)
    except UnknownStudent as e:  # said before anything is graded
        return refuse(e)
    except (OSError, TimeoutError, CredentialsError) as e:
        if not a.scheduler:
            raise
        from ..classroom.cluster import SchedulerRefused

        print(str(e) if isinstance(e, (SchedulerRefused, CredentialsError)) else
              f"cannot reach the Dask scheduler at {a.scheduler}: {e}", file=sys.stderr)
        return 2
    if a.gradebook:
        from ..classroom.batch import write_all
        from ..classroom.gradebook import course_config, lateness, publish, students
        from ..classroom.seed import course_root

        course = course_root(root)
        reps = [o.report for o in outcomes]
        n = publish(reps, a.gradebook, config=course_config(course))
        print(f"{n} grade(s) written to the gradebook {a.gradebook}", file=sys.stderr)
        # how late, as nbgrader computed it there: into the CSV and the class report
        late = lateness(reps, a.gradebook)
        for o in outcomes:
            o.report.update(late.get((str(o.report.get("student")),
                                      o.report.get("assignment")), {}))
        write_all(outcomes, Path(a.out),
                  Path(a.reports) if a.reports else Path(a.out).parent / "reports",
                  students=set(students(a.gradebook))
                  | set(roster.students.values() if roster is not None else ()))
        n_late = sum(1 for v in late.values() if v["seconds_late"] > 0)
        if n_late:
            print(f"{n_late} hand-in(s) late (the CSV's seconds_late and late_penalty, as "
                  "nbgrader export shows them)", file=sys.stderr)
        if course is not None:  # nbgrader generate_feedback reads autograded notebooks
            from ..classroom.nbgrader_plugin import write_autograded

            files = write_autograded(course, outcomes, a.gradebook)
            print(f"{len(files)} autograded notebook(s) written under {course / 'autograded'} "
                  "(nbgrader generate_feedback ASSIGNMENT makes the feedback)", file=sys.stderr)
    refused = [o for o in outcomes if o.report.get("refused")]
    graded = [o for o in outcomes if not o.skipped and not o.report.get("refused")]
    print(f"{len(outcomes)} submission(s): {len(graded)} graded, {len(refused)} refused, "
          f"{sum(o.skipped for o in outcomes)} unchanged since the last run; "
          f"{time.monotonic() - t0:.1f} s; CSV: {a.out}; class report: "
          f"{class_report_path(Path(a.out))}"
          + (f"; on the INSECURE scheduler {a.scheduler} (no TLS, no authentication)"
             if a.scheduler and a.insecure_scheduler else ""), file=sys.stderr)
    if outcomes and not graded:
        print("nothing was graded: every hand-in is unchanged since its last grading (its "
              "report reused"
              + (", on this machine; no task went to the cluster" if a.scheduler else "")
              + "); --force grades every hand-in again, --student NAME one student's",
              file=sys.stderr)
    for o in refused:  # the hand-in's own: a person fixes it, the grader cannot
        print(f"refused: {o.item.key}: {o.report['refused']}", file=sys.stderr)
    if refused:
        print(f"{len(refused)} hand-in(s) refused before grading (the hand-in, not the grader: "
              "listed under 'needs a look'); fix them and grade again", file=sys.stderr)
    for o in outcomes:
        if o.report.get("timestamp_problem"):  # nbgrader autograde fails such a hand-in
            print(f"handed-in time unknown: {o.item.key}: {o.report['timestamp_problem']} "
                  "(no time written to the gradebook)", file=sys.stderr)
    regrade = [o for o in outcomes if o.report.get("needs_regrade")]
    failed = [o for o in outcomes if o.report.get("error")]
    if regrade or failed:
        # the grader's own failures: not the students'; the next run grades them again
        for o in regrade:
            print(f"needs regrade: {o.item.key}: {', '.join(o.report['needs_regrade'])}",
                  file=sys.stderr)
        for o in failed:
            print(f"not graded: {o.item.key}: {o.report['error']}", file=sys.stderr)
        print(f"{len(regrade) + len(failed)} hand-in(s) need another run (the grader's fault, "
              "never a zero): run the same command again", file=sys.stderr)
        return 1
    return 0


def _cluster_security(a):
    """The ``Security`` of this client for ``--scheduler``: the course's client credentials,
    read once and checked; None for ``--insecure-scheduler`` (said aloud). Raises
    CredentialsError (a ValueError) for a plain address or missing or unusable credentials."""
    from ..classroom import credentials

    if a.insecure_scheduler:
        print(f"WARNING: --insecure-scheduler: {a.scheduler} is used without TLS or "
              "authentication; anyone who can reach it can run code on the grading workers and "
              "read the run's secret seed and every hand-in. Only for a cluster on one private "
              "machine.", file=sys.stderr)
        return None
    problem = credentials.scheme_problem(a.scheduler)
    if problem:
        raise credentials.CredentialsError(problem)
    creds = credentials.load(Path(a.cluster_credentials) if a.cluster_credentials else None)
    return creds.security()
