"""``python -m autograder cluster-certs FOLDER``: the course cluster's certificates
(:mod:`autograder.classroom.credentials`)."""
from __future__ import annotations

import sys
from pathlib import Path


def add_parser(sub) -> None:
    c = sub.add_parser("cluster-certs", help="write the course cluster's TLS authority and the "
                       "scheduler's, workers' and client's certificates and keys (mode 0600) "
                       "for grade-all --scheduler tls://... (docs/cluster.md)")
    c.add_argument("folder", help="where to write them (made mode 0700)")
    c.add_argument("--days", type=int, default=365, help="how long they are valid (default 365)")
    c.add_argument("--force", action="store_true",
                   help="replace existing files (every machine then needs the new ones)")
    c.set_defaults(func=_cmd)


def _cmd(a) -> int:
    from ..classroom.credentials import ENV, make_credentials

    if a.days < 1:
        print("--days: at least 1", file=sys.stderr)
        return 2
    try:
        files = make_credentials(Path(a.folder), days=a.days, force=a.force)
    except FileExistsError as e:
        print(e, file=sys.stderr)
        return 2
    except ImportError:
        print("cluster-certs needs cryptography: pip install 'jax-scaling-course[cluster]'",
              file=sys.stderr)
        return 2
    d = Path(a.folder)
    print("\n".join(str(f) for f in files))
    print(f"""
valid for {a.days} days. Hand out, each file mode 0600, never to a student:
  the scheduler's machine: {d}/ca.pem {d}/scheduler.pem {d}/scheduler-key.pem
      dask scheduler --protocol tls --tls-ca-file ca.pem --tls-cert scheduler.pem --tls-key scheduler-key.pem
  each worker's machine:   {d}/ca.pem {d}/worker.pem {d}/worker-key.pem
      dask worker tls://SCHEDULER:8786 --tls-ca-file ca.pem --tls-cert worker.pem --tls-key worker-key.pem
  here (grade-all):        {d}/ca.pem {d}/client.pem {d}/client-key.pem
      python -m autograder grade-all submitted/ --scheduler tls://SCHEDULER:8786 --cluster-credentials {d}
      (or export {ENV}={d})""", file=sys.stderr)
    return 0
