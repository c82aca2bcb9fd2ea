"""Names as they may appear in a file name or a Dask key."""
from __future__ import annotations

import re


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@+-]", "_", s) or "_"
