#include "kv/kv_open_streams.h"

#include <utility>
#include <vector>

namespace rrpc::kv {

uint64_t KvOpenStreams::Add(rpc::Stream stream) {
  MutexLock lock(mu_);
  if (ended_) return 0;
  const uint64_t id = next_id_++;
  streams_.emplace(id, std::move(stream));
  return id;
}

void KvOpenStreams::Remove(uint64_t id) {
  rpc::Stream released;  // the handle goes outside the lock: releasing may end the stream
  MutexLock lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  released = std::move(it->second);
  streams_.erase(it);
}

void KvOpenStreams::EndAll() {
  std::vector<rpc::Stream> streams;
  {
    MutexLock lock(mu_);
    ended_ = true;
    for (auto& [id, s] : streams_) streams.push_back(s);
  }
  const Status why = Status::ServiceUnavailable(
      "the kv-server is shutting down: resume after the last key received");
  for (rpc::Stream& s : streams) {
    s.Finish(why);  // server side; nothing on a client side
    s.Cancel();     // client side; nothing more on a server side already finishing
  }
}

}  // namespace rrpc::kv
