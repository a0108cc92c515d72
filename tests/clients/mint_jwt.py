"""Mints JWT access tokens for tests/http_front/jwt.rs with a fresh EC P-256 key (PyJWT and
cryptography, from the test venv): writes the public key as a JWKS to JWKS_PATH and prints
a JSON object of named tokens, and beside it JWKS_PATH.rotated: the same key plus a second
one (`k2`, which signs the token `rotated`). Nothing is asserted here.

Usage: mint_jwt.py JWKS_PATH ISSUER AUDIENCE
"""

import json
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm


def main(jwks_path, iss, aud):
    key = ec.generate_private_key(ec.SECP256R1())
    other = ec.generate_private_key(ec.SECP256R1())
    pub = json.loads(ECAlgorithm.to_jwk(key.public_key()))
    pub.update({"kid": "k1", "alg": "ES256", "use": "sig"})
    with open(jwks_path, "w") as f:
        json.dump({"keys": [pub]}, f)
    pub2 = json.loads(ECAlgorithm.to_jwk(other.public_key()))
    pub2.update({"kid": "k2", "alg": "ES256", "use": "sig"})
    with open(jwks_path + ".rotated", "w") as f:
        json.dump({"keys": [pub, pub2]}, f)
    now = int(time.time())

    def mint(signer=key, kid="k1", **over):
        claims = {"iss": iss, "aud": aud, "sub": "carol@example.com", "iat": now,
                  "exp": now + 600, "scope": "mcp:tools other"}
        claims.update(over)
        claims = {k: v for k, v in claims.items() if v is not None}
        return jwt.encode(claims, signer, algorithm="ES256", headers={"kid": kid})

    print(json.dumps({
        "good": mint(),
        "expired": mint(exp=now - 3600),
        "wrong_audience": mint(aud="https://someone-else.example/mcp"),
        "wrong_issuer": mint(iss="https://evil.example"),
        "wrong_key": mint(signer=other),
        "rotated": mint(signer=other, kid="k2"),
        "missing_scope": mint(scope="other"),
        "not_yet_valid": mint(nbf=now + 3600),
        "sub_alice": mint(sub="alice"),
        "hs256": jwt.encode({"iss": iss, "aud": aud, "sub": "x", "exp": now + 600},
                            "secret", algorithm="HS256", headers={"kid": "k1"}),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:4])
