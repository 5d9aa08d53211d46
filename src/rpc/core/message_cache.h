// MessageCache: per thread, a few cleared protobuf messages kept for reuse as a later call's
// request and response messages, instead of a New() and a delete per call (each with its string
// fields' allocations). The service pool takes a call's two messages when it runs the call and
// RpcContext gives them back when the call is answered; both usually happen on the thread that
// runs the handler.
//
// The two messages of a call travel together, kept as one entry keyed by their two types: a
// call's take and give each cost one lookup, not one per message.
//
// A cleared message keeps its strings' capacity, so only messages whose serialized form was small
// (kMaxBytes) are kept: the cache never pins a large buffer. At most kSlots entries (two messages
// each) per thread.
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <memory>

namespace rrpc::rpc {

class MessageCache {
 public:
  static constexpr size_t kMaxBytes = 4096;
  static constexpr int kSlots = 8;

  // A call's request and response messages.
  struct CallMessages {
    std::unique_ptr<google::protobuf::Message> request;
    std::unique_ptr<google::protobuf::Message> response;
  };

  // Messages of the prototypes' types in their default state: kept ones, or New() ones.
  static CallMessages Take(const google::protobuf::Message& request_prototype,
                           const google::protobuf::Message& response_prototype);
  // Keeps `messages` (of the prototypes' types; either may be null), cleared, for this thread's
  // next Take of these types. A message whose serialized form exceeded kMaxBytes is deleted
  // (pass SIZE_MAX for one whose size is unknown), and so are both when no slot is free.
  static void Give(const google::protobuf::Message& request_prototype,
                   const google::protobuf::Message& response_prototype, CallMessages messages,
                   size_t request_bytes, size_t response_bytes);
};

}  // namespace rrpc::rpc
