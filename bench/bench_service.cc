#include "bench/bench_service.h"

#include <cstring>
#include <string>

#include "bench/bench_payload.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/util/block.h"

namespace rrpc::bench {

void BenchEchoService::Echo(const BenchRequestPB* req, BenchResponsePB* resp,
                            rpc::RpcContext* context) {
  const std::string& in = req->payload();
  const size_t out_size = req->has_response_size() ? req->response_size() : in.size();
  std::string* out = resp->mutable_payload();
  if (out_size == in.size()) {
    *out = in;
  } else {
    out->resize(out_size);
    BuildEcho(Slice(in), out->data(), out_size);
  }
  // Sent back from where they arrived: the response sidecar shares the request's read block (it
  // lives until the response is written), so the bulk path measures rrpc's copies, not ours.
  for (size_t i = 0; i < context->num_inbound_sidecars(); i++) {
    context->AddOutboundSidecar(context->inbound_sidecar_block(i));
  }
  if (corrupt_responses_) {
    if (out->empty()) {
      out->push_back('x');
    } else {
      (*out)[out->size() / 2] ^= 0x5a;
    }
  }
  context->RespondSuccess();
}

Result<std::shared_ptr<rpc::Messenger>> StartBenchServer(const BenchServerOptions& options,
                                                         Sockaddr* bound) {
  rpc::MessengerOptions messenger_options = options.messenger;
  messenger_options.name = "server";
  messenger_options.num_reactors = options.reactors;
  messenger_options.num_workers = options.workers;
  messenger_options.service_queue_length = options.service_queue_length;
  rpc::MessengerBuilder builder(std::move(messenger_options));
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> messenger, builder.Build());
  auto service = std::make_unique<BenchEchoService>(options.corrupt_responses_for_test);
  if (options.inline_handlers) RRPC_RETURN_NOT_OK(service->SetRunInline("Echo"));
  RRPC_RETURN_NOT_OK(messenger->RegisterService(std::move(service)));
  RRPC_RETURN_NOT_OK(messenger->Listen(options.bind_address, bound));
  return messenger;
}

}  // namespace rrpc::bench
