"""The course cluster's lock: a certificate authority and one certificate per role, for Dask's own
TLS (:class:`distributed.security.Security`).

``python -m autograder cluster-certs FOLDER`` (:func:`make_credentials`) writes, each file mode
0600 in a folder of mode 0700:

* ``ca.pem``: the course's certificate authority (its key is never written: to add a role or a
  machine, copy the role's files; to rotate, make a fresh folder and hand it out again);
* ``scheduler.pem``/``scheduler-key.pem``, ``worker.pem``/``worker-key.pem``,
  ``client.pem``/``client-key.pem``: one certificate and key per role, signed by that authority.

Dask's TLS is mutual: a peer is admitted when its certificate is signed by the course's
authority, and refused otherwise (no certificate, another authority, plain ``tcp://``). Dask
does not check host names, nor tell roles apart: whoever holds any of these keys is a member of
the cluster. The client's key stays on the machine that runs ``grade-all``; each worker gets the
worker files, the scheduler its own, and no student any.

:func:`load` reads the client's files once (:class:`ClusterCredentials`: the PEM text itself, so
what was checked is what is used) and :meth:`ClusterCredentials.security` makes the
``Security`` of a client that requires encryption.
"""
from __future__ import annotations

import datetime
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: the environment variable naming the folder of the client's credentials
ENV = "AUTOGRADER_CLUSTER_CREDENTIALS"
ROLES = ("scheduler", "worker", "client")
CA = "ca.pem"

#: the addresses a secured cluster is reached at: Dask's TLS, and Dask Gateway's TLS proxy
SECURE_SCHEMES = ("tls://", "gateway://")


class CredentialsError(ValueError):
    """The credentials cannot be used: missing, unreadable, readable by others, or not a pair."""


def files_of(role: str) -> tuple[str, str]:
    """The certificate's and the key's file names of ``role``."""
    if role not in ROLES:
        raise ValueError(f"no role {role!r}; the roles are {', '.join(ROLES)}")
    return f"{role}.pem", f"{role}-key.pem"


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)  # whatever the umask


def make_credentials(folder: Path, *, days: int = 365, name: str = "jax-scaling-course",
                     force: bool = False) -> list[Path]:
    """Write the authority and every role's certificate and key into ``folder`` (made mode
    0700); the files written. Refuses (FileExistsError) to replace existing ones unless
    ``force``: a fresh authority locks out every machine holding the old files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder = Path(folder)
    names = [CA] + [f for r in ROLES for f in files_of(r)]
    present = [n for n in names if (folder / n).exists()]
    if present and not force:
        raise FileExistsError(f"{folder} already holds {', '.join(present)}: a new authority "
                              "would lock out every machine that has the old files (use "
                              "--force to replace them, then hand the new ones out)")
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    for n in present:
        (folder / n).unlink()
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def pem(cert) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} cluster CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    written = [folder / CA]
    _write_private(folder / CA, pem(ca))
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                            f"{name} {role}")]))
                .issuer_name(ca_name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                # every member both listens and connects (a worker serves its peers' data)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(f"dask-{role}")]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256()))
        crt, kf = files_of(role)
        _write_private(folder / crt, pem(cert))
        _write_private(folder / kf, key.private_bytes(serialization.Encoding.PEM,
                                                      serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
        written += [folder / crt, folder / kf]
    return written


@dataclass(frozen=True)
class ClusterCredentials:
    """One role's credentials, read once: the PEM text of the authority, the certificate and
    its key (never sent to a worker: the ``Security`` of this process only)."""

    folder: str
    role: str
    ca: str
    cert: str
    key: str

    def security(self):
        """The ``distributed.security.Security`` of this role, encryption required."""
        from distributed.security import Security

        kw = {"tls_ca_file": self.ca, f"tls_{self.role}_cert": self.cert,
              f"tls_{self.role}_key": self.key}
        return Security(require_encryption=True, **kw)

    def __repr__(self) -> str:  # never the key in a log or a traceback
        return f"ClusterCredentials({self.folder!r}, role={self.role!r})"


def _read_private(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        raise CredentialsError(f"{path} is missing (make the credentials with `python -m "
                               "autograder cluster-certs FOLDER`)") from None
    if not stat.S_ISREG(st.st_mode):
        raise CredentialsError(f"{path} is not a regular file")
    if st.st_mode & 0o077:
        raise CredentialsError(f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}"
                               f"): chmod 600 {path}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CredentialsError(f"cannot read {path}: {e}") from None
    if "-----BEGIN " not in text:
        raise CredentialsError(f"{path} is not a PEM file")
    return text


def load(folder: Optional[Path] = None, role: str = "client") -> ClusterCredentials:
    """``role``'s credentials from ``folder`` (default: ``$AUTOGRADER_CLUSTER_CREDENTIALS``),
    checked: each file private to its owner (mode 0600), the certificate signed by the
    authority, the key its own, and in date. :class:`CredentialsError` says what is wrong."""
    if folder is None:
        env = os.environ.get(ENV)
        if not env:
            raise CredentialsError(f"no cluster credentials: give --cluster-credentials FOLDER "
                                   f"or set {ENV} (make them with `python -m autograder "
                                   "cluster-certs FOLDER`)")
        folder = Path(env)
    folder = Path(folder).expanduser()
    crt, kf = files_of(role)
    creds = ClusterCredentials(str(folder), role, _read_private(folder / CA),
                               _read_private(folder / crt), _read_private(folder / kf))
    problem = check(creds)
    if problem:
        raise CredentialsError(f"{folder}: {problem}")
    return creds


def check(creds: ClusterCredentials, now: Optional[datetime.datetime] = None) -> str:
    """What is wrong with ``creds`` ('' when nothing): the certificate not signed by the
    authority, not matching its key, or out of date."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        ca = x509.load_pem_x509_certificate(creds.ca.encode())
        cert = x509.load_pem_x509_certificate(creds.cert.encode())
        key = serialization.load_pem_private_key(creds.key.encode(), password=None)
    except (ValueError, TypeError) as e:
        return f"cannot read the certificates or the key ({e})"
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # noqa: BLE001 - ValueError, TypeError, InvalidSignature
        return f"{files_of(creds.role)[0]} is not signed by ca.pem (files of two authorities?)"
    if key.public_key().public_numbers() != cert.public_key().public_numbers():
        return f"{files_of(creds.role)[1]} is not the key of {files_of(creds.role)[0]}"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    for what, c in (("ca.pem", ca), (files_of(creds.role)[0], cert)):
        if not c.not_valid_before_utc <= now <= c.not_valid_after_utc:
            return (f"{what} is valid from {c.not_valid_before_utc:%Y-%m-%d} to "
                    f"{c.not_valid_after_utc:%Y-%m-%d}, not now: make new credentials")
    return ""


def expires(creds: ClusterCredentials) -> datetime.datetime:
    """When the first of the authority and the certificate runs out."""
    from cryptography import x509

    return min(x509.load_pem_x509_certificate(t.encode()).not_valid_after_utc
               for t in (creds.ca, creds.cert))


def scheme_problem(address: str) -> str:
    """Why ``address`` is not a secured scheduler's ('' when it is one)."""
    if not isinstance(address, str) or not address.startswith(SECURE_SCHEMES):
        return (f"the scheduler address {address!r} is not a TLS one (tls://HOST:PORT): on a "
                "plain tcp:// scheduler anyone who reaches it runs code on the grading workers "
                "and reads the run's seed and every hand-in; start the scheduler and workers "
                "with the course's certificates (docs/cluster.md), or, on a private machine "
                "no one else can reach, give --insecure-scheduler")
    return ""
