// MessageCache: per thread, a few cleared protobuf messages kept for reuse as a later call's
// request or response message, instead of a New() and a delete per call (each with its string
// fields' allocations). The service pool takes them when it runs a call and RpcContext gives
// them back when the call is answered; both usually happen on the thread that runs the handler.
//
// A cleared message keeps its strings' capacity, so only messages whose serialized form was small
// (kMaxBytes) are kept: the cache never pins a large buffer. At most kSlots messages per thread.
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <memory>

namespace rrpc::rpc {

class MessageCache {
 public:
  static constexpr size_t kMaxBytes = 4096;
  static constexpr int kSlots = 8;

  // A message of `prototype`'s type in its default state: a kept one, or prototype.New().
  static std::unique_ptr<google::protobuf::Message> Take(
      const google::protobuf::Message& prototype);
  // Keeps `message` (of `prototype`'s type), cleared, for this thread's next Take of that type,
  // if `serialized_bytes` <= kMaxBytes and a slot is free; deletes it otherwise.
  static void Give(const google::protobuf::Message& prototype,
                   std::unique_ptr<google::protobuf::Message> message, size_t serialized_bytes);
};

}  // namespace rrpc::rpc
