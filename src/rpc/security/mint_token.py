#!/usr/bin/env python3
"""Mints an rrpc authentication token with nothing but Python's standard library, as a service
written in another language would (the format is in docs/security.md, "Token format").

    mint_token.py KEY_FILE USER EXPIRES_UNIX_SECONDS

prints the token. token_interop-test runs it and has a real server accept what it prints.
"""
import hashlib
import hmac
import sys


def read_key(path):
    # The key is the file's bytes, trailing newlines, carriage returns and spaces dropped (not
    # base64-decoded: `head -c 32 /dev/urandom | base64` makes a 44-byte key of base64 text).
    with open(path, "rb") as f:
        key = f.read().rstrip(b"\n\r ")
    if len(key) < 32:
        raise SystemExit("token key of %d bytes; need at least 32" % len(key))
    return key


def mint(key, user, expires_unix_seconds):
    # Signed part: ASCII "rrpc1.<expiry in decimal>.<user's UTF-8 bytes in lowercase hex>".
    signed = "rrpc1.%d.%s" % (expires_unix_seconds, user.encode("utf-8").hex())
    mac = hmac.new(key, signed.encode("ascii"), hashlib.sha256).hexdigest()
    return signed + "." + mac


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(mint(read_key(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
