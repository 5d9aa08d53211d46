#!/usr/bin/env python3
"""Drives rrpc streams from docs/wire-format.md alone, in another language (stream_wire-test).

Speaks the wire by hand: the preamble, the negotiation, a server stream (Range) whose credit it
grants as it reads, and a client stream (Sum) whose credit it respects, then the final answers.
The protobuf messages come from python3-protobuf and the .proto files (protoc --python_out).
Usage: stream_wire_client.py PORT PROTOC INCLUDE_DIR SRC_DIR; exits non-zero on any mismatch.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile

port, protoc, include_dir, src_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
out = tempfile.mkdtemp(prefix="stream-wire-")
subprocess.check_call([protoc, "-I", include_dir, "-I", src_dir, "--python_out", out,
                       "rrpc/rpc/rpc_header.proto", "rpc/testing/rtest_stream.proto"])
sys.path.insert(0, out)
sys.path.insert(0, os.path.join(out, "rrpc", "rpc"))
sys.path.insert(0, os.path.join(out, "rpc", "testing"))
import rpc_header_pb2 as hdr  # noqa: E402
import rtest_stream_pb2 as st  # noqa: E402

INITIAL_WINDOW = 65536  # section 8: each direction starts with this much credit


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def frame(header, body=b""):
    h = header.SerializeToString()
    content = varint(len(h)) + h + varint(len(body)) + body
    return struct.pack(">I", len(content)) + content


class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def read_exact(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise SystemExit("server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_varint(self, data, pos):
        shift = v = 0
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v, pos

    def read_frame(self):
        (length,) = struct.unpack(">I", self.read_exact(4))
        content = self.read_exact(length)
        n, pos = self.read_varint(content, 0)
        header = hdr.ResponseHeader()
        header.ParseFromString(content[pos:pos + n])
        pos += n
        m, pos = self.read_varint(content, pos)
        return header, content[pos:pos + m], content[pos + m:]


def check(cond, what):
    if not cond:
        raise SystemExit("FAILED: " + what)


c = Conn()
negotiate = hdr.NegotiatePB(step=hdr.NegotiatePB.NEGOTIATE,
                            supported_features=[hdr.SIDECARS, hdr.CANCELLATION, hdr.STREAMS],
                            client_name="stream_wire_client.py")
c.send(b"RRPC\x01\x00" + frame(hdr.RequestHeader(call_id=-2), negotiate.SerializeToString()))
reply_header, reply_body, _ = c.read_frame()
reply = hdr.NegotiatePB()
reply.ParseFromString(reply_body)
check(hdr.STREAMS in reply.supported_features, "the server lists STREAMS")

SERVICE = "rrpc.rtest.StreamService"

# A server stream: 300 numbers of 1000 bytes (300 KB, past the initial 64 KiB window), with no
# extra window: the server must wait for this client's grants.
req = st.RangeRequestPB(first=7, count=300, payload_bytes=1000)
open_header = hdr.RequestHeader(call_id=1, timeout_millis=30000,
                                remote_method=hdr.RemoteMethodPB(service_name=SERVICE,
                                                                 method_name="Range"),
                                required_feature_flags=[hdr.STREAMS],
                                stream_flags=hdr.STREAM_OPEN)
c.send(frame(open_header, req.SerializeToString()))
expected = 7
unacked = 0
while True:
    h, body, tail = c.read_frame()
    check(h.call_id == 1, "frames of call 1 only")
    if h.stream_flags == 0:  # the final answer ends the stream
        check(not h.is_error, "Range ends OK")
        break
    if h.stream_flags & hdr.STREAM_MESSAGE:
        n = st.NumberPB()
        n.ParseFromString(body)
        check(n.n == expected, "in order: %d, got %d" % (expected, n.n))
        expected += 1
        unacked += len(body) + len(tail)
        check(unacked <= INITIAL_WINDOW + len(body), "the server stays within its credit")
        # Grant back what was consumed, as the doc describes.
        c.send(frame(hdr.RequestHeader(call_id=1, stream_flags=hdr.STREAM_CREDIT,
                                       stream_credit=len(body) + len(tail))))
        unacked -= len(body) + len(tail)
check(expected == 307, "every message arrived: %d" % expected)

# A client stream: send within the credit the server grants, half-close, read the one response.
open_header = hdr.RequestHeader(call_id=2, timeout_millis=30000,
                                remote_method=hdr.RemoteMethodPB(service_name=SERVICE,
                                                                 method_name="Sum"),
                                required_feature_flags=[hdr.STREAMS],
                                stream_flags=hdr.STREAM_OPEN)
c.send(frame(open_header, hdr.StreamEmptyPB().SerializeToString()))
credit = INITIAL_WINDOW
total = 0
for i in range(1, 201):
    body = st.NumberPB(n=i, payload=b"z" * 2000).SerializeToString()
    while len(body) > credit:  # wait for the server's grants
        h, _, _ = c.read_frame()
        check(h.call_id == 2 and h.stream_flags & hdr.STREAM_CREDIT, "a credit frame")
        credit += h.stream_credit
    c.send(frame(hdr.RequestHeader(call_id=2, stream_flags=hdr.STREAM_MESSAGE), body))
    credit -= len(body)
    total += i
c.send(frame(hdr.RequestHeader(call_id=2, stream_flags=hdr.STREAM_HALF_CLOSE)))
while True:
    h, body, _ = c.read_frame()
    check(h.call_id == 2, "frames of call 2 only")
    if h.stream_flags == 0:
        check(not h.is_error, "Sum ends OK")
        result = st.SumPB()
        result.ParseFromString(body)
        check(result.sum == total and result.count == 200, "the sum: %s" % result)
        break
print("stream_wire_client: OK")
