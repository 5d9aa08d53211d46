// CreditWindow: the credit flow control of one RDMA connection (docs/rdma.md, "Credits"). One
// credit is one receive buffer the peer has posted for us; each message we send spends one. Each
// buffer we repost is a grant we owe the peer; every message we send carries all grants owed
// (piggybacked), and when we owe at least half our receive buffers and have nothing to send, a
// grant-only message carries them. The last credit is only ever spent on a message that carries
// grants (SMB Direct's rule): then whichever side waits for credits, the other owes it at least
// half its buffers and sends them, so neither can wait forever, and with correct accounting no
// message meets an empty receive queue (RNR), which is why tests run with rnr_retry = 0.
// The connection's reactor thread only.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rrpc::rdma {

class CreditWindow {
 public:
  // `send_credits`: the receive buffers the peer posted for us (its bootstrap says);
  // `posted`: ours for it. REQUIRES: posted >= 3. The threshold is then at least 2, so a
  // grant-only message always carries more than the one credit it costs (no grant ping-pong),
  // and at most posted - 1, so a peer stuck on its last credit has spent enough for us to owe it
  // a grant-only message.
  CreditWindow(uint32_t send_credits, uint32_t posted)
      : credits_(send_credits), grant_threshold_(std::max<uint32_t>(2, posted / 2)) {}

  uint32_t credits() const { return credits_; }
  uint32_t owed() const { return owed_; }

  // A data message may go: it would not spend the last credit, or it carries grants.
  bool CanSendData() const { return credits_ > 1 || (credits_ == 1 && owed_ > 0); }
  // A grant-only message is due: enough owed to be worth a message, and a credit to carry it.
  bool GrantDue() const { return credits_ >= 1 && owed_ >= grant_threshold_; }

  // Spends a credit on a message; returns the grants it carries (all owed).
  uint32_t Spend() {
    --credits_;
    uint32_t grant = owed_;
    owed_ = 0;
    return grant;
  }
  // The peer granted `n` credits.
  void Granted(uint32_t n) { credits_ += n; }
  // SRQ reclaim: `n` grants owed are not given after all (the peer never knew of them).
  void Forgo(uint32_t n) { owed_ -= std::min(n, owed_); }
  // The peer reclaimed `n` of our credits (SRQ reclaim): we stop using them.
  void Return(uint32_t n) { credits_ -= std::min(n, credits_); }
  // SRQ mode: the peer's share (credits it holds plus grants owed) moves with credit requests
  // and reclaims; the threshold follows half of it (at least 2), so a peer stuck on its last
  // credit (share >= 3 always) is owed enough for a grant-only message, as at construction.
  void set_grant_threshold_for_share(uint32_t share) {
    grant_threshold_ = std::max<uint32_t>(2, share / 2);
  }
  // We reposted a receive buffer (SRQ mode: reserved `n` from the reactor's pool): grants owed.
  void Reposted(uint32_t n = 1) { owed_ += n; }

 private:
  uint32_t credits_;
  uint32_t owed_ = 0;
  uint32_t grant_threshold_;
};

}  // namespace rrpc::rdma
