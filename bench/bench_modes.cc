#include "bench/bench_modes.h"

#include "bench/bench_payload.h"

namespace rrpc::bench {

const char* ModeName(BenchMode mode) {
  switch (mode) {
    case BenchMode::kThroughput:
      return "throughput";
    case BenchMode::kLatency:
      return "latency";
    case BenchMode::kCps:
      return "cps";
    case BenchMode::kSparse:
      return "sparse";
    case BenchMode::kMixed:
      return "mixed";
    case BenchMode::kStream:
      return "stream";
  }
  return "unknown";
}

const char* DirectionName(StreamDirection direction) {
  switch (direction) {
    case StreamDirection::kDown:
      return "down";
    case StreamDirection::kUp:
      return "up";
    case StreamDirection::kBidi:
      return "bidi";
  }
  return "unknown";
}

int BenchConfig::Concurrency() const {
  switch (mode) {
    case BenchMode::kThroughput:
      return client_threads * async_call_concurrency;
    case BenchMode::kLatency:
      return 1;
    case BenchMode::kCps:
      return client_threads;
    case BenchMode::kSparse:
      return senders;
    case BenchMode::kMixed:
      return 1 + mixed_bulk_streams;
    case BenchMode::kStream:
      return streams;
  }
  return 0;
}

void InitRequest(const BenchConfig& config, uint64_t stream, BenchRequestPB* request) {
  std::string* payload = request->mutable_payload();
  payload->resize(config.payload_bytes);
  if (config.text_payload) {
    FillText(stream, payload->data(), payload->size());
  } else {
    FillPattern(stream, payload->data(), payload->size());
  }
  if (config.response_bytes != config.payload_bytes) {
    request->set_response_size(static_cast<uint32_t>(config.response_bytes));
  }
}

SidecarBlock::SidecarBlock(uint64_t stream, size_t bytes) : size(bytes) {
  if (bytes == 0) return;
  block = Block::Allocate(bytes);
  FillPattern(stream, data(), bytes);
}

void StampCall(uint64_t seq, BenchRequestPB* request, SidecarBlock* sidecar) {
  std::string* payload = request->mutable_payload();
  StampSequence(seq, payload->data(), payload->size());
  StampSequence(~seq, sidecar->data(), sidecar->size);
}

Status CheckResponse(const BenchConfig& config, const BenchRequestPB& request,
                     const BenchResponsePB& response, Slice request_sidecar,
                     size_t num_response_sidecars, Slice response_sidecar) {
  RRPC_RETURN_NOT_OK(CheckEcho(Slice(request.payload()), Slice(response.payload()),
                               config.response_bytes, "payload"));
  const size_t expected_sidecars = request_sidecar.empty() ? 0 : 1;
  if (num_response_sidecars != expected_sidecars) {
    return Status::Corruption("response has " + std::to_string(num_response_sidecars) +
                              " sidecars, expected " + std::to_string(expected_sidecars));
  }
  if (expected_sidecars == 0) return Status::OK();
  return CheckEcho(request_sidecar, response_sidecar, request_sidecar.size(), "sidecar");
}

}  // namespace rrpc::bench
