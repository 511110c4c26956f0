"""The local cluster's TLS material: a CA and broker certificates that verify for 127.0.0.1,
made once and made again when missing, expiring or no longer signed by the CA."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kmon.local import tls
from kmon.local.tls import TlsFiles, ensure_tls


def _openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    files = TlsFiles(tmp_path_factory.mktemp("tls"))
    ensure_tls(files, [1, 2])
    return files


def test_broker_certificates_verify_for_loopback_against_the_ca(made: TlsFiles) -> None:
    for n in (1, 2):
        pem = str(made.broker_pem(n))
        for host in (["-verify_ip", "127.0.0.1"], ["-verify_hostname", "localhost"]):
            done = _openssl("verify", "-CAfile", str(made.ca_cert), "-purpose", "sslserver",
                            *host, pem)
            assert done.returncode == 0, done.stdout + done.stderr
        assert _openssl("verify", "-CAfile", str(made.ca_cert), "-verify_ip", "10.0.0.1",
                        pem).returncode != 0
        # Kafka's PEM key store: an unencrypted PKCS#8 key, then the chain
        text = Path(pem).read_text()
        assert text.startswith("-----BEGIN PRIVATE KEY-----")
        assert text.count("-----BEGIN CERTIFICATE-----") == 2


def test_present_material_is_kept(made: TlsFiles) -> None:
    before = {p: p.read_bytes() for p in made.root.iterdir()}
    ensure_tls(made, [1, 2])
    assert {p: p.read_bytes() for p in made.root.iterdir()} == before


def test_missing_or_expiring_material_is_made_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = TlsFiles(tmp_path)
    ensure_tls(files, [1, 2])
    first_ca, first_2 = files.ca_cert.read_bytes(), files.broker_pem(2).read_bytes()
    files.broker_pem(1).unlink()
    ensure_tls(files, [1, 2])
    assert files.broker_pem(1).is_file()
    assert (files.ca_cert.read_bytes(), files.broker_pem(2).read_bytes()) == (first_ca, first_2)
    # Everything "expires within" a renewal window longer than the CA's life: all made anew,
    # and the brokers' certificates then chain to the new CA.
    monkeypatch.setattr(tls, "RENEW_BEFORE", (tls.CA_DAYS + 1) * 86400)
    ensure_tls(files, [1, 2])
    assert files.ca_cert.read_bytes() != first_ca
    assert files.broker_pem(2).read_bytes() != first_2
    assert _openssl("verify", "-CAfile", str(files.ca_cert),
                    str(files.broker_pem(2))).returncode == 0
