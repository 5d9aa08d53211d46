#include "bench/peers/grpc_echo_server.h"

#include <gflags/gflags.h>

#include <chrono>

#include "bench/peers/payload_pattern.h"

DEFINE_int32(grpc_server_requests_per_cq, 256,
             "Echo requests kept posted on each server completion queue; should exceed the "
             "calls in flight per CQ, or arriving calls wait for one to be posted");

namespace rrpc {
namespace bench {

// One Echo call on the server: posted, then answered, then deleted. Lives on one CQ's thread.
class GrpcServerCall {
 public:
  GrpcServerCall(GrpcEchoServer* server, GrpcEchoServer::CqWorker* worker)
      : server_(server), worker_(worker), responder_(&ctx_) {
    server_->service_.RequestEcho(&ctx_, &request_, &responder_, worker_->cq.get(),
                                  worker_->cq.get(), this);
  }

  // Called with this call's tag from the CQ; `ok` false means the server is shutting down.
  void Proceed(bool ok) {
    if (finishing_ || !ok) {
      delete this;
      return;
    }
    // Replace ourselves first, so the CQ never runs short of posted requests.
    server_->PostCall(worker_);
    const PeerConfig& config = server_->config_;
    if (config.server_response_bytes < 0 && !config.corrupt_responses_for_test) {
      response_.mutable_payload()->swap(*request_.mutable_payload());  // echo without a copy
    } else {
      const std::string& in = request_.payload();
      const size_t len = config.server_response_bytes < 0
                             ? in.size()
                             : static_cast<size_t>(config.server_response_bytes);
      std::string* out = response_.mutable_payload();
      out->resize(len);
      PayloadPattern::BuildResponse(in.data(), in.size(), out->data(), len);
      if (config.corrupt_responses_for_test && len > 0) (*out)[len - 1] ^= 1;
    }
    finishing_ = true;
    responder_.Finish(response_, grpc::Status::OK, this);
  }

 private:
  GrpcEchoServer* const server_;
  GrpcEchoServer::CqWorker* const worker_;
  grpc::ServerContext ctx_;
  EchoRequest request_;
  EchoResponse response_;
  grpc::ServerAsyncResponseWriter<EchoResponse> responder_;
  bool finishing_ = false;
};

std::unique_ptr<PeerServer> GrpcEchoServer::Start(const PeerConfig& config, std::string* error) {
  std::unique_ptr<GrpcEchoServer> server(new GrpcEchoServer(config));
  grpc::ServerBuilder builder;
  const std::string addr = config.bind_host + ":" + std::to_string(config.port);
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(-1);  // payloads up to the peers' 64 MiB limit
  builder.SetMaxSendMessageSize(-1);
  for (int i = 0; i < config.server_threads; ++i) {
    auto worker = std::make_unique<CqWorker>();
    worker->cq = builder.AddCompletionQueue();
    server->workers_.push_back(std::move(worker));
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    *error = "gRPC could not listen on " + addr;
    server->stopped_ = true;  // no thread started; the CQs shut down with the builder's objects
    for (auto& worker : server->workers_) {
      worker->cq->Shutdown();
      void* tag;
      bool ok;
      while (worker->cq->Next(&tag, &ok)) {
      }
    }
    return nullptr;
  }
  for (auto& worker : server->workers_) {
    for (int i = 0; i < FLAGS_grpc_server_requests_per_cq; ++i) server->PostCall(worker.get());
    CqWorker* w = worker.get();
    GrpcEchoServer* s = server.get();
    worker->thread = std::thread([s, w] { s->Poll(w); });
  }
  return server;
}

void GrpcEchoServer::PostCall(CqWorker* worker) {
  std::lock_guard<std::mutex> lock(worker->mu);
  if (worker->accepting) new GrpcServerCall(this, worker);  // deletes itself
}

void GrpcEchoServer::Poll(CqWorker* worker) {
  void* tag;
  bool ok;
  while (worker->cq->Next(&tag, &ok)) static_cast<GrpcServerCall*>(tag)->Proceed(ok);
}

GrpcEchoServer::~GrpcEchoServer() { Shutdown(); }

void GrpcEchoServer::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& worker : workers_) {
    std::lock_guard<std::mutex> lock(worker->mu);
    worker->accepting = false;
  }
  // Calls still running get a second to finish, then are cancelled; posted requests come back
  // with ok=false and delete themselves as the pollers drain their CQs.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  for (auto& worker : workers_) worker->cq->Shutdown();
  for (auto& worker : workers_) worker->thread.join();
}

}  // namespace bench
}  // namespace rrpc
