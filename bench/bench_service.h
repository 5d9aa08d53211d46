// The server side of rpc-bench: the echo service and a helper that starts a messenger serving it.
// The service follows bench_payload.h's rule, so the client can check every byte it gets back.
// Handlers run on the messenger's worker threads, or on its reactors with inline_handlers; the
// service keeps no state and never blocks, so either is safe. The stream handlers
// (bench_stream_service.cc) return at once: their streams go on from OnWritable and OnReadable
// callbacks on the server's reactors, so an open stream holds no worker.
//
//   RRPC_ASSIGN_OR_RETURN(auto server, StartBenchServer(options, &bound));
//   ... clients call bound ...
//   server->Shutdown();
#pragma once

#include <cstddef>
#include <memory>

#include "bench/bench.rrpc.h"
#include "bench/bench_stream_ready.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

class BenchEchoService : public BenchServiceIf {
 public:
  // `corrupt_responses`: flip one byte of every response, so tests can prove the client's check
  // fails the run.
  explicit BenchEchoService(bool corrupt_responses) : corrupt_responses_(corrupt_responses) {}

  void Echo(const BenchRequestPB* req, BenchResponsePB* resp, rpc::RpcContext* context) override;
  // Writes messages as the client's window allows, until the client cancels.
  void Download(const StreamOpenPB* req,
                rpc::ServerStream<StreamOpenPB, StreamChunkPB> stream) override;
  // Counts the client's messages; answers the totals at its half-close. A message out of order
  // ends the stream with InvalidArgument.
  void Upload(rpc::ServerStream<StreamChunkPB, StreamTotalsPB> stream) override;
  // Echoes each message as it comes, waiting for room before reading the next.
  void Exchange(rpc::ServerStream<StreamChunkPB, StreamChunkPB> stream) override;

 private:
  const bool corrupt_responses_;
  // Stream writers that found the window short of a whole message wait here (bench_stream_ready.h).
  RetryParker parker_;
};

struct BenchServerOptions {
  // Everything else about the server messenger (timeouts, message size limit, ...); its name,
  // reactors, workers and queue length are replaced by the fields below.
  rpc::MessengerOptions messenger;
  Sockaddr bind_address = Sockaddr::Loopback(0);
  int reactors = 2;
  int workers = 2;
  size_t service_queue_length = 1024;
  // Echo runs on the server reactor that read the call (RpcMethodInfo::run_inline), not on a
  // worker.
  bool inline_handlers = false;
  bool corrupt_responses_for_test = false;
};

// Builds a messenger named "server" (its threads are "server-reactor-N", "server-worker-N"),
// registers BenchEchoService and listens. `bound` gets the address it listens on.
Result<std::shared_ptr<rpc::Messenger>> StartBenchServer(const BenchServerOptions& options,
                                                         Sockaddr* bound);

}  // namespace rrpc::bench
