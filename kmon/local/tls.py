"""TLS material of the local cluster's SASL_SSL listeners: a self-signed CA and one server
certificate per broker, made with ``openssl`` and kept under ``<KMON_HOME>/kafka/tls/``::

    ca.crt, ca.key      the CA; clients trust ca.crt (``LocalCluster.ca_path``)
    broker-<N>.pem      broker N's unencrypted PKCS#8 key, its certificate and the CA's, the
                        PEM key store Kafka reads (``ssl.keystore.type=PEM``, KIP-651)

Server certificates name ``127.0.0.1`` and ``localhost`` (subjectAltName), so clients can
verify host names (``ssl.endpoint.identification.algorithm=https``, librdkafka's and Java's
default). Whatever is missing, expires within ``RENEW_BEFORE`` or no longer chains to the CA
is made again; everything else is left as it is (a running broker keeps reading its file).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kmon.env import SettingError

CA_DAYS = 3650
SERVER_DAYS = 825
RENEW_BEFORE = 7 * 86400  # seconds: a certificate closer than this to expiry is made again
SUBJECT_ALT_NAMES = "IP:127.0.0.1,DNS:localhost"

# The CA's own extensions, given explicitly so nothing depends on the system's openssl.cnf.
_CA_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
x509_extensions = ca
[dn]
CN = kmon local cluster CA
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""

_SERVER_EXTENSIONS = f"""\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {SUBJECT_ALT_NAMES}
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class TlsFiles:
    """Where the local cluster's TLS material is (see the module docstring)."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    def broker_pem(self, node_id: int) -> Path:
        return self.root / f"broker-{node_id}.pem"


def ensure_tls(files: TlsFiles, node_ids: Iterable[int]) -> None:
    """Make whatever certificates are missing, expiring or not signed by the current CA."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise SettingError("openssl not found on PATH: the SASL_SSL listeners need it")
    files.root.mkdir(parents=True, exist_ok=True)
    new_ca = not _valid(openssl, files.ca_cert) or not files.ca_key.is_file()
    if new_ca:
        _make_ca(openssl, files)
    for n in node_ids:
        pem = files.broker_pem(n)
        if new_ca or not _valid(openssl, pem) or not _signed_by(openssl, pem, files.ca_cert):
            _make_server(openssl, files, n)


def _run(openssl: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([openssl, *args], capture_output=True, text=True, check=False)


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        raise SettingError(f"openssl failed to {what}: {done.stderr.strip()[-1000:]}")


def _valid(openssl: str, cert: Path) -> bool:
    """A readable certificate that is not about to expire."""
    if not cert.is_file():
        return False
    return _run(openssl, "x509", "-in", str(cert), "-noout",
                "-checkend", str(RENEW_BEFORE)).returncode == 0


def _signed_by(openssl: str, cert: Path, ca: Path) -> bool:
    return _run(openssl, "verify", "-CAfile", str(ca), str(cert)).returncode == 0


def _make_ca(openssl: str, files: TlsFiles) -> None:
    with tempfile.TemporaryDirectory(dir=files.root) as tmp:
        config = Path(tmp) / "ca.cnf"
        config.write_text(_CA_CONFIG)
        key, cert = Path(tmp) / "ca.key", Path(tmp) / "ca.crt"
        _check(_run(openssl, "req", "-x509", "-newkey", "rsa:2048", "-noenc",
                    "-keyout", str(key), "-out", str(cert), "-days", str(CA_DAYS),
                    "-config", str(config)), "make the local CA")
        key.chmod(0o600)
        # Key first: a cert without its key would pass the next run's checks.
        key.replace(files.ca_key)
        cert.replace(files.ca_cert)


def _make_server(openssl: str, files: TlsFiles, node_id: int) -> None:
    with tempfile.TemporaryDirectory(dir=files.root) as tmp:
        key, csr, cert = (Path(tmp) / name for name in ("key.pem", "req.csr", "cert.pem"))
        extensions = Path(tmp) / "ext.cnf"
        extensions.write_text(_SERVER_EXTENSIONS)
        _check(_run(openssl, "req", "-new", "-newkey", "rsa:2048", "-noenc",
                    "-keyout", str(key), "-out", str(csr),
                    "-subj", f"/CN=kmon broker {node_id}"), f"make broker {node_id}'s key")
        _check(_run(openssl, "x509", "-req", "-in", str(csr), "-CA", str(files.ca_cert),
                    "-CAkey", str(files.ca_key), "-set_serial", str(secrets.randbits(63)),
                    "-days", str(SERVER_DAYS), "-extfile", str(extensions), "-out", str(cert)),
               f"sign broker {node_id}'s certificate")
        pem = Path(tmp) / "broker.pem"
        # Kafka's PEM key store: the private key and the chain, leaf first, in one file.
        pem.write_text(key.read_text() + cert.read_text() + files.ca_cert.read_text())
        pem.chmod(0o600)
        pem.replace(files.broker_pem(node_id))
