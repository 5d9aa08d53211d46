#include "rpc/core/inbound_cancels.h"

#include <thread>

#include "rpc/core/inbound_call.h"
#include "rpc/observe/rpc_metrics.h"
#include "util/spin_wait.h"

namespace rrpc::rpc {

namespace {
// The call whose cancel callback this thread runs (under mu_), so that the callback may answer
// the call: its untracking then must not take the lock again.
thread_local InboundCall* tls_cancelling = nullptr;

// A cancel slot while the reactor flags its call: never a call's address.
InboundCall* const kSlotBusy = reinterpret_cast<InboundCall*>(uintptr_t{1});

// Reactor thread: puts `call` in the first free slot of `slots` among `probes` places from its
// id. Only this thread fills a slot: one seen empty stays empty until it does.
template <typename Slots>
bool PlaceInSlot(Slots* slots, int probes, InboundCall* call) {
  const int32_t id = call->call_id();
  for (int p = 0; p < probes; p++) {
    const int i = Slots::Index(id, p);
    std::atomic<InboundCall*>& slot = slots->call[i];
    if (slot.load(std::memory_order_relaxed) != nullptr) continue;
    slots->call_id[i] = id;
    slot.store(call, std::memory_order_release);
    call->set_cancel_track(InboundCall::CancelTrack::kSlot, &slot);
    return true;
  }
  return false;
}

template <typename Slots>
std::atomic<InboundCall*>* FindInSlots(Slots* slots, int probes, int32_t id) {
  if (slots == nullptr) return nullptr;
  for (int p = 0; p < probes; p++) {
    const int i = Slots::Index(id, p);
    if (slots->call_id[i] == id && slots->call[i].load(std::memory_order_acquire) != nullptr) {
      return &slots->call[i];
    }
  }
  return nullptr;
}

// The answering thread: empties `slot` of `call`, waiting while the reactor flags it (a few
// instructions, unless the reactor is preempted there).
void EmptySlot(std::atomic<InboundCall*>* slot, InboundCall* call) {
  InboundCall* expected = call;
  for (int spins = 1; !slot->compare_exchange_weak(expected, nullptr, std::memory_order_acq_rel,
                                                   std::memory_order_relaxed);
       spins++) {
    DCHECK(expected == call || expected == kSlotBusy);
    expected = call;
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
  }
}
}  // namespace

bool InboundCancels::TrackInSlot(InboundCall* call) {
  if (slots_ == nullptr) return false;  // made with the first call (TrackInMap)
  if (PlaceInSlot(slots_.get(), 1, call)) return true;
  if (wide_slots_ == nullptr) wide_slots_ = std::make_unique<Slots<kWideSlots>>();
  return PlaceInSlot(wide_slots_.get(), kCancelProbes, call);
}

std::atomic<InboundCall*>* InboundCancels::FindSlot(int32_t call_id) {
  std::atomic<InboundCall*>* slot = FindInSlots(slots_.get(), 1, call_id);
  if (slot != nullptr) return slot;
  return FindInSlots(wide_slots_.get(), kCancelProbes, call_id);
}

void InboundCancels::TrackInMap(InboundCall* call) {
  if (slots_ == nullptr) {  // the first call: it gets a slot
    slots_ = std::make_unique<Slots<kNarrowSlots>>();
    if (TrackInSlot(call)) return;
  }
  MutexLock lock(mu_);
  // A duplicate id in the map stays untracked.
  if (map_.TryInsert(call->call_id(), call)) {
    call->set_cancel_track(InboundCall::CancelTrack::kMap);
  }
}

void InboundCancels::Untrack(InboundCall* call) RRPC_NO_THREAD_SAFETY_ANALYSIS {
  if (call->cancel_track() == InboundCall::CancelTrack::kSlot) {
    EmptySlot(call->cancel_slot(), call);
    return;
  }
  if (tls_cancelling == call) {
    // Answered from its own cancel callback: this thread holds mu_ already, and the callback
    // (running) is dropped by the canceller once it returns.
    map_.Erase(call->call_id());
    return;
  }
  std::function<void()> callback;  // destroyed after unlocking: it may hold anything
  {
    MutexLock lock(mu_);
    map_.Erase(call->call_id());
    // Set only by a handler that asked (RpcContext::OnCancel): most calls have none to drop.
    if (call->cancel_callback()) callback.swap(call->cancel_callback());
  }
}

void InboundCancels::SetCallback(InboundCall* call, std::function<void()> callback) {
  if (!call->cancel_tracked()) return;  // the client cannot cancel it: it would never run
  {
    MutexLock lock(mu_);
    if (call->cancel_track() == InboundCall::CancelTrack::kSlot) {
      // A call with a callback lives in the map: the canceller runs it under mu_, which keeps the
      // call from answering meanwhile. Moved under the lock, so a cancel that misses the slot
      // finds the map entry.
      EmptySlot(call->cancel_slot(), call);
      const bool tracked = map_.TryInsert(call->call_id(), call);
      call->set_cancel_track(tracked ? InboundCall::CancelTrack::kMap
                                     : InboundCall::CancelTrack::kNone);
      if (!tracked && !call->client_cancelled()) return;  // a forged duplicate id
    }
    if (!call->client_cancelled()) {
      call->cancel_callback() = std::move(callback);
      return;
    }
  }
  callback();  // cancelled already
}

void InboundCancels::Cancel(int32_t call_id, MessengerMetrics* m) {
  if (m != nullptr) m->cancel_requests->Increment();
  if (std::atomic<InboundCall*>* found = FindSlot(call_id); found != nullptr) {
    std::atomic<InboundCall*>& slot = *found;
    InboundCall* call = slot.load(std::memory_order_acquire);
    if (call != nullptr &&
        slot.compare_exchange_strong(call, kSlotBusy, std::memory_order_acquire)) {
      // The call cannot answer (and go) until the slot holds it again.
      if (!call->client_cancelled()) {
        const bool running = call->MarkCancelled();
        if (running && m != nullptr) m->calls_cancelled_running->Increment();
      }
      slot.store(call, std::memory_order_release);
      return;
    }
  }
  MutexLock lock(mu_);
  InboundCall** found = map_.Find(call_id);
  if (found == nullptr) return;  // answered already, or never here
  InboundCall* call = *found;
  if (call->client_cancelled()) return;  // a second cancel of the same call
  const bool running = call->MarkCancelled();
  if (running && m != nullptr) m->calls_cancelled_running->Increment();
  std::function<void()> callback;
  callback.swap(call->cancel_callback());
  if (!callback) return;
  // Under the lock: the call cannot answer (and go) while its callback runs, unless the callback
  // answers it itself (Untrack knows it by tls_cancelling). The call must not be touched after
  // the callback returns.
  tls_cancelling = call;
  callback();
  tls_cancelling = nullptr;
}

}  // namespace rrpc::rpc
