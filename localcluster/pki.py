"""Certificates and kubeconfigs for the local control plane (one CA signs everything)."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)
# Backdated so a slightly skewed clock never sees a not-yet-valid certificate.
_BACKDATE = dt.timedelta(hours=1)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class CertificateAuthority:
    """An in-memory CA; `write` stores it as ca.crt/ca.key."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert

    @classmethod
    def create(cls, common_name: str = "localcluster-ca") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{key_path}: expected an EC key")
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path) -> tuple[Path, Path]:
        return _write_pair(directory, "ca", self.cert_pem, _key_pem(self.key))

    def issue(
        self,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        client: bool = False,
        server_names: tuple[str, ...] = (),
    ) -> tuple[bytes, bytes]:
        """Return (cert PEM, key PEM) for a client and/or serving certificate."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = []
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(_sans(server_names)), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _sans(names: tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _write_pair(directory: Path, stem: str, cert_pem: bytes, key_pem: bytes) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert_pem)
    key_path.touch(mode=0o600)
    key_path.write_bytes(key_pem)
    return cert_path, key_path


def write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """RSA key pair the apiserver signs and verifies ServiceAccount tokens with: (sa.pub, sa.key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    directory.mkdir(parents=True, exist_ok=True)
    pub_path, key_path = directory / "sa.pub", directory / "sa.key"
    pub_path.write_bytes(pub)
    key_path.touch(mode=0o600)
    key_path.write_bytes(_key_pem(key))
    return pub_path, key_path


def write_kubeconfig(
    path: Path, *, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str
) -> Path:
    """A self-contained kubeconfig (certificates embedded), so it can be copied anywhere."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "localcluster", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": "localcluster", "context": {"cluster": "localcluster", "user": user}}],
        "current-context": "localcluster",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


def kubelet_client_flags(ca: CertificateAuthority, pki_dir: Path) -> list[str]:
    """The apiserver's side of the kubelet API (logs, exec): a client certificate, and the CA of the
    kubelets' serving certificates."""
    cert, key = ca.issue(KUBELET_CLIENT_USER, client=True)
    crt, k = _write_pair(pki_dir, "apiserver-kubelet-client", cert, key)
    return [
        f"--kubelet-client-certificate={crt}",
        f"--kubelet-client-key={k}",
        f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
    ]
