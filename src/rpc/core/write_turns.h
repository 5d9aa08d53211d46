// WriteTurns: how many bytes one connection of a reactor may write in one loop turn, so that a
// connection moving bulk bytes (a stream, large responses) does not hold the reactor's other
// connections behind one long write. While two or more connections of the reactor received
// bytes within kSharedWindow of each other, a connection's flush writes at most kSharedTurnBytes
// per turn (one system call of at most that much) and continues in the next turn, after the
// reactor has read its other sockets; a connection alone on its reactor writes as much as the
// transport takes. docs/architecture.md, "Bulk and small calls".
//
// Threads: the reactor thread only (a member of its Reactor). Owns nothing.
#pragma once

#include <cstddef>

#include "rpc/transport/outbound_transfer.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

class WriteTurns {
 public:
  // Bytes a connection writes per turn while the reactor is shared.
  static constexpr size_t kSharedTurnBytes = 64 * 1024;
  // How long after two connections received bytes the reactor counts as shared.
  static constexpr MonoDelta kSharedWindow = MonoDelta::FromMilliseconds(1);

  // `receiver` (an identity, never dereferenced) received bytes at `now`, the loop's time.
  void NoteReceived(const void* receiver, MonoTime now) {
    if (receiver != last_receiver_) {
      if (last_receiver_ != nullptr) shared_until_ = now + kSharedWindow;
      last_receiver_ = receiver;
    }
    last_received_at_ = now;
  }

  // The most a connection may write in this turn (TransferQueue::kNoByteLimit: no limit). The
  // reactor's clock is the time of the last receive: a reactor whose sockets all went quiet
  // keeps its last answer (no clock read here).
  size_t BudgetBytes() const {
    return last_received_at_ < shared_until_ ? kSharedTurnBytes : TransferQueue::kNoByteLimit;
  }

 private:
  const void* last_receiver_ = nullptr;
  MonoTime last_received_at_;
  MonoTime shared_until_;
};

}  // namespace rrpc::rpc
