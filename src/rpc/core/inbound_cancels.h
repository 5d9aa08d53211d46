// InboundCancels: a server connection's calls in flight that a client's cancel frame may reach,
// by call id (docs/wire-format.md, "Control frames"), from their arrival until they answer. A
// cancel flags the call: a worker skips a flagged call still queued, a running handler sees
// RpcContext::cancelled(), and its OnCancel callback runs once.
//
// Most calls sit in cancel slots without a lock: only the reactor fills a slot (Track) or marks
// it busy while it flags the call for a cancel (its pointer then stays valid: the answering
// thread empties the slot with a compare-and-swap from the call to nullptr, waiting out a busy
// slot). A call goes to the narrow slots by call id modulo their count; when that one is taken,
// to the wide slots (made the first time, for a connection with many calls in flight), at the
// first free one of kCancelProbes places from its id. A call that finds none, and one whose
// handler asked for a cancel callback, is in a map under mu_ instead. Bounded by the calls in
// flight (and so by the inbound memory limits).
//
// Threads: Track and Cancel on the connection's reactor; Untrack and SetCallback on the thread
// answering the call or running its handler. Ownership: a member of its Connection (only of a
// client that negotiated CANCELLATION are calls tracked); it points at calls, owns none.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "rrpc/util/mutex.h"
#include "util/int_map.h"

namespace rrpc::rpc {

class InboundCall;
class MessengerMetrics;

class InboundCancels {
 public:
  InboundCancels() = default;
  InboundCancels(const InboundCancels&) = delete;
  InboundCancels& operator=(const InboundCancels&) = delete;

  // Reactor thread: a new call: findable by id (unless another call in flight holds the id in
  // the same place: a forged duplicate may stay uncancellable).
  void Track(InboundCall* call) RRPC_EXCLUDES(mu_) {
    if (!TrackInSlot(call)) TrackInMap(call);
  }
  // Any thread, once per tracked call: the call answers now (its Respond*()), so a cancel no
  // longer reaches it; drops the cancel callback it registered. From inside that callback too
  // (it may answer the call).
  void Untrack(InboundCall* call) RRPC_EXCLUDES(mu_);
  // The handler's thread (RpcContext::OnCancel): runs `callback` once when the call is
  // cancelled, on the reactor that read the cancel frame; at once, on this thread, when it was
  // cancelled already; never when the call is not tracked (its client cannot cancel).
  void SetCallback(InboundCall* call, std::function<void()> callback) RRPC_EXCLUDES(mu_);
  // Reactor thread: the cancel of `call_id`; a no-op when no call of that id is in flight.
  // `metrics` (may be null) counts it.
  void Cancel(int32_t call_id, MessengerMetrics* metrics) RRPC_EXCLUDES(mu_);

 private:
  static constexpr int kNarrowSlots = 4;
  static constexpr int kWideSlots = 64;
  static constexpr int kCancelProbes = 4;
  template <int N>
  struct Slots {
    static_assert((N & (N - 1)) == 0, "a power of two");
    std::atomic<InboundCall*> call[N] = {};
    int32_t call_id[N] = {};  // reactor only: the id of the call it last put there
    // Reactor thread: the i-th place from `id` (modulo N).
    static int Index(int32_t id, int i) { return (id + i) & (N - 1); }
  };

  // Reactor thread: puts `call` in a free slot; false when it finds none.
  bool TrackInSlot(InboundCall* call);
  void TrackInMap(InboundCall* call) RRPC_EXCLUDES(mu_);
  // Reactor thread: the slot holding the call of `call_id`, or nullptr.
  std::atomic<InboundCall*>* FindSlot(int32_t call_id);

  // Made by the reactor: the narrow slots with the first tracked call, the wide ones with the
  // first call whose narrow slot is taken.
  std::unique_ptr<Slots<kNarrowSlots>> slots_;
  std::unique_ptr<Slots<kWideSlots>> wide_slots_;
  Mutex mu_;
  IntMap<InboundCall*> map_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
