#include "rpc/transport/outbound_transfer.h"

#include <algorithm>
#include <cstring>

#include "rrpc/util/copy_counter.h"

namespace rrpc::rpc {

void OutboundTransfer::SetPayload(BlockSlice head, std::vector<BlockSlice> sidecars) {
  head_ = std::move(head);
  sidecars_ = std::move(sidecars);
  total_bytes_ = head_.slice.size();
  for (const auto& s : sidecars_) total_bytes_ += s.slice.size();
  bytes_written_ = 0;
}

void OutboundTransfer::CopyUnsentBorrowedSidecars() {
  size_t offset = head_.slice.size();  // where the sidecar starts in the frame's bytes
  for (BlockSlice& s : sidecars_) {
    const size_t size = s.slice.size();
    const bool unsent = offset + size > bytes_written_;
    offset += size;
    if (s.block || size == 0 || !unsent) continue;
    BlockRef copy = Block::Allocate(size);
    memcpy(copy->data(), s.slice.data(), size);
    CountCopy(CopySide::kClient, CopyKind::kStream, size);  // only calls give borrowed bytes up
    const Slice bytes(copy->data(), size);
    s = BlockSlice{std::move(copy), bytes};
  }
}

int OutboundTransfer::FillIovecsWithSidecars(iovec* iov, int max, Block** blocks) const {
  int n = 0;
  size_t skip = bytes_written_;
  auto add = [&](const BlockSlice& bs) {
    const Slice& s = bs.slice;
    if (n >= max) return;
    if (skip >= s.size()) {
      skip -= s.size();
      return;
    }
    iov[n].iov_base = const_cast<uint8_t*>(s.data() + skip);
    iov[n].iov_len = s.size() - skip;
    if (blocks != nullptr) blocks[n] = bs.block.get();
    skip = 0;
    n++;
  };
  add(head_);
  for (const auto& s : sidecars_) add(s);
  return n;
}

size_t OutboundTransfer::Advance(size_t n) {
  const size_t used = std::min(n, total_bytes_ - bytes_written_);
  bytes_written_ += used;
  return n - used;
}

}  // namespace rrpc::rpc
