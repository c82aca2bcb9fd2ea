"""The untrusted worker: loads a submission and turns its functions into programs.

    python -s -P -m autograder.worker SUBMISSION [--skip 3,7] [--statement-timeout 20]
    python -s -P -m autograder.worker NOTEBOOK --execute [--cell-timeout 300] [--until 26]

Started by the trusted grader (:mod:`autograder.judge`) inside the sandbox
(:mod:`autograder.isolation`). It runs the student's Python and nothing that matters: it loads
the submission's definitions, reports :class:`~autograder.core.records.Loading` before each statement
(so a statement that hangs or kills the interpreter can be skipped next time) and
:class:`~autograder.core.records.Loaded` at the end, then answers each
:class:`~autograder.core.records.ExportRequest` read from stdin with an
:class:`~autograder.core.records.ExportReply` (a serialized ``jax.export`` artifact or an error text).

Nothing here decides a grade. The student's code shares this process and may do anything to it;
whatever it makes this process say is only ever data that the trusted grader checks.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _reply_channel():
    """Keep the real stdout for records; the student's prints go to stderr (the log)."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main(argv=None) -> int:
    from ..core.records import Limits

    ap = argparse.ArgumentParser(prog="python -m autograder.worker")
    ap.add_argument("submission", type=Path)
    ap.add_argument("--skip", default="", help="comma-separated statement indices not to run")
    ap.add_argument("--statement-timeout", type=float, default=Limits.statement_s)
    ap.add_argument("--execute", action="store_true",
                    help="run the whole notebook (in a copy of its folder) and send it back")
    ap.add_argument("--cell-timeout", type=float, default=300.0)
    ap.add_argument("--until", type=int, default=None,
                    help="run the cells before this index only (the rest is sent back as is)")
    ap.add_argument("--folder-on-path", action="store_true",
                    help="the submission's folder is importable (its helper modules)")
    ap.add_argument("--functions", default="",
                    help="comma-separated names of the graded functions (the judge's list)")
    a = ap.parse_args(argv)
    out = _reply_channel()

    def send(record) -> None:
        out.write(record.to_line())
        out.flush()

    if a.execute:
        send(execute_notebook(a.submission, a.cell_timeout, a.until))
        return 0

    from ..core.imports import unimportable

    missing = unimportable()
    if missing:  # said before any of the hand-in's code runs: the grader's environment
        from ..core.records import Unready

        send(Unready(missing))
        return 0
    from ..core.devices import setup_devices
    from ..core.mlir_reuse import reuse_per_thread

    setup_devices()
    reuse_per_thread()  # the exports' contexts (before the hand-in's code runs)
    from ..core.loader import load
    from ..core.meshes import make_mesh
    from ..core.records import ExportRequest, Loaded, Loading, Quit, RecordError, parse
    from .exporting import export_one, quiet_debug_callbacks

    quiet_debug_callbacks()
    if a.folder_on_path:
        sys.path.insert(0, str(a.submission.resolve().parent))
    graded = {n for n in a.functions.split(",") if n}
    skip = {int(s) for s in a.skip.split(",") if s.strip()}
    try:
        loaded = load(a.submission, skip=skip, statement_timeout=a.statement_timeout,
                      on_statement=lambda i, where: send(Loading(i, where)), keep_names=graded)
        ns, notes = loaded.namespace, loaded.notes
    except Exception as e:  # noqa: BLE001 - an unreadable file: every function "not found"
        ns, notes = {}, [f"could not read the submission: {e}"]
    send(Loaded(sorted(n for n, v in ns.items() if callable(v) and n in graded), notes))
    for line in sys.stdin:
        try:
            req = parse(line, allowed=(ExportRequest, Quit))
        except RecordError:
            continue
        if isinstance(req, Quit):
            break
        fn = ns.get(req.function)
        if not callable(fn):
            from ..core.records import ExportReply

            send(ExportReply.of(req.id, error=f"function {req.function!r} not found in the "
                                "submission"))
            continue
        send(export_one(fn, req, make_mesh))
    return 0


def execute_notebook(path: Path, cell_timeout: float, until: int | None = None):
    """Run the notebook's cells (those before index ``until``, if given; the rest come back as
    they were) in a writable copy of its folder (errors kept as outputs). A cell still running
    after ``cell_timeout`` seconds stops the run there (nbclient's way): the cells below it are
    not run, and the record names that cell (``stopped_cell``)."""
    import shutil

    from ..core.imports import light_nbformat
    from ..core.records import ExecutedNotebook

    nbformat = light_nbformat()  # before nbclient, which imports it too
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    work = Path(os.environ.get("HOME", "/tmp")) / "work"
    shutil.copytree(path.parent, work, dirs_exist_ok=True)
    # what nbgrader's own Execute step tells a kernel: the notebook's check, tpu_profile and
    # memory_profile cells then step aside (the grader's report holds their verdicts), so the
    # run for the feedback costs the student's own cells only
    # (set for the kernel this run starts, and put back after it: a caller's own process, a
    # test's, keeps its environment)
    before = os.environ.get("NBGRADER_EXECUTION")
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    nb = nbformat.read(work / path.name, as_version=4)
    rest = nb.cells[until:] if until is not None else []
    nb.cells = nb.cells[:until] if until is not None else nb.cells
    running = [None]

    def started(cell, cell_index) -> None:
        running[0] = cell_index

    client = NotebookClient(nb, timeout=max(1, int(cell_timeout)), allow_errors=True,
                            kernel_name="python3", resources={"metadata": {"path": str(work)}},
                            shutdown_kernel="immediate", on_cell_start=started)
    stopped = None
    try:
        client.execute()
    except CellTimeoutError:  # nbclient stops the run at the cell that ran too long
        stopped = running[0]
    except Exception as e:  # noqa: BLE001 - a dead kernel: send what ran
        print(f"notebook execution stopped: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        if before is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = before
    nb.cells.extend(rest)
    return ExecutedNotebook(nbformat.writes(nb), stopped_cell=stopped)


if __name__ == "__main__":
    sys.exit(main())
