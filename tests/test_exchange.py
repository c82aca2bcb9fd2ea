"""nbgrader's exchange as docs/instructor.md sets it up: an exchange folder outside the course
folder, named for the students by a system-wide config (here a folder on JUPYTER_CONFIG_PATH,
which nbgrader reads as it reads /etc/jupyter) or by --Exchange.root; release_assignment,
fetch_assignment, submit and collect run as nbgrader's own commands, and the hand-in lands where
grade-all finds it, with its time (nothing is graded)."""
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from autograder.classroom.batch import discover, handed_in

pytestmark = pytest.mark.orchestration

ASG = "ps1_sharding"
COURSE_ID = "jax-scaling"


def _docs_system_config() -> str:
    """The system-wide config docs/instructor.md gives (its exchange path, as written)."""
    text = (ROOT / "docs" / "instructor.md").read_text()
    m = re.search(r"```python\n(# /etc/jupyter/nbgrader_config\.py.*?)```", text, re.S)
    assert m, "instructor.md gives no /etc/jupyter/nbgrader_config.py"
    return m.group(1)


def _nbgrader(args, cwd, env):
    p = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (args, p.stdout[-3000:] + p.stderr[-3000:])
    return p.stdout + p.stderr


def test_release_fetch_submit_collect_through_an_exchange_outside_the_course(tmp_path):
    system = _docs_system_config()
    documented = re.search(r'c\.Exchange\.root = "([^"]+)"', system).group(1)
    exchange = tmp_path / "srv" / "exchange"
    exchange.parent.mkdir()
    exchange.mkdir(mode=0o1777)  # as the docs' install -d -m 1777
    os.chmod(exchange, 0o1777)
    etc = tmp_path / "etc-jupyter"  # stands for /etc/jupyter
    etc.mkdir()
    (etc / "nbgrader_config.py").write_text(system.replace(documented, str(exchange)))

    # the instructor's course folder: this course's own config, with its course id
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(ROOT / "release" / ASG, course / "release" / ASG)
    assert COURSE_ID in (course / "nbgrader_config.py").read_text()
    assert exchange.resolve().is_relative_to(tmp_path / "srv")  # not under the course folder

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_DATA_DIR=str(home / ".local" / "share" / "jupyter"),
               JUPYTER_CONFIG_PATH=str(etc),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",  # alembic
               NBGRADER_DB_URL=f"sqlite:///{course / 'gradebook.db'}",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    _nbgrader(["release_assignment", ASG], course, env)
    # the modes docs/instructor.md lists
    mode = {p: stat.S_IMODE(os.stat(p).st_mode) for p in (
        exchange, exchange / COURSE_ID, exchange / COURSE_ID / "outbound",
        exchange / COURSE_ID / "inbound")}
    assert list(mode.values()) == [0o1777, 0o755, 0o755, 0o2733], {str(k): oct(v)
                                                                   for k, v in mode.items()}

    # a student: no course config in their folder, only the system-wide one
    student = home / "work"
    student.mkdir()
    _nbgrader(["fetch_assignment", ASG, f"--course={COURSE_ID}"], student, env)
    nb = student / ASG / f"{ASG}.ipynb"
    assert nb.is_file() and (student / ASG / "selfcheck").is_dir()
    nb.write_text(nb.read_text().replace("raise NotImplementedError()", "pass  # mine", 1))
    # the other form: no system-wide config, --Exchange.root on the command line
    bare = {k: v for k, v in env.items() if k != "JUPYTER_CONFIG_PATH"}
    _nbgrader(["submit", ASG, f"--course={COURSE_ID}", f"--Exchange.root={exchange}"],
              student, bare)

    said = _nbgrader(["collect", ASG], course, env)
    user = next((exchange / COURSE_ID / "inbound").iterdir()).name.split("+")[0]
    handed = course / "submitted" / user / ASG
    assert "pass  # mine" in (handed / f"{ASG}.ipynb").read_text(), said
    assert (handed / "timestamp.txt").is_file() and (handed / "submission_secret.txt").is_file()
    items = [it for it in discover(course) if it.student == user]
    assert [(it.assignment, it.refused) for it in items] == [(ASG, None)]
    assert handed_in(items[0])["timestamp_from"] == "timestamp.txt"
