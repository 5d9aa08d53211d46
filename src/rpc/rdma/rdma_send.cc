// The send side of RdmaTransport (rdma_transport.h): frames cut into messages, credits spent,
// grants and credit requests encoded, sends posted and reaped; large pieces of registered Blocks
// sent by reference (zero copy), their blocks held until the send completes.
#include <cstring>
#include <memory>
#include <utility>

#include "rpc/rdma/rdma_transport.h"
#include "rpc/transport/frame_format.h"
#include "util/metrics/counter.h"
#include "util/metrics/histogram_metric.h"

namespace rrpc::rdma {
namespace {

// A heap Block's registration with one protection domain, made on its first zero-copy send and
// owned by the block (BlockAttachment): deregistered when the block is freed, on whichever
// thread drops it last. It holds the device (`keep_alive`) so the PD outlives the region.
class BlockRegistration final : public BlockAttachment {
 public:
  BlockRegistration(const ProtectionDomain* pd, std::unique_ptr<MemoryRegion> mr,
                    std::shared_ptr<void> keep_alive)
      : keep_alive_(std::move(keep_alive)), pd_(pd), mr_(std::move(mr)) {}
  const ProtectionDomain* pd() const { return pd_; }
  uint32_t lkey() const { return mr_->lkey(); }

 private:
  std::shared_ptr<void> keep_alive_;  // declared first: goes after the region
  const ProtectionDomain* const pd_;
  std::unique_ptr<MemoryRegion> mr_;
};

// Bytes 2 and 3 (returns, reclaim) are filled by EncodeReturnsAndReclaim.
void EncodeHeader(uint8_t* p, uint8_t kind, uint32_t grant, uint8_t request) {
  p[0] = kind;
  p[1] = request;
  p[4] = static_cast<uint8_t>(grant >> 24);
  p[5] = static_cast<uint8_t>(grant >> 16);
  p[6] = static_cast<uint8_t>(grant >> 8);
  p[7] = static_cast<uint8_t>(grant);
}

// The frame length at byte `off` of iov[i] (the prefix may span iovecs); false when fewer than
// its 4 bytes were gathered.
bool PeekFrameLength(const iovec* iov, int niov, int i, size_t off, uint32_t* length) {
  uint8_t prefix[rpc::kFrameLengthSize];
  size_t got = 0;
  for (; i < niov && got < sizeof(prefix); ++i, off = 0) {
    const size_t c = std::min(sizeof(prefix) - got, iov[i].iov_len - off);
    memcpy(prefix + got, static_cast<const uint8_t*>(iov[i].iov_base) + off, c);
    got += c;
  }
  if (got < sizeof(prefix)) return false;
  *length = rpc::DecodeBigEndian32(prefix);
  return true;
}

}  // namespace

void RdmaTransport::EncodeReturnsAndReclaim(uint8_t* p) {
  const uint32_t returned = std::min<uint32_t>(returning_, 255);
  returning_ -= returned;
  p[2] = static_cast<uint8_t>(returned);
  p[3] = reclaim_due_ ? static_cast<uint8_t>(std::min<uint32_t>(target_, 255)) : 0;
  reclaim_due_ = false;
}

uint32_t RdmaTransport::SpendCredit() {
  const uint32_t grant = window_.Spend();
  if (srq_) {
    peer_credits_ += grant;
  } else {
    peer_holds_ += grant;
  }
  return grant;
}

uint8_t RdmaTransport::CreditRequest() {
  // Asked before this message's credit is spent: soft at half the initial credits, hard when
  // this is the last one that may go.
  if (!peer_srq_ || request_pending_) return 0;
  const uint32_t left = window_.credits() - 1;
  if (left >= std::max(2u, request_reference_ / 2)) return 0;
  request_pending_ = true;
  ++credit_requests_;
  return left <= 1 ? 2 : 1;
}

Status RdmaTransport::PostSend(uint32_t index, uint32_t length) {
  const Sge sge = send_pool()->sge(index, length);
  return PostSend(index, &sge, 1, length, nullptr, 0, /*signal=*/false);
}

Status RdmaTransport::PostSend(uint32_t index, const Sge* sges, int nsge, uint32_t length,
                               BlockRef* held, int nheld, bool signal) {
  SendWr wr;
  wr.wr_id = kSendWrIdBit | index;
  wr.sg_list = sges;
  wr.num_sge = nsge;
  wr.inline_data = nheld == 0 && options_.use_inline && length <= ep_->inline_cap();
  // At most signal_interval_ - 1 unsignaled sends hold slots (and blocks) behind the last
  // signaled one, fewer than the slots and blocks a writer needs, so none waits for ever. The
  // caller signals the send carrying the end of a piece sent by reference (`signal`): every
  // send before it holding that piece's block is then retired by its completion.
  wr.signaled = ++unsignaled_run_ >= signal_interval_ || signal;
  if (wr.signaled) unsignaled_run_ = 0;
  if (wr.inline_data) {
    ++inline_sends_;
    if (metrics_.inline_send_bytes) metrics_.inline_send_bytes->Record(length);
  } else {
    ++posted_sends_;
    if (metrics_.posted_send_bytes) metrics_.posted_send_bytes->Record(length);
  }
  Status s = ep_->qp()->PostSend(wr);
  if (!s.ok()) {
    send_pool()->Return(index);
    return s;  // `held` go with the caller: the device never saw them
  }
  ++in_flight_sends_;
  if (metrics_.sent_bytes) metrics_.sent_bytes->IncrementBy(length);
  if (!srq_) {
    if (wr.inline_data) {
      send_pool()->Return(index);  // the device copied the bytes
      index = kNoBlock;
    }
    PendingSend& p = sends_.emplace_back();
    p.block = index;
    p.signaled = wr.signaled;
    for (int k = 0; k < nheld; ++k) p.held[k] = std::move(held[k]);
  }
  return s;
}

void RdmaTransport::ReapSends() {
  while (!sends_.empty()) {
    // The blocks the send read by reference are released here (or by Close, after the QP).
    const PendingSend done = std::move(sends_.front());
    sends_.pop_front();
    --in_flight_sends_;
    if (done.block != kNoBlock) ep_->send_pool()->Return(done.block);
    if (done.signaled) return;
  }
}

bool RdmaTransport::SendLkey(Block* block, size_t bytes, uint32_t* lkey) {
  if (ep_->receive_pool()->Owns(block)) {
    // One of our receive blocks (an echoed sidecar): registered while the endpoint lives, and
    // every send on it ends before the endpoint goes.
    *lkey = ep_->receive_pool()->lkey();
    return true;
  }
  if (block->recycler() != nullptr) return false;  // another pool's: its registration may go
  BlockAttachment* a = block->attachment();
  if (a == nullptr) {
    if (options_.register_min_bytes == 0 || bytes < options_.register_min_bytes) return false;
    Result<std::unique_ptr<MemoryRegion>> mr =
        ep_->pd()->RegisterMemory(block->data(), block->capacity());
    if (!mr.ok()) return false;  // copied instead; a failed registration harms nothing else
    ++send_registrations_;
    if (metrics_.send_registrations) metrics_.send_registrations->Increment();
    a = block->Attach(new BlockRegistration(ep_->pd(), std::move(mr).value(), keep_alive_));
  }
  auto* r = dynamic_cast<const BlockRegistration*>(a);
  if (r == nullptr || r->pd() != ep_->pd()) return false;  // another device's: copy
  *lkey = r->lkey();
  return true;
}

int RdmaTransport::RegisteredPrefix(const iovec* iov, Block* const* blocks, int niov) {
  for (int k = 0; k < niov; ++k) {
    Block* b = blocks[k];
    // The pieces Write would try to send by reference (iov[0] may be the tail of a piece an
    // earlier Write began so), not registered yet, large enough to register.
    if (b == nullptr || (iov[k].iov_len < options_.send_zero_copy_min_bytes && k != 0)) continue;
    if (ep_->receive_pool()->Owns(b) || b->recycler() != nullptr || b->attachment() != nullptr ||
        options_.register_min_bytes == 0 || iov[k].iov_len < options_.register_min_bytes) {
      continue;
    }
    Registrations& r = *registrations_;
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.wake == nullptr) return niov;  // not started, or closed
    if (r.failed == b) continue;         // SendLkey tries again, inline
    if (r.pending == nullptr) {
      // The job holds the block, the device (through keep_alive_) and what it reports to; not
      // the transport, which may go first.
      const bool queued =
          setup_->Submit([regs = registrations_, block = BlockRef(b), pd = ep_->pd(),
                          keep_alive = keep_alive_, counter = metrics_.send_registrations] {
            Result<std::unique_ptr<MemoryRegion>> mr =
                pd->RegisterMemory(block->data(), block->capacity());
            const bool ok = mr.ok();
            if (ok) {
              block->Attach(new BlockRegistration(pd, std::move(mr).value(), keep_alive));
              if (counter != nullptr) counter->Increment();
            }
            std::lock_guard<std::mutex> lock(regs->mu);
            regs->pending = nullptr;
            if (!ok) regs->failed = block.get();
            if (ok) ++regs->made;
            regs->done = true;
            if (regs->wake != nullptr) ev_async_send(regs->loop, regs->wake);
          });
      if (!queued) return niov;  // the queue is full: registered inline
      r.pending = b;
    }
    return k;  // this piece waits for the registration running (its own, or another's)
  }
  return niov;
}

void RdmaTransport::SendGrantIfDue() {
  if (closed_) return;
  Status s;
  {
    MutexLock lock(send_mu_);
    // Grants owed, or returns / a reclaim to say (those only on a credit that may go).
    const bool control = (returning_ > 0 || reclaim_due_) && window_.CanSendData();
    if (srq_) window_.set_grant_threshold_for_share(peer_credits_ + window_.owed());
    if (!window_.GrantDue() && !control) return;
    // One send block (and SQ slot) is always left for this (Write never takes the last); in SRQ
    // mode the reactor's blocks return as other sends complete.
    if (in_flight_sends_ >= ep_->send_queue_depth()) return;
    uint32_t index;
    if (!send_pool()->Take(&index)) {
      if (srq_) srq_->WaitForSendBlock(this);
      return;
    }
    // No credit request here: requests ride on data (a grant-only message answering a reclaim
    // would otherwise ask for the credits it just gave back, and the two sides would ping-pong).
    EncodeHeader(send_pool()->block(index), kKindGrant, SpendCredit(), /*request=*/0);
    EncodeReturnsAndReclaim(send_pool()->block(index));
    ++grant_messages_;
    s = PostSend(index, kMessageHeaderSize);
  }
  if (!s.ok()) Fail(s);
}

Result<size_t> RdmaTransport::Write(const rpc::TransferQueue& queue, size_t max_bytes) {
  if (closed_) return Status::NetworkError("RDMA connection closed");
  // The queue is the caller's (under the connection's write lock), not send_mu_'s.
  iovec iov[64];
  Block* blocks[64];
  const int gathered = queue.GatherIovecs(iov, 64, max_bytes, blocks);
  const bool zero_copy = !srq_ && options_.send_zero_copy_min_bytes > 0 && max_send_sge_ > 1;
  // Pieces behind one whose Block is being registered wait for it (the stream is in order).
  const int niov =
      zero_copy && registrations_ != nullptr ? RegisteredPrefix(iov, blocks, gathered) : gathered;
  MutexLock lock(send_mu_);
  // Per iovec: its lkey when it may go by reference (looked up on first use).
  enum : uint8_t { kUnknown, kByReference, kCopy };
  uint8_t how[64];
  uint32_t lkeys[64];
  memset(how, kUnknown, sizeof(how));
  int i = 0;
  size_t off = 0;  // into iov[i]
  size_t taken = 0;
  RegisteredBlockPool* pool = send_pool();
  while (i < niov) {
    // A credit (never the last unless this message grants), and a send block (never the last:
    // it is kept for grants, so they can't starve).
    if (!window_.CanSendData()) {
      if (metrics_.credit_waits) metrics_.credit_waits->Increment();
      break;
    }
    if (pool->free_blocks() <= 1) {
      if (srq_) srq_->WaitForSendBlock(this);
      break;
    }
    if (in_flight_sends_ + 1 >= ep_->send_queue_depth()) break;
    uint32_t index;
    pool->Take(&index);
    uint8_t* block = pool->block(index);
    // The message: its header and copied runs in the send block, pieces sent by reference in
    // SGEs of their own, in the order of the bytes.
    Sge sges[kMaxSendSge];
    int nsge = 1;
    sges[0] = pool->sge(index, kMessageHeaderSize);
    size_t used = kMessageHeaderSize;  // of the send block
    BlockRef held[kMaxSendSge - 1];
    int nheld = 0;
    bool ends_piece = false;  // carries the last bytes of a piece sent by reference
    size_t n = 0;
    const bool began_mid_frame = frame_sync_ && frame_left_ > 0;
    while (i < niov && n < max_payload_) {
      size_t limit = max_payload_ - n;
      const size_t frame_left_before = frame_left_;
      if (frame_sync_ && frame_left_ == 0) {
        uint32_t length;
        if (!PeekFrameLength(iov, niov, i, off, &length)) {
          frame_sync_ = false;  // found again when a Write takes the whole queue
        } else {
          const size_t frame = rpc::kFrameLengthSize + size_t{length};
          // A large frame goes at the front of a message of its own when it would straddle two
          // (or follow another's tail): the receiver lends only whole frames at a message's front.
          // (Not to a peer whose receives are SRQ: it copies every message out.)
          if (!peer_srq_ && n > 0 && frame >= options_.lend_min_bytes && frame <= max_payload_ &&
              (frame > limit || began_mid_frame)) {
            break;
          }
          frame_left_ = frame;
        }
      }
      if (frame_sync_) limit = std::min(limit, frame_left_);
      const size_t c = std::min(limit, iov[i].iov_len - off);
      const uint8_t* src = static_cast<const uint8_t*>(iov[i].iov_base) + off;
      if (zero_copy && how[i] == kUnknown) {
        // iov[0] may be the tail of a piece an earlier Write began sending by reference (it
        // stopped for credits): its block decides, not its length.
        how[i] = blocks[i] != nullptr &&
                         (iov[i].iov_len >= options_.send_zero_copy_min_bytes || i == 0) &&
                         SendLkey(blocks[i], iov[i].iov_len, &lkeys[i])
                     ? kByReference
                     : kCopy;
      }
      // Decided per piece: every part of a large registered piece goes by reference, its tail
      // in the last message too (an SGE costs less than a copy).
      const bool by_reference = zero_copy && how[i] == kByReference;
      const bool extends =
          !by_reference && sges[nsge - 1].lkey == pool->lkey() &&
          sges[nsge - 1].addr + sges[nsge - 1].length == reinterpret_cast<uint64_t>(block + used);
      if (!extends && nsge == max_send_sge_) {
        frame_left_ = frame_left_before;  // no SGE left: the message ends before these bytes
        break;
      }
      if (by_reference) {
        sges[nsge++] = Sge{reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(c), lkeys[i]};
        held[nheld++] = BlockRef(blocks[i]);
        if (off + c == iov[i].iov_len) ends_piece = true;
        zero_copy_sent_bytes_ += c;
        if (metrics_.zero_copy_sent_bytes) metrics_.zero_copy_sent_bytes->IncrementBy(c);
      } else {
        if (extends) {
          sges[nsge - 1].length += static_cast<uint32_t>(c);
        } else {
          sges[nsge++] =
              Sge{reinterpret_cast<uint64_t>(block + used), static_cast<uint32_t>(c), pool->lkey()};
        }
        memcpy(block + used, src, c);
        used += c;
        CountCopy(options_.copy_side, CopyKind::kStream, c);
        copied_sent_bytes_ += c;
        if (metrics_.copied_sent_bytes) metrics_.copied_sent_bytes->IncrementBy(c);
      }
      n += c;
      off += c;
      if (frame_sync_) frame_left_ -= c;
      if (off == iov[i].iov_len) {
        ++i;
        off = 0;
      }
    }
    const uint8_t request = CreditRequest();
    EncodeHeader(block, kKindData, SpendCredit(), request);
    EncodeReturnsAndReclaim(block);
    RRPC_RETURN_NOT_OK(PostSend(index, sges, nsge, static_cast<uint32_t>(kMessageHeaderSize + n),
                                held, nheld, ends_piece));
    taken += n;
  }
  if (i == niov && niov == gathered && niov < 64) {
    // Everything queued went: the next byte starts a frame.
    frame_sync_ = true;
    frame_left_ = 0;
  }
  return taken;
}

}  // namespace rrpc::rdma
