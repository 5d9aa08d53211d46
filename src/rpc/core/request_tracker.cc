#include "rpc/core/request_tracker.h"

#include <random>

namespace rrpc::rpc {

RequestTracker::RequestTracker() : client_id_(kClientIdBytes, '\0') {
  std::random_device rd;  // the OS's source: ids of two processes must not collide
  for (size_t i = 0; i < kClientIdBytes; i += 4) {
    const uint32_t r = rd();
    for (size_t b = 0; b < 4; b++) client_id_[i + b] = static_cast<char>(r >> (8 * b));
  }
}

uint64_t RequestTracker::NewSequence() {
  MutexLock l(mu_);
  const uint64_t seq = next_seq_++;
  in_flight_.insert(seq);
  return seq;
}

void RequestTracker::Complete(uint64_t seq) {
  MutexLock l(mu_);
  in_flight_.erase(seq);
}

uint64_t RequestTracker::FirstIncomplete() const {
  MutexLock l(mu_);
  return in_flight_.empty() ? next_seq_ : *in_flight_.begin();
}

}  // namespace rrpc::rpc
