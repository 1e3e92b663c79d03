"""Signed records: a DSSE envelope (the in-toto/sigstore Dead Simple Signing
Envelope) in the record's ``signature`` field, over a short statement of the
record's content hash (docs/gate.md, "Signed records").

The envelope is the standard one: ``{payloadType, payload (base64),
signatures: [{keyid, sig}]}``, each ``sig`` an Ed25519 signature over
``PAE(payloadType, payload)`` (DSSE's pre-authentication encoding). The
payload is the canonical JSON of ``{schema, content_sha256, plugin}``: the
record itself stays readable JSON beside it, and the sha256 binds every byte
of it, as an in-toto attestation binds its subject by digest. A keyid is the
sha256 of the raw 32-byte public key (printed as its first 16 hex digits).

Keys are PEM files (``openssl genpkey -algorithm ed25519``). ``cryptography``
is needed only here, and only to sign or to verify (the ``sign`` extra:
``pip install 'devicekit[sign]'``); reading a record needs nothing of it.
"""

import base64
import hashlib
import json

from .errors import BadKey, MissingInput, SignatureRefused

PAYLOAD_TYPE = "application/vnd.devicekit.gate.record+json"
STATEMENT = "devicekit.gate.signed-record"


def pae(payload_type, body):
    """DSSE v1 pre-authentication encoding: what is actually signed."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def short(keyid):
    return keyid[:16]


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise BadKey("cryptography", "not installed: --sign and --trust need it (pip install "
                                     "'devicekit[sign]')") from None
    return serialization, ed25519, InvalidSignature


def _raw(public_key):
    serialization, _, _ = _crypto()
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid(public_key):
    return hashlib.sha256(_raw(public_key)).hexdigest()


def _read(path, option):
    try:
        with open(path, "rb") as f:
            return f.read(64 * 1024)  # a PEM key is a few hundred bytes
    except FileNotFoundError:
        raise MissingInput(path, f"{option} key not found") from None
    except OSError as e:
        raise MissingInput(path, f"cannot read the {option} key: {e.strerror}") from None


def load_private(path):
    """The Ed25519 private key in the PEM file ``path`` (``--sign``)."""
    serialization, ed25519, _ = _crypto()
    data = _read(path, "--sign")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's way of saying "it is encrypted"
        raise BadKey(path, "--sign key is encrypted; give an unencrypted PEM key (keep it in "
                           "your CI's secret store)") from None
    except ValueError:
        raise BadKey(path, "--sign is not a PEM private key (make one: openssl genpkey "
                           "-algorithm ed25519 -out KEY.pem)") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise BadKey(path, f"--sign key is {type(key).__name__.replace('_', '')}, not Ed25519 "
                           f"(openssl genpkey -algorithm ed25519)")
    return key


def load_trusted(paths):
    """{keyid: (public key, path)} of the ``--trust`` PEM files."""
    serialization, ed25519, _ = _crypto()
    out = {}
    for path in paths:
        data = _read(path, "--trust")
        try:
            key = serialization.load_pem_public_key(data)
        except ValueError:
            raise BadKey(path, "--trust is not a PEM public key (from a private key: openssl "
                               "pkey -in KEY.pem -pubout -out KEY.pub.pem)") from None
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise BadKey(path, "--trust key is not an Ed25519 public key")
        out[keyid(key)] = (key, str(path))
    return out


def statement(doc, content_sha256):
    p = doc.get("plugin") or {}
    return {"schema": STATEMENT, "content_sha256": content_sha256,
            "plugin": {k: p.get(k) for k in ("name", "version", "sha256")}}


def envelope(doc, content_sha256, private_key):
    """The ``signature`` field of ``doc`` (its content hash already computed)."""
    body = json.dumps(statement(doc, content_sha256), sort_keys=True,
                      separators=(",", ":")).encode()
    sig = private_key.sign(pae(PAYLOAD_TYPE, body))
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(body).decode(),
            "signatures": [{"keyid": keyid(private_key.public_key()),
                            "sig": base64.b64encode(sig).decode()}]}


def verify(path, role, env, content_sha256, trusted):
    """The keyid of the trusted key whose signature in ``env`` covers a record
    whose canonical content hashes to ``content_sha256``; raises
    :class:`SignatureRefused` naming the key and the reason otherwise."""
    _, _, InvalidSignature = _crypto()
    names = ", ".join(f"{short(k)} ({p})" for k, (_, p) in trusted.items())
    if env is None:
        raise SignatureRefused(path, f"{role} is not signed; --trust admits only records signed "
                                     f"by a trusted key ({names})")
    sigs = env["signatures"]
    mine = [s for s in sigs if s["keyid"] in trusted]
    if not mine:
        raise SignatureRefused(path, f"{role} is signed by key "
                                     f"{', '.join(short(s['keyid']) for s in sigs)}, which is "
                                     f"not trusted (--trust: {names})")
    if env["payloadType"] != PAYLOAD_TYPE:
        raise SignatureRefused(path, f"{role}'s signature has payloadType "
                                     f"{env['payloadType']!r}, not {PAYLOAD_TYPE!r}")
    try:
        body = base64.b64decode(env["payload"], validate=True)
    except ValueError:
        raise SignatureRefused(path, f"{role}'s signature payload is not base64") from None
    problems = []
    for s in mine:  # any one trusted signature that holds admits the record
        key, _ = trusted[s["keyid"]]
        k = short(s["keyid"])
        try:
            key.verify(base64.b64decode(s["sig"], validate=True), pae(env["payloadType"], body))
        except (InvalidSignature, ValueError):
            problems.append(f"{role}'s signature by key {k} does not verify (the envelope was "
                            f"altered or the signature forged)")
            continue
        try:
            signed = json.loads(body)
        except ValueError:
            signed = None
        if not isinstance(signed, dict) or signed.get("schema") != STATEMENT:
            problems.append(f"key {k} signed something that is not a {STATEMENT} statement")
        elif signed.get("content_sha256") != content_sha256:
            problems.append(f"{role} was edited after key {k} signed it: its content hashes to "
                            f"{content_sha256[:16]}, the key signed "
                            f"{str(signed.get('content_sha256'))[:16]}")
        else:
            return s["keyid"]
    raise SignatureRefused(path, problems[0])
