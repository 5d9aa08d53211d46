#include "bench/peers/grpc_echo_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "bench/peers/echo.grpc.pb.h"
#include "bench/peers/payload_pattern.h"

namespace rrpc {
namespace bench {
namespace {

// A server that stays silent this long has failed the run, rather than hanging it.
constexpr auto kIoTimeout = std::chrono::seconds(10);

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& addr, int index) {
  grpc::ChannelArguments args;
  // Channels with equal arguments share subchannels (TCP connections) through gRPC's global
  // pool; a local pool plus a per-thread argument gives every channel a connection of its own.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("rrpc.bench.channel_index", index);
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
}

void CheckOrFail(uint64_t seq, const grpc::Status& status, const EchoResponse& response,
                 const PayloadPattern& pattern) {
  if (!status.ok()) {
    Fail("call %llu failed: %d %s", static_cast<unsigned long long>(seq),
         static_cast<int>(status.error_code()), status.error_message().c_str());
  }
  const std::string& payload = response.payload();
  if (payload.size() != pattern.response_bytes()) {
    Fail("response %llu has %zu payload bytes, expected %zu", static_cast<unsigned long long>(seq),
         payload.size(), pattern.response_bytes());
  }
  if (!pattern.CheckResponse(seq, payload.data(), payload.size())) {
    Fail("response %llu: content mismatch", static_cast<unsigned long long>(seq));
  }
}

// One async call in flight; its address is its CQ tag. gRPC contexts cannot be reused, so each
// call gets a fresh one.
struct PendingCall {
  uint64_t seq = 0;
  Clock::time_point issued;
  grpc::ClientContext ctx;
  EchoResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<EchoResponse>> reader;
};

void RunPipelined(const PeerConfig& config, const ClientThreadArgs& args) {
  const MeasureWindow& window = *args.window;
  const PayloadPattern pattern(config.payload_bytes, config.response_bytes);
  std::shared_ptr<grpc::Channel> channel = MakeChannel(args.server_addr, args.index);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + kIoTimeout)) {
    Fail("cannot connect to the gRPC server at %s", args.server_addr.c_str());
  }
  std::unique_ptr<Echo::Stub> stub = Echo::NewStub(channel);
  grpc::CompletionQueue cq;

  // The request is serialized when a call is prepared, so one message serves every call.
  EchoRequest request;
  request.mutable_payload()->resize(pattern.request_bytes());
  uint64_t next_seq = 0;
  int outstanding = 0;
  auto issue = [&](Clock::time_point now) {
    auto* call = new PendingCall;  // owned by the CQ until its tag comes back
    call->seq = next_seq++;
    call->issued = now;
    pattern.FillRequest(call->seq, request.mutable_payload()->data());
    call->reader = stub->PrepareAsyncEcho(&call->ctx, request, &cq);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
    ++outstanding;
  };

  const Clock::time_point start = Clock::now();
  for (int i = 0; i < config.Depth(); ++i) issue(start);
  while (outstanding > 0) {
    void* tag = nullptr;
    bool ok = false;
    const auto next = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + kIoTimeout);
    if (next != grpc::CompletionQueue::GOT_EVENT) {
      Fail("no gRPC completion within %lld s", static_cast<long long>(kIoTimeout.count()));
    }
    std::unique_ptr<PendingCall> call(static_cast<PendingCall*>(tag));
    --outstanding;
    if (!ok) {
      Fail("call %llu: completion queue reported failure",
           static_cast<unsigned long long>(call->seq));
    }
    CheckOrFail(call->seq, call->status, call->response, pattern);
    const Clock::time_point now = Clock::now();
    args.stats->Record(call->issued, now, window);
    if (now < window.end) issue(now);
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

void RunChannelPerCall(const PeerConfig& config, const ClientThreadArgs& args) {
  const MeasureWindow& window = *args.window;
  const PayloadPattern pattern(config.payload_bytes, config.response_bytes);
  EchoRequest request;
  request.mutable_payload()->resize(pattern.request_bytes());
  for (uint64_t seq = 0;; ++seq) {
    const Clock::time_point start = Clock::now();
    if (start >= window.end) break;
    {
      // A fresh channel with a local subchannel pool opens a fresh connection; dropping the
      // channel at the end of the scope closes it.
      std::shared_ptr<grpc::Channel> channel = MakeChannel(args.server_addr, args.index);
      std::unique_ptr<Echo::Stub> stub = Echo::NewStub(channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + kIoTimeout);
      pattern.FillRequest(seq, request.mutable_payload()->data());
      EchoResponse response;
      const grpc::Status status = stub->Echo(&ctx, request, &response);
      CheckOrFail(seq, status, response, pattern);
    }
    args.stats->Record(start, Clock::now(), window);
  }
}

}  // namespace

void RunGrpcClientThread(const PeerConfig& config, const ClientThreadArgs& args) {
  if (config.mode == BenchMode::kCps) {
    RunChannelPerCall(config, args);
  } else {
    RunPipelined(config, args);
  }
}

}  // namespace bench
}  // namespace rrpc
