"""Certificates and keys for a throwaway local control plane (a CA, serving and client certs)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def at(cls, directory: Path) -> Pki:
        """The file layout of a PKI kept in ``directory``."""
        return cls(
            *(
                directory / name
                for name in (
                    "ca.crt",
                    "ca.key",
                    "apiserver.crt",
                    "apiserver.key",
                    "admin.crt",
                    "admin.key",
                    "sa.key",
                    "sa.pub",
                )
            )
        )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: list[x509.ObjectIdentifier] | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=not ca,
                key_cert_sign=ca,
                crl_sign=ca,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def create_pki(directory: Path) -> Pki:
    """A CA, a serving certificate for 127.0.0.1, an admin client certificate (system:masters)
    and the service-account signing key pair, written into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki.at(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("joulie-local-ca")
    _write_cert(pki.ca_cert, _issue(ca_name, ca_key, ca_name, ca_key, ca=True))
    _write_key(pki.ca_key, ca_key)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName(n)
        for n in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.96.0.1")]
    _write_cert(
        pki.serving_cert,
        _issue(
            _name("kube-apiserver"),
            serving_key,
            ca_name,
            ca_key,
            usage=[ExtendedKeyUsageOID.SERVER_AUTH],
            sans=sans,
        ),
    )
    _write_key(pki.serving_key, serving_key)

    admin_key = ec.generate_private_key(ec.SECP256R1())
    _write_cert(
        pki.admin_cert,
        _issue(
            _name("joulie-admin", "system:masters"),
            admin_key,
            ca_name,
            ca_key,
            usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
        ),
    )
    _write_key(pki.admin_key, admin_key)

    # Service-account tokens are signed with RSA, which every Kubernetes client accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
