// Fuzz target: the RDMA bootstrap message (docs/wire-format.md, "RDMA bootstrap") and both sides
// of the upgrade that read it, fed what a hostile peer might send. Byte 0 picks what runs on the
// rest of the input:
//   0: DecodeBootstrap alone. Every accepted message encodes back to exactly the input bytes;
//      every refusal is Corruption or NotSupported with a message, and leaves the output alone.
//   1: a server's RdmaUpgrade::Answer to the input as the client's offer (software backend, a
//      private receive queue). The answer always decodes; an offer that does not decode is
//      answered with a fallback for a bad message; a server that agrees echoes the offer's nonce.
//   2: the same with the server's receives on a shared receive queue (SRQ mode).
//   3: a client's RdmaUpgrade: Offer(), then Accept() of the input as the server's answer. It
//      either stays on TCP, or agrees only to an answer that decodes with its own nonce, or
//      fails with a status that says why.
// The soft device's queue pairs really connect to whatever address the input names, so a
// fuzzed QP number, MTU or buffer size reaches the endpoint code as it would from a peer.
// Run with build-support/fuzz.sh; ctest replays fuzz-corpus/bootstrap-fuzz/.
#include <glog/logging.h>

#include <cstdint>
#include <memory>
#include <string>

#include "rpc/rdma/bootstrap/bootstrap.h"
#include "rpc/rdma/rdma_factory.h"
#include "util/fuzz_check.h"

namespace rrpc::rdma {
namespace {

RdmaOptions SmallOptions(bool srq) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.backend = RdmaBackend::kSoft;
  o.endpoint.buffer_size = 4096;
  o.endpoint.receive_buffers = 8;
  o.endpoint.send_buffers = 8;
  o.endpoint.rnr_retry = 0;
  o.use_srq = srq;
  return o;
}

// One factory per mode for the whole run (the device opens once), as in a server process.
RdmaTransportFactory* Factory(bool srq) {
  static RdmaTransportFactory* plain = new RdmaTransportFactory(SmallOptions(false));
  static RdmaTransportFactory* shared = new RdmaTransportFactory(SmallOptions(true));
  return srq ? shared : plain;
}

void FuzzDecode(Slice input) {
  BootstrapMessage m;
  m.nonce = 0x5eed;  // a refusal must leave this alone
  const std::string before = EncodeBootstrap(m);
  Status s = DecodeBootstrap(input, &m);
  if (s.ok()) {
    RRPC_FUZZ_CHECK(EncodeBootstrap(m) == input.ToString());
    BootstrapMessage again;
    RRPC_FUZZ_CHECK(DecodeBootstrap(Slice(EncodeBootstrap(m)), &again).ok());
    RRPC_FUZZ_CHECK(EncodeBootstrap(again) == input.ToString());
  } else {
    RRPC_FUZZ_CHECK(s.IsCorruption() || s.IsNotSupported());
    RRPC_FUZZ_CHECK(!s.message().empty());
    RRPC_FUZZ_CHECK(EncodeBootstrap(m) == before);
  }
}

void FuzzServer(Slice offer, bool srq) {
  std::unique_ptr<rpc::TransportUpgrade> upgrade = Factory(srq)->NewUpgrade(/*server_side=*/true);
  RRPC_FUZZ_CHECK(upgrade != nullptr);
  const std::string answer = upgrade->Answer(offer);
  BootstrapMessage a;
  RRPC_FUZZ_CHECK(DecodeBootstrap(Slice(answer), &a).ok());
  BootstrapMessage o;
  const bool offer_ok = DecodeBootstrap(offer, &o).ok();
  if (!offer_ok) {
    RRPC_FUZZ_CHECK(a.fallback && a.reason == FallbackReason::kBadMessage);
  } else {
    RRPC_FUZZ_CHECK(a.nonce == o.nonce);  // fallback or not, the answer names the offer it answers
  }
  if (a.fallback) {
    RRPC_FUZZ_CHECK(!upgrade->agreed());
    RRPC_FUZZ_CHECK(!upgrade->AwaitsConfirmation());
    RRPC_FUZZ_CHECK(a.reason != FallbackReason::kNone);
    return;
  }
  RRPC_FUZZ_CHECK(offer_ok && !o.fallback);
  RRPC_FUZZ_CHECK(a.srq == srq);
  if (upgrade->AwaitsConfirmation()) {
    // The client probes the path first: this side agrees only once the client confirms.
    RRPC_FUZZ_CHECK(o.probe_qp != 0);
    RRPC_FUZZ_CHECK(!upgrade->agreed());
    RRPC_FUZZ_CHECK(upgrade->Confirm(Slice(EncodeBootstrap(o))).ok());  // same nonce, no fallback
  }
  RRPC_FUZZ_CHECK(upgrade->agreed());
}

void FuzzClient(Slice answer) {
  std::unique_ptr<rpc::TransportUpgrade> upgrade =
      Factory(false)->NewUpgrade(/*server_side=*/false);
  RRPC_FUZZ_CHECK(upgrade != nullptr);
  BootstrapMessage offer;
  RRPC_FUZZ_CHECK(DecodeBootstrap(Slice(upgrade->Offer()), &offer).ok());
  Status s = upgrade->Accept(answer);
  BootstrapMessage a;
  const bool answer_ok = DecodeBootstrap(answer, &a).ok();
  if (upgrade->agreed()) {
    RRPC_FUZZ_CHECK(s.ok() && answer_ok && !a.fallback && a.nonce == offer.nonce);
  } else if (!s.ok()) {
    RRPC_FUZZ_CHECK(!s.message().empty());
  } else {
    RRPC_FUZZ_CHECK(answer_ok && a.fallback);  // both stay on TCP
  }
}

}  // namespace
}  // namespace rrpc::rdma

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  FLAGS_minloglevel = 3;  // every fallback would log its first occurrence
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const rrpc::Slice rest(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      rrpc::rdma::FuzzDecode(rest);
      break;
    case 1:
      rrpc::rdma::FuzzServer(rest, /*srq=*/false);
      break;
    case 2:
      rrpc::rdma::FuzzServer(rest, /*srq=*/true);
      break;
    default:
      rrpc::rdma::FuzzClient(rest);
      break;
  }
  return 0;
}
