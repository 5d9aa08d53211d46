#include "rrpc/util/sidecar.h"

#include <cstring>
#include <utility>

namespace rrpc {

BlockSlice SidecarFromBytes(Slice bytes) {
  BlockRef block = Block::Allocate(bytes.size());
  if (bytes.size() > 0) memcpy(block->data(), bytes.data(), bytes.size());
  Slice slice(block->data(), bytes.size());
  return BlockSlice{std::move(block), slice};
}

}  // namespace rrpc
