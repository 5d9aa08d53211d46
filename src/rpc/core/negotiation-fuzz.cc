// Fuzz target: the preamble check and both negotiation state machines, fed what a hostile peer
// might send. Byte 0 picks the side:
//   even: a server's view. The input is a client's first bytes: ServerNegotiation::OnPreamble on
//         the first 6, then its frames (cut by a FrameReader) to ServerNegotiation::OnFrame until
//         it opens or refuses. Checks: every answer the server writes is one well-formed frame
//         that a client parses (an accept, or a refusal with its reason); a refusal ends it.
//   odd:  a client's view. The input is the server's reply: frames to ClientNegotiation::OnFrame.
// Run with build-support/fuzz.sh; ctest replays fuzz-corpus/negotiation-fuzz/.
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rpc/core/constants.h"
#include "rpc/core/negotiation.h"
#include "rpc/transport/frame_format.h"
#include "rpc/transport/frame_reader.h"
#include "util/fuzz_check.h"

namespace rrpc::rpc {
namespace {

// The features a negotiation may record for its peer: those both sides know. TLS and
// TRANSPORT_UPGRADE are settled by the transport, never recorded from the peer's list.
bool IsPeerFeature(RpcFeatureFlag f) {
  return f == SIDECARS || f == CANCELLATION || f == EXACTLY_ONCE || f == TRACE_CONTEXT ||
         f == STREAMS || f == COMPRESSION;
}

// Records what a negotiation writes.
class RecordingHost final : public NegotiationHost {
 public:
  const Sockaddr& remote() const override { return remote_; }
  void SendConnectionBytes(BlockSlice bytes) override { sent.push_back(bytes.slice.ToString()); }
  TransportCapabilities transport_capabilities() const override { return {}; }
  TransportSecurity transport_security() const override { return {}; }
  std::unique_ptr<TransportUpgrade> NewTransportUpgrade() override { return nullptr; }
  std::vector<std::string> sent;

 private:
  Sockaddr remote_;
};

// Each thing the server sent must be exactly one frame a client can parse as a reply: an accept
// (ok) or a refusal (NetworkError carrying the server's reason).
void CheckServerAnswers(const std::vector<std::string>& sent, bool refused) {
  for (const std::string& bytes : sent) {
    RRPC_FUZZ_CHECK(bytes.size() > kFrameLengthSize);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
    RRPC_FUZZ_CHECK(DecodeBigEndian32(p) == bytes.size() - kFrameLengthSize);
    NegotiatePB reply;
    Status s =
        ParseServerReply(Slice(p + kFrameLengthSize, bytes.size() - kFrameLengthSize), &reply);
    RRPC_FUZZ_CHECK(refused ? s.IsNetworkError() : s.ok());
  }
}

// Feeds `data` as a stream of frames to `on_frame` until it says done or fails; returns the
// last result (false: ran out of frames).
template <typename OnFrame>
Result<bool> FeedFrames(const uint8_t* data, size_t size, OnFrame on_frame) {
  FrameReader reader(64 * 1024, 1024);
  reader.Seed(Slice(data, size));
  while (true) {
    BlockSlice frame;
    Result<bool> next = reader.NextFrame(&frame);
    if (!next.ok()) return next.status();
    if (!*next) return false;
    Result<bool> done = on_frame(frame.slice);
    if (!done.ok() || *done) return done;
  }
}

void FuzzServer(const uint8_t* data, size_t size) {
  RecordingHost host;
  ServerNegotiation negotiation(&host, /*security=*/nullptr);  // plaintext, no authentication
  if (size < kPreambleSize) return;
  Result<ServerNegotiation::Next> next = negotiation.OnPreamble(Slice(data, kPreambleSize));
  if (!next.ok()) {
    RRPC_FUZZ_CHECK(host.sent.size() == 1);  // the refusal, then the connection closes
    // A TLS ClientHello to a server without TLS is refused with a TLS alert, not a frame.
    if (data[0] != 0x16) CheckServerAnswers(host.sent, /*refused=*/true);
    return;
  }
  if (*next == ServerNegotiation::Next::kStartTls) return;  // the TLS transport's part
  RRPC_FUZZ_CHECK(host.sent.empty());
  Result<bool> done = FeedFrames(data + kPreambleSize, size - kPreambleSize,
                                 [&](Slice frame) { return negotiation.OnFrame(frame); });
  if (done.ok() && *done) {
    RRPC_FUZZ_CHECK(host.sent.size() == 1);
    CheckServerAnswers(host.sent, /*refused=*/false);
    for (RpcFeatureFlag f : negotiation.peer().features) {
      RRPC_FUZZ_CHECK(IsPeerFeature(f));
    }
  } else if (!host.sent.empty()) {
    RRPC_FUZZ_CHECK(host.sent.size() == 1);
    CheckServerAnswers(host.sent, /*refused=*/true);
  }
}

void FuzzClient(const uint8_t* data, size_t size) {
  RecordingHost host;
  ClientNegotiation negotiation(&host, "fuzz-client", /*auth_token=*/"");
  negotiation.Start();
  RRPC_FUZZ_CHECK(host.sent.size() == 1);
  Result<bool> done =
      FeedFrames(data, size, [&](Slice frame) { return negotiation.OnFrame(frame); });
  if (done.ok() && *done) {
    for (RpcFeatureFlag f : negotiation.peer().features) {
      RRPC_FUZZ_CHECK(IsPeerFeature(f));
    }
  }
}

}  // namespace
}  // namespace rrpc::rpc

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);  // every unparsable header would log a line
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] % 2 == 0) {
    rrpc::rpc::FuzzServer(data + 1, size - 1);
  } else {
    rrpc::rpc::FuzzClient(data + 1, size - 1);
  }
  return 0;
}
