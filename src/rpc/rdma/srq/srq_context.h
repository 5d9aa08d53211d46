// SrqContext: what the RDMA connections of one reactor share in SRQ mode (docs/rdma.md, "SRQ
// mode"): one shared receive queue fed from one receive block pool that grows in chunks up to a
// cap, one send block pool, one send CQ and one receive CQ behind one completion channel.
// Completions are handed to connections by the QP number they carry; a send's wr_id is its send
// block, a receive's its receive block, so a completion for a QP already gone still returns its
// block.
//
// The credit ledger: every credit a connection has granted its peer (held by the peer or owed to
// it) is a posted receive reserved for that peer. The ledger keeps
//   granted <= posted - reserve,
// so whatever the peers send at once finds a posted receive (no RNR, rnr_retry = 0 is safe). A
// consumed buffer goes back to the peer that used it (one-for-one, never waits) while the peer is
// below its target; targets above the initial grant (raised by credit requests) are served from
// the free part of the ledger, and wait in FIFO order when there is none, while the pool grows.
//
// Owned by the factory (one per reactor thread) and held by every connection using it. Used on
// its reactor thread only, except stats(), which any thread may read, and DiscardSoon(). It
// watches its reactor's loop from its creation until LeaveLoop (the reactor stops, or the
// factory replaces it after a device failure); the factory holds it until then, so while it
// watches its last reference goes on that thread.
#pragma once

#include <ev.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "rpc/rdma/block_pool.h"
#include "rpc/rdma/verbs.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {

class RdmaEndpoint;

// Per reactor; published for any thread to read.
struct SrqStats {
  std::atomic<uint64_t> posted_receives{0};
  std::atomic<uint64_t> pool_bytes{0};  // registered receive memory
  std::atomic<uint64_t> grants_outstanding{0};
  std::atomic<uint64_t> credit_waits{0};  // top-ups that had to wait for the pool
  std::atomic<uint64_t> pool_growths{0};
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> limit_events{0};        // the SRQ's limit event fired (posted receives low)
  std::atomic<uint64_t> reclaims{0};            // idle peers asked to give credits back
  std::atomic<uint64_t> credits_reclaimed{0};   // credits given back by them
  std::atomic<uint64_t> background_growths{0};  // chunks made off the reactor thread
  std::atomic<uint64_t> failed_growths{0};      // chunks a growth thread could not make
  std::atomic<uint64_t> retiring{0};            // QPs in ERR kept until drained (Retire)
};

// What the context calls on a connection (RdmaTransport in SRQ mode).
class SrqClient {
 public:
  virtual ~SrqClient() = default;
  virtual void OnSrqSendDone(uint32_t block, WcStatus status) = 0;
  virtual void OnSrqReceive(uint32_t block, uint32_t length, WcStatus status) = 0;
  // After a batch of completions: grants due, writers waiting for credits or send blocks.
  virtual void OnSrqBatchDone() = 0;
  // The ledger has room again for a top-up this connection waited for.
  virtual void OnSrqCreditsAvailable() = 0;
  // Every reclaim_after / 2: a peer that sent nothing since the last look for reclaim_after
  // gives back the credits it holds above the floor (docs/rdma.md, "Reclaim").
  virtual void OnSrqIdleCheck(MonoTime now) = 0;
  // The device reported the connection's QP broken (a fatal, request or access error), or the
  // device itself: fail the connection now (its calls may be retried), not when TCP notices.
  virtual void OnSrqQpFailed(const Status& why) = 0;
};

class SrqContext {
 public:
  // Its reactor thread. `loop`: that reactor's, watched from now on (nullptr: none, for a use
  // without a reactor; then no connection may attach). `keep_alive` keeps the device (and `pd`)
  // alive for a growth thread that outlives us.
  static Result<std::unique_ptr<SrqContext>> Create(Context* ctx, ProtectionDomain* pd,
                                                    const SrqOptions& options, struct ev_loop* loop,
                                                    std::shared_ptr<void> keep_alive = nullptr);
  // Its reactor thread while it watches; after LeaveLoop, any thread. QPs retired and not yet
  // drained, and endpoints handed back and not yet taken, go before the SRQ and CQs.
  ~SrqContext();
  // Reactor thread: stops watching the loop for good (the reactor stops, or the context is
  // replaced). Retired QPs not drained yet, and endpoints handed back from now on, wait for the
  // destructor. Idempotent.
  void LeaveLoop();
  // Whether it watches its reactor's loop (from its creation until LeaveLoop).
  bool watching() const { return loop_ != nullptr; }
  // An async event read from `ctx` (by its DeviceEventWatcher, async_events.h) for an SRQ or QP
  // of a context of that device, or a device fatal: handed to the contexts' reactors. Any thread.
  static void DeliverAsyncEvent(const Context* ctx, const AsyncEvent& event);

  const SrqOptions& options() const { return options_; }
  // The device it is bound to (its SRQ, CQs and memory are that device's).
  const Context* device() const { return ctx_; }
  const SrqStats& stats() const { return *stats_; }
  // For metric callbacks that may outlive the context.
  std::shared_ptr<const SrqStats> shared_stats() const { return stats_; }
  CompletionQueue* send_cq() const { return send_cq_.get(); }
  CompletionQueue* recv_cq() const { return recv_cq_.get(); }
  SharedReceiveQueue* srq() const { return srq_.get(); }
  RegisteredBlockPool* send_pool() const { return send_pool_.get(); }
  uint8_t* receive_block(uint32_t index) const {
    return chunks_[index / options_.chunk_blocks]->block(index % options_.chunk_blocks);
  }

  // A QP was made for a connection on its way (the bootstrap): its completions are kept until
  // it attaches (its peer may send before the connection has started), or dropped by Forget.
  void Expect(uint32_t qp_num) { qps_[qp_num]; }
  void Forget(uint32_t qp_num);
  // The connection with QP `qp_num` starts receiving completions (until Retire).
  void Attach(uint32_t qp_num, SrqClient* client);
  // The connection is gone: its QP (moved to ERR by the caller) is kept until its `in_flight`
  // sends have completed (flushed) and, after its last-WQE-reached event, both CQs have been
  // polled empty: destroying it earlier would drop its completions from the CQs (mlx5 does) and
  // with them receive blocks never reposted. Its `share` of grants returns to the pool then.
  void Retire(uint32_t qp_num, std::unique_ptr<RdmaEndpoint> endpoint, uint32_t in_flight,
              uint32_t share);
  // QPs retired and not yet destroyed (waiting for their last WQE or sends).
  size_t retiring() const { return retiring_; }
  // An endpoint whose QP was expected and never attached (its connection went during the
  // bootstrap) goes, with the `share` of grants reserved for its peer: destroyed now when its QP
  // never left INIT (Forget; the share returns to the pool), else moved to ERR and retired (the
  // peer may have sent to it already).
  void Discard(std::unique_ptr<RdmaEndpoint> endpoint, uint32_t share);
  // Any thread (a setup thread, whose job was lent the endpoint): Discard, done by the reactor
  // through the hand-off on its next turn; after LeaveLoop it goes with the context.
  void DiscardSoon(std::unique_ptr<RdmaEndpoint> endpoint, uint32_t share);

  // Ledger. Reserves up to `n` grants from the free part; returns how many.
  uint32_t Reserve(uint32_t n);
  // Reserves exactly `n`, growing the pool now if needed; false (nothing reserved) at the cap.
  bool ReserveInitial(uint32_t n);
  // `n` grants consumed (a message arrived) or given up.
  void Release(uint32_t n);
  // An idle peer was asked for its credits above the floor / gave `n` back.
  void CountReclaim() { stats_->reclaims.fetch_add(1, std::memory_order_relaxed); }
  void CountReclaimed(uint32_t n) {
    stats_->credits_reclaimed.fetch_add(n, std::memory_order_relaxed);
  }
  // Posts receive block `index` again.
  Status Repost(uint32_t index);
  // `client` waits for free grants (once in the queue at most).
  void WaitForCredits(SrqClient* client);
  void CancelWait(SrqClient* client);
  // `client` found no free shared send block: called back after the next batch that freed some.
  void WaitForSendBlock(SrqClient* client) { send_waiters_.insert(client); }

  // What other threads hand the reactor: a growth thread its chunk, the device's event
  // watcher the async events for our SRQ and QPs. A growth thread holds it (and the
  // device) past our destruction; `open` false means we are gone and the chunk is dropped.
  struct Handoff {
    ~Handoff();  // out of line: RdmaEndpoint is incomplete here
    std::mutex mu;
    // The context's device (set before it registers, read-only after): a device fatal event
    // concerns the contexts of that device only.
    const Context* device = nullptr;
    bool open = true;                            // guarded by mu
    struct ev_loop* loop = nullptr;              // guarded by mu; null when not watching
    ev_async* ready_watcher = nullptr;           // guarded by mu
    std::unique_ptr<RegisteredBlockPool> chunk;  // guarded by mu; made, not yet taken
    bool failed = false;                         // guarded by mu
    bool limit_hit = false;                      // guarded by mu; the SRQ's limit event
    std::vector<uint32_t> last_wqe;              // guarded by mu; QPs whose last WQE is reached
    std::vector<uint32_t> qp_failed;             // guarded by mu; QPs the device reported broken
    bool device_failed = false;                  // guarded by mu; the device is lost
    // Guarded by mu: endpoints to Discard, with their shares (DiscardSoon).
    std::vector<std::pair<std::unique_ptr<RdmaEndpoint>, uint32_t>> discard;
    // Set with any of the five above (under mu), cleared as they are taken: the reactor's
    // completion batches look at it without the lock.
    std::atomic<bool> has_events{false};
    // Wakes the reactor, if it watches. REQUIRES: mu held.
    void Wake();
  };

 private:
  SrqContext(const SrqOptions& options) : options_(options) {}
  static void OnChannelReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnIdleTimer(struct ev_loop* loop, ev_timer* w, int revents);
  void HandleCompletions();
  // Starts the completion, hand-off and idle watchers (at creation; LeaveLoop stops them).
  void StartWatching(struct ev_loop* loop);
  // Arms the SRQ limit at a quarter of the posted receives (at least the reserve).
  void ArmLimit();
  // The limit event fired (flagged by the device's event watcher): grows
  // the pool by a chunk within the cap, and re-arms.
  void HandleLimitEvent();
  // Adds a chunk of receive blocks, all posted; false at the cap or on failure.
  bool Grow();
  // Whether one more chunk stays within the cap, counting a chunk still being made.
  bool RoomForAnotherChunk() const;
  // Posts `chunk`'s blocks as the next chunk of the pool.
  bool AddChunk(std::unique_ptr<RegisteredBlockPool> chunk);
  // Grows by a chunk: off the reactor thread (options().grow_off_reactor: false when one is
  // already on its way; waiters are served when it is posted) or now. False at the cap.
  bool GrowSoon();
  static void OnHandoff(struct ev_loop* loop, ev_async* w, int revents);
  // Takes the async events handed over, before a poll of the CQs (a last WQE taken here is
  // drained by that poll). Connections to fail (their QP or the device broke) go to `failed`.
  void TakeEvents(std::vector<SrqClient*>* failed, bool* device_failed);
  // Destroys the retired QPs whose last WQE was taken before the poll just done and whose sends
  // are all in; their shares go back to the pool.
  void DestroyDrained();
  int64_t Free() const {
    return static_cast<int64_t>(posted_) - options_.reserve - granted_ - quarantined_;
  }
  void ServeWaiters();
  void Publish();

  const SrqOptions options_;
  Context* ctx_ = nullptr;
  ProtectionDomain* pd_ = nullptr;
  ev_timer idle_timer_;
  ev_async growth_ready_;
  std::shared_ptr<void> keep_alive_;
  const std::shared_ptr<Handoff> handoff_ = std::make_shared<Handoff>();
  bool growing_ = false;  // a growth thread is on its way (reactor thread)
  uint32_t max_blocks_ = 0;
  const std::shared_ptr<SrqStats> stats_ = std::make_shared<SrqStats>();
  struct ev_loop* loop_ = nullptr;  // its reactor's while it watches, else null
  ev_io watcher_;

  uint64_t posted_ = 0;
  uint64_t granted_ = 0;
  uint64_t quarantined_ = 0;  // shares of retired connections, free when their QP is destroyed
  size_t retiring_ = 0;
  std::deque<SrqClient*> waiters_;
  std::unordered_set<SrqClient*> send_waiters_;
  std::unordered_set<SrqClient*> live_;  // attached connections

  struct Entry {
    SrqClient* client = nullptr;            // nullptr once retired
    std::unique_ptr<RdmaEndpoint> retired;  // kept until drained (Retire)
    uint32_t in_flight = 0;
    uint32_t share = 0;                 // quarantined grants, freed with the QP
    bool last_wqe = false;              // its last-WQE-reached event was taken
    std::vector<WorkCompletion> early;  // arrived before the connection attached
  };
  // Hands `wc` to its connection, keeps it for one on its way, or returns its block.
  void Dispatch(const WorkCompletion& wc, std::vector<SrqClient*>* touched);
  std::vector<uint32_t> early_ready_;  // attached QPs with early completions to hand over
  size_t attached_ = 0;

  // Destruction order: the QPs (in qps_, declared last) go first, then the SRQ, CQs and memory.
  std::unique_ptr<CompletionChannel> channel_;
  std::unique_ptr<CompletionQueue> send_cq_;
  std::unique_ptr<CompletionQueue> recv_cq_;
  std::vector<std::unique_ptr<RegisteredBlockPool>> chunks_;
  std::unique_ptr<RegisteredBlockPool> send_pool_;
  std::unique_ptr<SharedReceiveQueue> srq_;
  std::unordered_map<uint32_t, Entry> qps_;  // by QP number
};

}  // namespace rrpc::rdma
