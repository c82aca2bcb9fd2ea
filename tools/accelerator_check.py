"""Does the course work on this host? Run it on any new host: a laptop, a one-GPU machine, a TPU VM.

    python tools/accelerator_check.py [--assignment ps1_sharding ...] [--quick] [--out DIR]
                                      [--part-seconds S]

As a student and an instructor would, with the reference answers (each release notebook with the
instructor's solution cells pasted in, as ``make demo``'s ada hands it in):

1. devices: JAX's default backend, the course's devices and where grading runs;
2. for each assignment, the release folder's own ``pytest`` (the student's self-check);
3. each solved notebook executed top to bottom (no cell in error);
4. ``python -m autograder doctor`` (its end-to-end grading of a right hand-in included);
5. ``python -m autograder grade`` of each solved notebook (full marks expected).

It ends with one line per part and exits 1 if any failed. CI runs it on CPU; on a host lent an
accelerator, run it there and keep its table (docs/students.md lists the hosts verified).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

#: seconds any one part may take before it is stopped and failed (``--part-seconds``)
PART_S = 1800.0


@dataclass
class Part:
    name: str
    ok: bool
    detail: str
    seconds: float

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name:<34} {self.seconds:6.1f} s  {self.detail}"


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _run(argv: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=PART_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(argv, 124, _text(e.stdout),
                                           _text(e.stderr) + f"\ntimed out after {PART_S:g} s")


def devices_part(out) -> Part:
    t0 = time.monotonic()
    code = ("from autograder.core.devices import describe_devices\n"
            "from autograder.supervisor.platform import grader_platform\n"
            "print(describe_devices())\n"
            "print('grading processes:', grader_platform().how)\n")
    p = _run([sys.executable, "-c", code], ROOT)
    out(p.stdout.strip() or p.stderr.strip()[-2000:])
    first = next((l for l in p.stdout.splitlines() if l.startswith("course meshes")), "")
    return Part("devices", p.returncode == 0, first or p.stderr.strip()[-300:],
                time.monotonic() - t0)


def solved_folder(asg: str, dest: Path) -> Path:
    """A copy of the release folder whose notebook holds the reference answers."""
    from build_notebooks import answered, nbformat

    folder = dest / asg
    shutil.copytree(ROOT / "release" / asg, folder)
    nbformat.write(answered(asg), folder / f"{asg}.ipynb")
    return folder


def pytest_part(asg: str, folder: Path, out) -> Part:
    t0 = time.monotonic()
    p = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], folder)
    tail = p.stdout.strip().splitlines()[-1:] or [p.stderr.strip()[-300:]]
    if p.returncode != 0:
        out(p.stdout[-4000:] + p.stderr[-2000:])
    return Part(f"{asg}: folder pytest", p.returncode == 0, tail[0], time.monotonic() - t0)


def notebook_part(asg: str, folder: Path, out) -> Part:
    """Run the solved notebook in its folder; the cells in error are the failure."""
    from build_notebooks import nbformat
    from nbclient import NotebookClient

    t0 = time.monotonic()
    nb = nbformat.read(folder / f"{asg}.ipynb", as_version=4)
    client = NotebookClient(nb, timeout=PART_S, allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    try:
        client.execute()
    except Exception as e:  # noqa: BLE001 - a dead kernel is this part's failure
        return Part(f"{asg}: notebook", False, f"the run stopped: {type(e).__name__}: "
                    f"{str(e)[:300]}", time.monotonic() - t0)
    errors = [f"cell {i}: {o.get('ename')}: {str(o.get('evalue'))[:200]}"
              for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    for e in errors:
        out(f"  {asg}: {e}")
    code = sum(c.cell_type == "code" for c in nb.cells)
    return Part(f"{asg}: notebook", not errors,
                f"{code} code cells, {len(errors)} in error", time.monotonic() - t0)


def doctor_part(out) -> Part:
    t0 = time.monotonic()
    p = _run([sys.executable, "-m", "autograder", "doctor"], ROOT)
    out(p.stdout.strip() + ("\n" + p.stderr.strip()[-2000:] if p.returncode else ""))
    last = (p.stdout.strip().splitlines() or ["no output"])[-1]
    return Part("doctor", p.returncode == 0 and last == "ready to grade", last,
                time.monotonic() - t0)


def grade_part(asg: str, folder: Path, quick: bool, out) -> Part:
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "autograder", "grade", "--json", "--assignment", asg,
            str(folder / f"{asg}.ipynb")] + (["--quick"] if quick else [])
    p = _run(argv, ROOT)
    try:
        rep = json.loads(p.stdout)
    except ValueError:
        out(p.stdout[-2000:] + p.stderr[-2000:])
        return Part(f"{asg}: grade", False, f"no report (exit {p.returncode})",
                    time.monotonic() - t0)
    short = [f"{n}: {f.get('needs_regrade') or '; '.join(c['name'] + ': ' + c['message'][:200] for c in f['checks'] if not c['passed'])}"
             for n, f in rep["functions"].items() if f["score"] < f["max_score"]]
    for s in short:
        out(f"  {asg}: {s}")
    return Part(f"{asg}: grade", not short and rep["score"] == rep["max_score"],
                f"{rep['score']:g}/{rep['max_score']:g}", time.monotonic() - t0)


def main(argv=None) -> int:
    global PART_S
    from autograder.course import registry

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--assignment", action="append", choices=registry.assignments(),
                    help="only these (default: every assignment)")
    ap.add_argument("--quick", action="store_true", help="grade on fewer meshes and cases")
    ap.add_argument("--out", type=Path, help="also write the details and the table here")
    ap.add_argument("--part-seconds", type=float, default=PART_S, metavar="S",
                    help=f"stop and fail any one part after S seconds (default {PART_S:g})")
    a = ap.parse_args(argv)
    if a.part_seconds <= 0:
        ap.error("--part-seconds must be positive")
    PART_S = a.part_seconds
    # as a student or instructor runs it: nobody on a new host chooses JAX's CPU device count
    # (the Makefile does, for the suite), so every part must find its devices itself
    os.environ.pop("JAX_NUM_CPU_DEVICES", None)
    assignments = a.assignment or list(registry.assignments())
    log: list[str] = []

    def out(text: str) -> None:
        if text:
            print(text, flush=True)
            log.append(text)

    parts = [devices_part(out)]
    with tempfile.TemporaryDirectory(prefix="accelerator-check-") as d:
        folders = {asg: solved_folder(asg, Path(d)) for asg in assignments}
        for asg, folder in folders.items():
            parts.append(pytest_part(asg, folder, out))
            out(parts[-1].line())
        for asg in assignments:  # a fresh copy: the folder's own pytest wrote nothing in it
            parts.append(notebook_part(asg, solved_folder(asg, Path(d) / "nb"), out))
            out(parts[-1].line())
        parts.append(doctor_part(out))
        for asg, folder in folders.items():
            parts.append(grade_part(asg, folder, a.quick, out))
            out(parts[-1].line())
    table = "\n".join(p.line() for p in parts)
    failed = [p.name for p in parts if not p.ok]
    summary = (f"failed: {', '.join(failed)}\n" if failed else "") + (
        f"accelerator_check: {len(parts) - len(failed)} passed, {len(failed)} failed")
    print("\n" + table + "\n" + summary)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "accelerator_check.txt").write_text("\n".join(log) + "\n\n" + table + "\n"
                                                     + summary + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
