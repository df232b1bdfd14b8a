"""SSH key generation: the one impure helper (randomness). render() never calls it; the CLI and the
controller do, and pass the key in through Observed.fresh_ssh_key."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from render.api import SSHKey


def generate_ssh_key() -> SSHKey:
    return key_from_private(ec.generate_private_key(ec.SECP521R1()))


def key_from_private(private: ec.EllipticCurvePrivateKey) -> SSHKey:
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return SSHKey(private_pem=pem, public_openssh=public.decode() + "\n")


def load_ssh_key(pem: str) -> SSHKey:
    """The key pair for a PEM `EC PRIVATE KEY` (e.g. the CLI's --ssh-key)."""
    private = serialization.load_pem_private_key(pem.encode(), password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise ValueError("the SSH key must be an ECDSA private key")
    return key_from_private(private)
