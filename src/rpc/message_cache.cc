#include "rpc/message_cache.h"

namespace rrpc::rpc {

namespace {

// Trivially destructible, so it stays usable while other thread_locals are destroyed at thread
// exit; CacheCleanup deletes what it holds and closes it then.
struct Slots {
  const google::protobuf::Message* prototype[MessageCache::kSlots];
  google::protobuf::Message* message[MessageCache::kSlots];
  int count;
  bool closed;
};
thread_local Slots tls_slots;

struct CacheCleanup {
  ~CacheCleanup() {
    Slots& s = tls_slots;
    s.closed = true;
    while (s.count > 0) delete s.message[--s.count];
  }
};

}  // namespace

std::unique_ptr<google::protobuf::Message> MessageCache::Take(
    const google::protobuf::Message& prototype) {
  Slots& s = tls_slots;
  for (int i = s.count - 1; i >= 0; i--) {
    if (s.prototype[i] != &prototype) continue;
    std::unique_ptr<google::protobuf::Message> out(s.message[i]);
    // Keep the slots packed: the last one fills the hole.
    s.count--;
    s.prototype[i] = s.prototype[s.count];
    s.message[i] = s.message[s.count];
    return out;
  }
  return std::unique_ptr<google::protobuf::Message>(prototype.New());
}

void MessageCache::Give(const google::protobuf::Message& prototype,
                        std::unique_ptr<google::protobuf::Message> message,
                        size_t serialized_bytes) {
  Slots& s = tls_slots;
  if (message == nullptr || serialized_bytes > kMaxBytes || s.closed || s.count == kSlots) return;
  thread_local CacheCleanup cleanup;  // registered on first use, runs at thread exit
  (void)cleanup;
  message->Clear();
  s.prototype[s.count] = &prototype;
  s.message[s.count] = message.release();
  s.count++;
}

}  // namespace rrpc::rpc
