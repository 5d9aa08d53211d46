#include "bench/peers/grpc_stream.h"

#include <chrono>

#include "bench/peers/payload_pattern.h"

namespace rrpc {
namespace bench {

std::unique_ptr<PeerServer> GrpcStreamServer::Start(const PeerConfig& config, std::string* error) {
  std::unique_ptr<GrpcStreamServer> server(new GrpcStreamServer());
  grpc::ServerBuilder builder;
  const std::string addr = config.bind_host + ":" + std::to_string(config.port);
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(static_cast<EchoStream::Service*>(server.get()));
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    *error = "gRPC could not listen on " + addr;
    server->stopped_ = true;
    return nullptr;
  }
  return server;
}

GrpcStreamServer::~GrpcStreamServer() { Shutdown(); }

void GrpcStreamServer::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  // Cancels the streams still open (their Write() fails) and waits for their handlers.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

grpc::Status GrpcStreamServer::Download(grpc::ServerContext* context, const StreamRequest* request,
                                        grpc::ServerWriter<EchoResponse>* writer) {
  const PayloadPattern pattern(request->payload_bytes(), request->payload_bytes());
  EchoResponse message;
  std::string* payload = message.mutable_payload();
  payload->resize(request->payload_bytes());
  for (uint64_t seq = 0; !context->IsCancelled(); ++seq) {
    pattern.FillRequest(seq, payload->data());
    if (!writer->Write(message)) break;  // the client cancelled
  }
  return grpc::Status::OK;
}

void RunGrpcStreamClientThread(const PeerConfig& config, const ClientThreadArgs& args) {
  grpc::ChannelArguments channel_args;
  // A connection of this thread's own (as the unary client's channels).
  channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_args.SetInt("rrpc.bench.channel_index", args.index);
  channel_args.SetMaxReceiveMessageSize(-1);
  channel_args.SetMaxSendMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel(args.server_addr, grpc::InsecureChannelCredentials(), channel_args);
  std::unique_ptr<EchoStream::Stub> stub = EchoStream::NewStub(channel);
  const PayloadPattern pattern(config.payload_bytes, config.payload_bytes);
  StreamRequest request;
  request.set_payload_bytes(static_cast<uint32_t>(config.payload_bytes));
  grpc::ClientContext context;
  // Bounds the run if the server goes silent.
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           args.window->end - Clock::now()) +
                       std::chrono::seconds(10));
  std::unique_ptr<grpc::ClientReader<EchoResponse>> reader = stub->Download(&context, request);
  EchoResponse message;
  for (uint64_t seq = 0;; ++seq) {
    if (!reader->Read(&message)) {
      const grpc::Status s = reader->Finish();
      Fail("the stream ended after %llu messages: %d %s", static_cast<unsigned long long>(seq),
           static_cast<int>(s.error_code()), s.error_message().c_str());
    }
    const Clock::time_point now = Clock::now();
    if (!pattern.CheckResponse(seq, message.payload().data(), message.payload().size())) {
      Fail("message %llu: wrong size or content", static_cast<unsigned long long>(seq));
    }
    // One way: no send time to measure from; counts the message (latency 0).
    args.stats->Record(now, now, *args.window);
    if (now >= args.window->end) break;
  }
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  reader->Finish();  // CANCELLED, as asked
}

}  // namespace bench
}  // namespace rrpc
