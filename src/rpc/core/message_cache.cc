#include "rpc/core/message_cache.h"

#include "util/thread_stash.h"

namespace rrpc::rpc {

namespace {

struct Kept {
  const google::protobuf::Message* prototype;
  google::protobuf::Message* message;
};
void DeleteKept(Kept kept) { delete kept.message; }
using KeptMessages = ThreadStash<Kept, MessageCache::kSlots, DeleteKept>;

}  // namespace

std::unique_ptr<google::protobuf::Message> MessageCache::Take(
    const google::protobuf::Message& prototype) {
  Kept kept;
  if (KeptMessages::Pop([&](const Kept& k) { return k.prototype == &prototype; }, &kept)) {
    return std::unique_ptr<google::protobuf::Message>(kept.message);
  }
  return std::unique_ptr<google::protobuf::Message>(prototype.New());
}

void MessageCache::Give(const google::protobuf::Message& prototype,
                        std::unique_ptr<google::protobuf::Message> message,
                        size_t serialized_bytes) {
  if (message == nullptr || serialized_bytes > kMaxBytes) return;
  message->Clear();
  if (KeptMessages::Push(Kept{&prototype, message.get()})) message.release();
}

}  // namespace rrpc::rpc
