#include "rpc/core/message_cache.h"

#include "util/thread_stash.h"

namespace rrpc::rpc {

namespace {

// A call's two messages, either of them possibly null (not kept).
struct Kept {
  const google::protobuf::Message* request_prototype;
  const google::protobuf::Message* response_prototype;
  google::protobuf::Message* request;
  google::protobuf::Message* response;
};
void DeleteKept(Kept kept) {
  delete kept.request;
  delete kept.response;
}
using KeptMessages = ThreadStash<Kept, MessageCache::kSlots, DeleteKept>;

}  // namespace

MessageCache::CallMessages MessageCache::Take(const google::protobuf::Message& request_prototype,
                                              const google::protobuf::Message& response_prototype) {
  CallMessages out;
  Kept kept;
  if (KeptMessages::Pop(
          [&](const Kept& k) {
            return k.request_prototype == &request_prototype &&
                   k.response_prototype == &response_prototype;
          },
          &kept)) {
    out.request.reset(kept.request);
    out.response.reset(kept.response);
  }
  if (out.request == nullptr) out.request.reset(request_prototype.New());
  if (out.response == nullptr) out.response.reset(response_prototype.New());
  return out;
}

void MessageCache::Give(const google::protobuf::Message& request_prototype,
                        const google::protobuf::Message& response_prototype, CallMessages messages,
                        size_t request_bytes, size_t response_bytes) {
  if (request_bytes > kMaxBytes) messages.request.reset();
  if (response_bytes > kMaxBytes) messages.response.reset();
  if (messages.request == nullptr && messages.response == nullptr) return;
  if (messages.request != nullptr) messages.request->Clear();
  if (messages.response != nullptr) messages.response->Clear();
  if (KeptMessages::Push(Kept{&request_prototype, &response_prototype, messages.request.get(),
                              messages.response.get()})) {
    messages.request.release();
    messages.response.release();
  }
}

}  // namespace rrpc::rpc
