// RdmaTransport: a connection's frames over an RC queue pair (private receive queue). Frames are
// cut into messages of at most one receive buffer, one credit each (credit_window.h), posted
// inline when they fit the granted cap. Write() (rdma_send.cc) copies small pieces into
// registered send blocks; a large piece whose Block is registered (a receive block of this
// connection being echoed, or a heap Block registered on its first send, for its lifetime) is
// sent where it is: the send's SGE list points at it, and the transport keeps a reference to its
// block until the send completes (docs/rdma.md, "Zero copy on send").
// Received messages go up in one of two ways (docs/rdma.md, "Zero copy"):
//  - large (at least lend_min_bytes of payload starting at a frame boundary): the receive block is
//    lent to the calls (RegisteredBlockPool::Lend) and every whole frame in it goes up as a
//    BlockSlice of it, read where the NIC put it; a spare block is posted in its place, so the
//    peer's credits don't wait for the calls; the lent block becomes a spare again when its last
//    call lets go. With no spare left (calls hold them all) the message is copied out instead;
//  - otherwise copied out of the block into a FrameReader and the block reposted at once; a frame
//    longer than a block is assembled there, once, into a block of its exact size.
// Either way one grant more is owed. Completions arrive through the CQ's channel fd, watched by
// the reactor (or, in busy-poll mode, by polling every loop iteration). The TCP socket of the
// bootstrap stays open and watched: its close is the peer's death, any byte on it an error. A
// write waiting for credits with no grant received for options.credit_starved_timeout also
// declares the peer dead (a live one grants within a reactor iteration; docs/reliability.md).
//
// SRQ mode (srq_context.h): the receive blocks, send blocks and CQs are the reactor's, the
// SrqContext hands this connection its completions, and the grants it owes come from the
// reactor's ledger: a consumed buffer is granted back one-for-one up to the peer's target, which
// starts at the initial grant and rises on the peer's credit requests (served from the free part
// of the pool, waiting while there is none). Received messages are always copied out (the shared
// pool has no spares to post in a lent block's place).
//
// Each message starts with an 8-byte header: kind (1 data, 2 grant only), a credit request (0
// none, 1 soft, 2 hard; only sent to a peer whose receives are SRQ), the credits the sender gives
// back (answering a reclaim), a reclaim (0 none, else: keep at most this many of my credits; only
// from an SRQ receiver), and the credits it grants (big-endian 32 bits); docs/wire-format.md.
//
// Reclaim (SRQ receiver): a peer that sent nothing for srq.reclaim_after has its target lowered
// to srq.floor_credits and, when it holds more, is asked to keep only that many; it stops using
// the rest at once and says so in its next message (a grant-only one if it has nothing else), and
// the ledger gets them back. Its next burst asks for credits again as usual.
// Threads: the reactor's, except Write() with a private receive queue: capabilities() then say
// concurrent_write, and a worker may write a lone response (a caller its call) under the
// connection's write lock while the reactor reads, which saves a hand-off to the reactor per
// message. The send side's state (credits, send blocks, sends in flight,
// credit requests and returns) is then shared with the reactor's completion and receive paths,
// under send_mu_ (taken after the connection's write lock; no callback into the connection runs
// under it). SRQ mode: reactor only (its SrqContext is).
#pragma once

#include <ev.h>

#include <array>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "rpc/rdma/async_events.h"
#include "rpc/rdma/credit_window.h"
#include "rpc/rdma/rdma_endpoint.h"
#include "rpc/rdma/setup_thread.h"
#include "rpc/transport/frame_reader.h"
#include "rpc/transport/transport.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/copy_counter.h"
#include "rrpc/util/mutex.h"
#include "util/socket.h"

namespace rrpc {
class Counter;
class HistogramMetric;
}  // namespace rrpc

namespace rrpc::rdma {

inline constexpr size_t kMessageHeaderSize = 8;
// Header byte 0: the message kind.
inline constexpr uint8_t kKindData = 1;
inline constexpr uint8_t kKindGrant = 2;
// wr_id of a send: its send block index with this bit set (a failed completion's opcode is not
// reliable on hardware, so the id says which queue the request came from).
inline constexpr uint64_t kSendWrIdBit = 1ull << 32;

// The metrics RDMA connections report into (the factory's, exported on the messenger's /metrics);
// shared by all of them. Any may be nullptr (not counted).
struct RdmaMetrics {
  HistogramMetric* inline_send_bytes = nullptr;  // sizes of messages sent inline
  HistogramMetric* posted_send_bytes = nullptr;  // sizes of messages sent from registered memory
  Counter* sent_bytes = nullptr;                 // message bytes posted (headers included)
  Counter* received_bytes = nullptr;             // message bytes received (headers included)
  Counter* credit_waits = nullptr;  // a Write stopped with bytes left: no credit to spend
  Counter* slow_grants =
      nullptr;  // a credit wait outlasted credit_starved_timeout, granted meanwhile
  Counter* lent_messages = nullptr;         // messages handed up by reference (zero copy)
  Counter* copied_no_spare = nullptr;       // large messages copied out: every spare block was lent
  Counter* zero_copy_sent_bytes = nullptr;  // payload bytes sent from where they were (no copy)
  Counter* copied_sent_bytes = nullptr;     // payload bytes copied into send blocks
  Counter* send_registrations = nullptr;    // Blocks registered on their first zero-copy send
};

// SRQ mode: the reactor's context and the grant reserved for the peer at the bootstrap.
struct SrqBinding {
  std::shared_ptr<SrqContext> context;  // nullptr: private receive queue
  uint32_t initial_grant = 0;
};

class RdmaTransport final : public rpc::Transport, private SrqClient {
 public:
  // `endpoint` is connected to the peer, which posted `peer_credits` receive buffers of
  // `peer_buffer_size` bytes; `keep_alive` is held until the transport is gone (the device, and
  // the registry `metrics` live in when the factory owns it). `setup`: where a Block's first
  // registration for a send by reference runs (nullptr: on the writing thread, under the send
  // lock).
  RdmaTransport(std::unique_ptr<RdmaEndpoint> endpoint, Socket bootstrap_socket,
                uint32_t peer_credits, uint32_t peer_buffer_size,
                const RdmaTransportOptions& options, RdmaMetrics metrics,
                std::shared_ptr<void> keep_alive, SrqBinding srq = {}, bool peer_srq = false,
                std::shared_ptr<SetupThread> setup = nullptr);
  ~RdmaTransport() override;

  const char* name() const override { return "rdma"; }
  // The bytes of a frame not yet complete, copied out of receive blocks (the connection's inbound
  // memory budget and frame progress timeout count them, as over TCP).
  size_t buffered_bytes() const override { return reader_.buffered(); }
  rpc::TransportCapabilities capabilities() const override {
    rpc::TransportCapabilities caps;
    caps.concurrent_write = srq_ == nullptr;
    return caps;
  }
  void Start(struct ev_loop* loop, rpc::TransportHost* host) override;
  Status ExpectPreamble(size_t bytes) override;
  Result<size_t> Write(const rpc::TransferQueue& queue, size_t max_bytes) override;
  void NotifyWhenWritable(bool on) override;
  void PauseReading(bool paused) override;
  Result<rpc::DetachedStream> Detach() override;
  void Close() override;
  void Describe(std::vector<std::pair<std::string, std::string>>* out) const override;

 private:
  static void OnChannelReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnSocketReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnIdle(struct ev_loop* loop, ev_idle* w, int revents);
  // Private receive queue: the device's watcher found an async event for us (async_events.h).
  static void OnAsyncWake(struct ev_loop* loop, ev_async* w, int revents);
  static void OnStarvedTimer(struct ev_loop* loop, ev_timer* w, int revents);
  // Reactor thread, while the host waits to write: when what holds it back is the peer's
  // credits, arms the timer that declares the peer dead after options_.credit_starved_timeout
  // with no grant (docs/reliability.md, "Dead peers over RDMA"). Nothing when it is armed.
  void WatchCreditStarvation();
  // The timer fired: still starved with no grant since, the connection fails; starved again
  // after a grant, the watch starts over; otherwise it ends.
  void CheckCreditStarvation();
  void HandleCompletions();
  void HandleReceive(uint32_t index, uint32_t length);
  void HandleSocket();
  // Hands up a data message's frames: by reference when it is large and a spare block can be
  // posted in its place (returns true: the block is lent, not to be reposted), else copied into
  // the reader (returns false).
  // `copy`: the message is there, not in block `index` (a message copied out while paused).
  bool Deliver(uint32_t index, uint32_t length, const uint8_t* copy = nullptr);
  // Reads paused: holds data message `index` until they resume; the one that used the peer's
  // last credit is copied out and its block reposted (the grant is owed at once).
  void Hold(uint32_t index, uint32_t length, bool peer_out_of_credits);
  // Lends receive block `index` and hands up its first `whole` bytes (whole frames) by reference.
  // False when no spare block could take its place.
  bool LendFrames(uint32_t index, const uint8_t* data, size_t whole);
  // Copies `bytes` into the reader and hands up every frame it completes.
  void CopyIntoReader(const uint8_t* data, size_t bytes);
  Status Repost(uint32_t index);
  // Posts send block `index` holding `length` bytes (header included).
  Status PostSend(uint32_t index, uint32_t length) RRPC_REQUIRES(send_mu_);
  // Posts a message of `length` bytes gathered from `sges` (the first in send block `index`);
  // `held` are the blocks the other SGEs read, kept until the send is retired (its completion,
  // or a later signaled one's); `signal` asks for a completion.
  static constexpr int kMaxSendSge = 4;
  Status PostSend(uint32_t index, const Sge* sges, int nsge, uint32_t length, BlockRef* held,
                  int nheld, bool signal) RRPC_REQUIRES(send_mu_);
  // The lkey under which `block`'s bytes are registered with our protection domain, registering
  // it when it is a heap block and `bytes` (what would be sent of it) reach register_min_bytes.
  // False: copy it.
  bool SendLkey(Block* block, size_t bytes, uint32_t* lkey) RRPC_REQUIRES(send_mu_);
  // Write, before send_mu_ (under the connection's write lock): how many of the `niov` gathered
  // pieces may go now. A piece that would go by reference but whose heap Block is not
  // registered yet ends the prefix: its registration (a control-path verb) goes to the setup
  // thread, whose end wakes the reactor (OnAsyncWake), which then calls OnWritable. niov when
  // none waits (or the setup thread's queue is full: SendLkey then registers inline).
  int RegisteredPrefix(const iovec* iov, Block* const* blocks, int niov);
  // Private mode: a signaled send completed; frees it and the unsignaled sends before it.
  void ReapSends() RRPC_REQUIRES(send_mu_);
  void SendGrantIfDue();
  void Fail(const Status& status);
  // Grants due, then the host told it may write when a message could go.
  void AfterCompletions();
  RegisteredBlockPool* send_pool() const { return srq_ ? srq_->send_pool() : ep_->send_pool(); }
  const uint8_t* receive_block(uint32_t index) const {
    return srq_ ? srq_->receive_block(index) : ep_->receive_pool()->block(index);
  }
  // Spends a credit; the grants the message carries (SRQ mode: now held by the peer).
  uint32_t SpendCredit() RRPC_REQUIRES(send_mu_);
  // The credit request byte for the next message (0 unless the peer's receives are SRQ).
  uint8_t CreditRequest() RRPC_REQUIRES(send_mu_);
  // SRQ mode: reserves grants from the pool up to the peer's target; waits when there are none.
  void TopUp();
  void DeliverHeld();
  // SrqClient.
  void OnSrqSendDone(uint32_t block, WcStatus status) override;
  void OnSrqReceive(uint32_t block, uint32_t length, WcStatus status) override;
  void OnSrqBatchDone() override { AfterCompletions(); }
  void OnSrqCreditsAvailable() override;
  void OnSrqIdleCheck(MonoTime now) override;
  void OnSrqQpFailed(const Status& why) override;
  // Fills header bytes 2 (credits given back) and 3 (reclaim) of the next message.
  void EncodeReturnsAndReclaim(uint8_t* header) RRPC_REQUIRES(send_mu_);
  // Header bytes 2 and 3 of a received message.
  void HandleReturnsAndReclaim(uint8_t returned, uint8_t keep) RRPC_REQUIRES(send_mu_);

  // Zero copy on send: a Block's first registration on the setup thread. Shared with its job;
  // Close disarms the wake-up (docs/rdma.md, "Control-path verbs").
  struct Registrations {
    std::mutex mu;
    struct ev_loop* loop = nullptr;  // with `wake`: nullptr until Start and once closed
    ev_async* wake = nullptr;
    const Block* pending = nullptr;  // being registered (the job holds it)
    const Block* failed = nullptr;   // the last whose registration failed (SendLkey retries)
    bool done = false;               // a registration ended since the reactor last looked
    uint64_t made = 0;
  };
  std::shared_ptr<SetupThread> setup_;
  std::shared_ptr<Registrations> registrations_;  // with setup_, private receive queue only
  std::unique_ptr<RdmaEndpoint> ep_;              // nullptr once closed
  Socket socket_;
  const RdmaTransportOptions options_;
  const RdmaMetrics metrics_;
  std::shared_ptr<void> keep_alive_;
  const uint32_t max_payload_;  // per message: the smaller of our send and the peer's receive
  mutable Mutex send_mu_;
  CreditWindow window_ RRPC_GUARDED_BY(send_mu_);
  rpc::FrameReader reader_;
  struct ev_loop* loop_ = nullptr;
  rpc::TransportHost* host_ = nullptr;
  ev_io channel_watcher_;
  ev_io socket_watcher_;
  ev_idle idle_watcher_;
  // Private receive queue: the wake-up the device's event watcher sends when it read an event
  // for this connection (async_events.h); registered from Start to Close.
  ev_async async_wake_;
  AsyncEventRouter::Target async_target_;
  ev_timer starved_timer_;  // active while a credit starvation is watched
  bool started_ = false;
  bool closed_ = false;
  bool wants_writable_ = false;
  bool reads_paused_ = false;
  // Received while reads were paused, delivered on resume in order: a receive block (reposted
  // then), or, for the message that used the peer's last credit, a copy of it (its block was
  // reposted at once: holding it too would leave the peer no credit to send the grants our
  // responses wait for, docs/rdma.md "Paused reads and credits"). A vector, not a deque: an empty
  // std::deque allocates ~600 bytes, which every idle connection would hold for nothing.
  struct HeldMessage {
    uint32_t index;  // kNoBlock when `copy` holds the message
    uint32_t length;
    std::unique_ptr<uint8_t[]> copy;
  };
  std::vector<HeldMessage> held_;
  uint64_t held_copies_ = 0;  // messages copied out while paused (the peer's last credit)
  // SRQ mode (receive side): grants the peer holds, and how many it should hold.
  std::shared_ptr<SrqContext> srq_;
  uint32_t peer_credits_ = 0;
  uint32_t target_ = 0;
  // Private receive queue: the credits the peer holds as we know them (what we advertised and
  // granted, less the messages received); never below its real credits. 0: it can send us
  // nothing until our next grant. (SRQ mode counts them in peer_credits_.)
  uint32_t peer_holds_ RRPC_GUARDED_BY(send_mu_) = 0;
  // posted, completion not yet seen (their SQ slots)
  uint32_t in_flight_sends_ RRPC_GUARDED_BY(send_mu_) = 0;
  // Private receive queue: sends posted and not yet reaped, in order. Only every
  // signal_interval_-th send (and every one in SRQ mode) asks for a completion: a depth-1 call
  // then wakes neither reactor for its send completions. A
  // signaled completion frees the slots of every send up to it and their blocks (an inline
  // send's block was free at once: the device copied its bytes when it was posted).
  // A send that reads blocks by reference (zero copy) holds them here. The send carrying the
  // last bytes of such a piece is signaled, and an RC QP completes in order, so its completion
  // retires every send before it (the piece's other fragments) and releases their blocks. A
  // piece left half-posted (no credit) holds its blocks until its end goes, or until Close.
  struct PendingSend {
    uint32_t block;  // kNoBlock: inline, returned at post
    bool signaled;
    std::array<BlockRef, kMaxSendSge - 1> held;  // read by the send until it completes
  };
  static constexpr uint32_t kNoBlock = ~0u;
  std::deque<PendingSend> sends_ RRPC_GUARDED_BY(send_mu_);
  uint32_t unsignaled_run_ RRPC_GUARDED_BY(send_mu_) = 0;
  const uint32_t signal_interval_;
  const int max_send_sge_;  // SGEs per send: what the QP granted, at most kMaxSendSge
  bool attached_ = false;
  // Send side: the peer's receives are SRQ (it takes credit requests); one request at a time.
  const bool peer_srq_;
  const uint32_t peer_initial_credits_;
  bool request_pending_ RRPC_GUARDED_BY(send_mu_) = false;
  // Credit requests start below half of this: the initial credits, or what a reclaim left us.
  uint32_t request_reference_ RRPC_GUARDED_BY(send_mu_);
  // Reclaim, receive side: when the peer last sent, a reclaim to send / sent and unanswered.
  MonoTime last_receive_;
  bool reclaim_due_ RRPC_GUARDED_BY(send_mu_) = false;
  bool reclaim_pending_ = false;
  // Reclaim, send side: credits given back and not yet said so.
  uint32_t returning_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t credits_returned_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t credit_requests_ RRPC_GUARDED_BY(send_mu_) = 0;
  // Received messages that granted credits; the starvation watch compares it with its start's.
  uint64_t grant_receipts_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t starved_grant_receipts_ = 0;  // reactor thread: grant_receipts_ when the watch began
  uint64_t inline_sends_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t posted_sends_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t grant_messages_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t zero_copy_sent_bytes_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t copied_sent_bytes_ RRPC_GUARDED_BY(send_mu_) = 0;
  uint64_t send_registrations_ RRPC_GUARDED_BY(send_mu_) = 0;
  // Where Write is in the frame stream, so that a large frame starts a message (see Write):
  // bytes of the current frame not yet taken (0: at a frame's start). Lost when a length prefix
  // lies beyond the gathered iovecs, found again when a Write takes the whole queue; only
  // packing depends on it, never correctness.
  size_t frame_left_ RRPC_GUARDED_BY(send_mu_) = 0;
  bool frame_sync_ RRPC_GUARDED_BY(send_mu_) = true;
  uint64_t lent_messages_ = 0;    // handed up by reference
  uint64_t copied_no_spare_ = 0;  // large but copied out: every spare block was lent
};

}  // namespace rrpc::rdma
