#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (src/rpc/core/fuzz-corpus/<target>/seed-*, src/rpc/rdma/bootstrap/fuzz-corpus/...).

The seeds are a few well-formed and a few typical broken inputs, so a fuzz run starts from the
shapes docs/wire-format.md describes instead of discovering "RRPC" and protobuf by chance. The
protobuf messages are encoded by hand (field numbers from include/rrpc/rpc/rpc_header.proto and
src/rpc/testing/rtest.proto). Inputs that once crashed a target go next to the seeds as
regress-*, written by hand or copied from a crash file; this script leaves those alone.
Usage: build-support/make-fuzz-seeds.py
"""
import hashlib
import hmac
import os
import struct

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "rpc")
ROOT = os.path.join(SRC, "core", "fuzz-corpus")
RDMA_ROOT = os.path.join(SRC, "rdma", "bootstrap", "fuzz-corpus")


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint((num << 3) | 2) + varint(len(b)) + b


def frame(header, body, sidecars=b""):
    content = varint(len(header)) + header + varint(len(body)) + body + sidecars
    return struct.pack(">I", len(content)) + content


PREAMBLE = b"RRPC\x01\x00"


def request_header(call_id, service, method, timeout_ms=0, sidecar_offsets=(), required=()):
    h = field_varint(1, call_id)
    h += field_bytes(2, field_bytes(1, service) + field_bytes(2, method))
    if timeout_ms:
        h += field_varint(3, timeout_ms)
    for off in sidecar_offsets:
        h += field_varint(4, off)
    for f in required:
        h += field_varint(5, f)
    return h


def negotiate(features=(1,), name="seed", token=None):
    b = field_varint(1, 1)
    for f in features:
        b += field_varint(2, f)
    b += field_bytes(3, name)
    if token is not None:
        b += field_bytes(4, token)
    return b


# The key tls_connection-fuzz.cc gives its server; tokens as security/auth_token.cc mints them.
TOKEN_KEY = b"rrpc-fuzz-token-key-0123456789abcdef"


def token(user, expires=4102444800):
    signed = "rrpc1.%d.%s" % (expires, user.encode().hex())
    return signed + "." + hmac.new(TOKEN_KEY, signed.encode(), hashlib.sha256).hexdigest()


def bootstrap(fallback=False, srq=False, reason=0, qp_num=1, lid=0, backend=1, gid=b"\0" * 16,
              psn=7, mtu=1024, buffer_size=4096, credits=8, sq_depth=16, inline_cap=64, nonce=42,
              version=1, reserved=0):
    flags = (1 if fallback else 0) | (2 if srq else 0)
    return (struct.pack(">BBHIHBB", version, flags, reason, qp_num, lid, backend, reserved) + gid +
            struct.pack(">IIIIIIQI", psn, mtu, buffer_size, credits, sq_depth, inline_cap, nonce, 0))


HELLO = PREAMBLE + frame(field_varint(1, -2), negotiate())
ECHO = "rrpc.rtest.EchoService"


def echo_call(call_id, data=b"hi", timeout_ms=1000, sidecars=()):
    offsets, tail = [], b""
    for s in sidecars:
        offsets.append(len(tail))
        tail += s
    return frame(request_header(call_id, ECHO, "Echo", timeout_ms, offsets),
                 field_bytes(1, data), tail)


def response(call_id, body, is_error=False, sidecar_offsets=(), sidecars=b""):
    h = field_varint(1, call_id)
    if is_error:
        h += field_varint(2, 1)
    for off in sidecar_offsets:
        h += field_varint(3, off)
    return frame(h, body, sidecars)


def error_status(message, code):
    return field_bytes(1, message) + field_varint(2, code)


def write(target, name, data, root=ROOT):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    # frame_codec-fuzz: [block size byte][chunk seed byte][stream of frames]
    fc = "frame_codec-fuzz"
    write(fc, "echo-call", b"\x10\x07" + echo_call(7))
    write(fc, "call-with-sidecars", b"\x02\x33" + echo_call(8, sidecars=(b"abc", b"", b"xyz" * 20)))
    write(fc, "pipelined-calls", b"\x00\x01" + b"".join(echo_call(i, b"x" * i) for i in range(6)))
    write(fc, "response", b"\x20\x05" + response(7, field_bytes(1, "hi")))
    write(fc, "error-response", b"\x20\x09" + response(3, error_status("busy", 4), is_error=True))
    write(fc, "response-sidecars", b"\x01\x02" + response(4, b"", sidecar_offsets=(0, 2), sidecars=b"abcd"))
    write(fc, "zero-length", b"\x04\x04" + echo_call(1) + b"\x00\x00\x00\x00")
    write(fc, "oversized", b"\x04\x04" + struct.pack(">I", 1 << 20) + b"x" * 16)
    write(fc, "bad-offsets", b"\x30\x03" + frame(request_header(9, ECHO, "Echo", 0, (5, 2)), b"", b"abcdefg"))
    write(fc, "large-frame", b"\x00\x41" + echo_call(10, b"L" * 2000))

    # negotiation-fuzz: [side byte: even server, odd client][bytes]
    ng = "negotiation-fuzz"
    write(ng, "server-hello", b"\x00" + HELLO)
    write(ng, "server-bad-magic", b"\x00" + b"HTTP/1.1 " + frame(field_varint(1, -2), negotiate()))
    write(ng, "server-bad-version", b"\x00" + b"RRPC\x07\x00" + frame(field_varint(1, -2), negotiate()))
    write(ng, "server-not-negotiation", b"\x00" + PREAMBLE + echo_call(1))
    write(ng, "server-unknown-features", b"\x00" + PREAMBLE + frame(field_varint(1, -2), negotiate((1, 2, 77))))
    write(ng, "server-bad-step", b"\x00" + PREAMBLE + frame(field_varint(1, -2), field_varint(1, 2)))
    write(ng, "client-accept", b"\x01" + response(-2, negotiate()))
    write(ng, "client-refusal", b"\x01" + response(-2, error_status("bad magic", 20), is_error=True))
    write(ng, "client-wrong-id", b"\x01" + response(5, negotiate()))

    # server_connection-fuzz: what a client sends on one connection
    sc = "server_connection-fuzz"
    write(sc, "hello-echo", HELLO + echo_call(1))
    write(sc, "hello-sidecars", HELLO + echo_call(2, sidecars=(b"side", b"car")))
    write(sc, "hello-pipelined", HELLO + b"".join(echo_call(i, b"p" * i, 500) for i in range(10)))
    write(sc, "hello-add", HELLO + frame(request_header(3, ECHO, "Add", 100), field_varint(1, 2) + field_varint(2, 3)))
    write(sc, "hello-fail", HELLO + frame(request_header(4, ECHO, "Echo"), field_bytes(1, "x") + field_bytes(3, "no")))
    write(sc, "hello-unknown-method", HELLO + frame(request_header(5, ECHO, "Nope"), b""))
    write(sc, "hello-unknown-service", HELLO + frame(request_header(6, "no.Such", "Echo"), b""))
    write(sc, "hello-bad-body", HELLO + frame(request_header(7, ECHO, "Echo"), b"\xff\xff\xff"))
    write(sc, "hello-control-frame", HELLO + frame(field_varint(1, -3), b""))
    HELLO_CANCEL = PREAMBLE + frame(field_varint(1, -2), negotiate((1, 4)))
    write(sc, "hello-cancel-queued", HELLO_CANCEL + echo_call(11) + frame(field_varint(1, -3), field_varint(1, 1) + field_bytes(2, varint(11))))
    write(sc, "hello-cancel-unknown", HELLO_CANCEL + frame(field_varint(1, -3), field_varint(1, 1) + field_bytes(2, varint(77) + varint(2**31 - 1))))
    write(sc, "hello-ping", HELLO_CANCEL + echo_call(12) + frame(field_varint(1, -3), field_varint(1, 2)))
    write(sc, "hello-control-bad-kind", HELLO_CANCEL + frame(field_varint(1, -3), field_varint(1, 99)))
    write(sc, "hello-bad-offsets", HELLO + frame(request_header(8, ECHO, "Echo", 0, (4, 1)), field_bytes(1, "a"), b"abcdef"))
    write(sc, "hello-required-feature", HELLO + frame(request_header(9, ECHO, "Echo", 0, (), (2,)), field_bytes(1, "a")))
    write(sc, "hello-partial-frame", HELLO + echo_call(10)[:9])
    # Streams (docs/wire-format.md, section 8): StreamService of rtest_stream.proto.
    HELLO_STREAMS = PREAMBLE + frame(field_varint(1, -2), negotiate((1, 4, 7)))
    SS = "rrpc.rtest.StreamService"

    def stream_open(call_id, method, body, credit=0):
        h = request_header(call_id, SS, method, 1000, (), (7,)) + field_varint(30, 1)
        if credit:
            h += field_varint(31, credit)
        return frame(h, body)

    def stream_frame(call_id, flags, body=b"", credit=0, sidecars=b"", offsets=()):
        h = field_varint(1, call_id)
        for off in offsets:
            h += field_varint(4, off)
        h += field_varint(30, flags)
        if credit:
            h += field_varint(31, credit)
        return frame(h, body, sidecars)

    def number(n, payload=b""):
        return field_varint(1, n) + (field_bytes(2, payload) if payload else b"")

    rng = field_varint(1, 0) + field_varint(2, 50) + field_varint(3, 100)
    write(sc, "stream-range", HELLO_STREAMS + stream_open(21, "Range", rng, 1 << 20))
    write(sc, "stream-range-credit", HELLO_STREAMS + stream_open(22, "Range", rng) + stream_frame(22, 8, credit=65536))
    write(sc, "stream-sum", HELLO_STREAMS + stream_open(23, "Sum", b"") + b"".join(stream_frame(23, 2, number(i)) for i in range(5)) + stream_frame(23, 4))
    write(sc, "stream-double-sidecar", HELLO_STREAMS + stream_open(24, "Double", b"") + stream_frame(24, 2 | 4, number(3), sidecars=b"sidecar", offsets=(0,)))
    write(sc, "stream-past-credit", HELLO_STREAMS + stream_open(25, "Sum", b"") + stream_frame(25, 2, number(1, b"a" * 40000)) + stream_frame(25, 2, number(2, b"b" * 40000)))
    write(sc, "stream-after-half-close", HELLO_STREAMS + stream_open(26, "Sum", b"") + stream_frame(26, 4) + stream_frame(26, 2, number(1)))
    write(sc, "stream-unknown-id", HELLO_STREAMS + stream_frame(99, 2, number(1)))
    write(sc, "stream-cancel", HELLO_STREAMS + stream_open(27, "Range", rng) + frame(field_varint(1, -3), field_varint(1, 1) + field_bytes(2, varint(27))))
    write(sc, "stream-unary-as-stream", HELLO_STREAMS + frame(request_header(28, ECHO, "Echo", 0, (), (7,)) + field_varint(30, 1), field_bytes(1, "a")))
    write(sc, "stream-stream-as-unary", HELLO_STREAMS + frame(request_header(29, SS, "Range"), rng))
    write(sc, "stream-opened-twice", HELLO_STREAMS + stream_open(30, "Sum", b"") + stream_open(30, "Sum", b""))
    write(sc, "bad-preamble", b"GET / HTTP/1.1\r\n\r\n")
    write(sc, "preamble-only", PREAMBLE)

    # tls_connection-fuzz: [mode byte: even inside TLS, odd raw][bytes]; raw with an odd second
    # byte: a real ClientHello, then the bytes after that byte
    tc = "tls_connection-fuzz"
    write(tc, "tls-hello-echo", b"\x00" + HELLO + echo_call(1))
    write(tc, "tls-token-echo", b"\x00" + PREAMBLE + frame(field_varint(1, -2), negotiate(token=token("alice"))) + echo_call(2))
    write(tc, "tls-bad-token", b"\x00" + PREAMBLE + frame(field_varint(1, -2), negotiate(token=token("alice")[:-3] + "abc")) + echo_call(3))
    write(tc, "tls-expired-token", b"\x00" + PREAMBLE + frame(field_varint(1, -2), negotiate(token=token("bob", 1000))))
    write(tc, "tls-upgrade-offer", b"\x00" + PREAMBLE + frame(field_varint(1, -2), negotiate((1, 3))) + frame(field_varint(1, -4), bootstrap()))
    write(tc, "tls-pipelined", b"\x00" + HELLO + b"".join(echo_call(i, b"t" * i, 500) for i in range(6)))
    write(tc, "tls-bad-preamble", b"\x00" + b"GET / HTTP/1.1\r\n\r\n")
    write(tc, "tls-partial-frame", b"\x00" + HELLO + echo_call(4)[:9])
    write(tc, "raw-plaintext", b"\x01" + b"\x00" + HELLO + echo_call(1))
    write(tc, "raw-hello-then-garbage", b"\x01\x01" + b"\x16\x03\x03\x00\x05hello")
    write(tc, "raw-record-garbage", b"\x01\x16\x03\x01\x00\x20" + b"\xab" * 32)

    # bootstrap-fuzz: [mode byte: 0 decode, 1 server, 2 server with SRQ, 3 client][message]
    bf = "bootstrap-fuzz"
    for mode in range(4):
        write(bf, "%d-offer" % mode, bytes([mode]) + bootstrap(), RDMA_ROOT)
        write(bf, "%d-fallback" % mode, bytes([mode]) + bootstrap(fallback=True, reason=2, backend=1, qp_num=0, psn=0, mtu=0, buffer_size=0, credits=0, sq_depth=0, inline_cap=0), RDMA_ROOT)
    write(bf, "0-srq", b"\x00" + bootstrap(srq=True, credits=64), RDMA_ROOT)
    write(bf, "0-short", b"\x00" + bootstrap()[:63], RDMA_ROOT)
    write(bf, "0-version-2", b"\x00" + bootstrap(version=2), RDMA_ROOT)
    write(bf, "0-reserved-set", b"\x00" + bootstrap(reserved=1), RDMA_ROOT)
    write(bf, "1-verbs-backend", b"\x01" + bootstrap(backend=0), RDMA_ROOT)
    write(bf, "1-tiny-buffers", b"\x01" + bootstrap(buffer_size=16, credits=1), RDMA_ROOT)
    write(bf, "3-nonce-mismatch", b"\x03" + bootstrap(nonce=7), RDMA_ROOT)


if __name__ == "__main__":
    main()
