"""tls_certs.py - throwaway certificates for the HTTPS tests (python3-
cryptography): a private CA, a server certificate it signs for 127.0.0.1, a
self-signed one, one for another name, an expired one. Keys are EC P-256,
written unencrypted into the test's own temp dir."""

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DAY = datetime.timedelta(days=1)


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path, cert, key):
    with open(path + ".pem", "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        with open(path + ".key", "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return path + ".pem", path + ".key"


def _cert(subject, key, issuer, issuer_key, sans=None, ca=False,
          not_before=None, not_after=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder()
         .subject_name(_name(subject)).issuer_name(_name(issuer))
         .public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(not_before or now - DAY)
         .not_valid_after(not_after or now + 30 * DAY)
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_all(d):
    """Writes into d and returns {name: (cert path, key path)}: ca, good
    (CA-signed, 127.0.0.1), selfsigned, wrongname (CA-signed, DNS
    other.invalid only), expired (CA-signed, ended yesterday)."""
    os.makedirs(d, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("echofs test CA", ca_key, "echofs test CA", ca_key, ca=True)
    out = {"ca": _write(os.path.join(d, "ca"), ca, ca_key)}
    ip = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for name, kw in (
            ("good", dict(sans=ip)),
            ("wrongname", dict(sans=[x509.DNSName("other.invalid")])),
            ("expired", dict(sans=ip, not_before=now - 30 * DAY,
                             not_after=now - DAY))):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert("127.0.0.1", key, "echofs test CA", ca_key, **kw)
        out[name] = _write(os.path.join(d, name), cert, key)
    key = ec.generate_private_key(ec.SECP256R1())
    self_signed = _cert("127.0.0.1", key, "127.0.0.1", key, sans=ip)
    out["selfsigned"] = _write(os.path.join(d, "selfsigned"), self_signed, key)
    return out
