"""Files written whole: a reader (another grader, a later run) sees the old file or the new
one, never half of one.

    with replaced(path) as tmp:
        tmp.write_text(text)

The block writes ``tmp``, a hidden file beside ``path`` named after this process and thread (so
two writers never share one); it is renamed onto ``path`` when the block ends, and removed if
the block raises.
"""
from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replaced(path: Path) -> Iterator[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
