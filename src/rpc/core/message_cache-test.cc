// MessageCache: a call's messages come back cleared and of the right types, only small ones are
// kept, and a thread keeps a bounded number.
#include "rpc/core/message_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "rpc/testing/rtest.pb.h"

namespace rrpc::rpc {
namespace {

using rtest::AddRequestPB;
using rtest::AddResponsePB;
using rtest::EchoRequestPB;
using rtest::EchoResponsePB;

const EchoRequestPB& kEchoRequest = EchoRequestPB::default_instance();
const EchoResponsePB& kEchoResponse = EchoResponsePB::default_instance();

MessageCache::CallMessages TakeEcho() { return MessageCache::Take(kEchoRequest, kEchoResponse); }

void GiveEcho(MessageCache::CallMessages m, size_t request_bytes, size_t response_bytes) {
  MessageCache::Give(kEchoRequest, kEchoResponse, std::move(m), request_bytes, response_bytes);
}

// A kept message is recognised by its data string's capacity, which Clear() keeps; a new one
// starts empty. (Addresses prove nothing: the allocator reuses a deleted message's memory.)
size_t RequestCapacity(const MessageCache::CallMessages& m) {
  return static_cast<EchoRequestPB*>(m.request.get())->mutable_data()->capacity();
}
size_t ResponseCapacity(const MessageCache::CallMessages& m) {
  return static_cast<EchoResponsePB*>(m.response.get())->mutable_data()->capacity();
}

TEST(MessageCacheTest, GivenMessagesComeBackClearedForTheirOwnTypesOnly) {
  MessageCache::CallMessages m = TakeEcho();
  auto* req = static_cast<EchoRequestPB*>(m.request.get());
  auto* resp = static_cast<EchoResponsePB*>(m.response.get());
  req->set_data("payload");
  req->set_sleep_ms(5);
  resp->set_data("answer");
  GiveEcho(std::move(m), /*request_bytes=*/20, /*response_bytes=*/10);

  // Other types, or the same request type with another response type: fresh messages.
  MessageCache::CallMessages add =
      MessageCache::Take(AddRequestPB::default_instance(), AddResponsePB::default_instance());
  EXPECT_EQ(AddRequestPB::descriptor(), add.request->GetDescriptor());
  EXPECT_EQ(AddResponsePB::descriptor(), add.response->GetDescriptor());
  MessageCache::CallMessages mixed =
      MessageCache::Take(kEchoRequest, AddResponsePB::default_instance());
  EXPECT_NE(req, mixed.request.get());  // (the kept one is still alive: no address reuse)
  EXPECT_EQ(AddResponsePB::descriptor(), mixed.response->GetDescriptor());

  MessageCache::CallMessages again = TakeEcho();
  ASSERT_EQ(req, again.request.get());
  ASSERT_EQ(resp, again.response.get());
  EXPECT_FALSE(req->has_data());
  EXPECT_FALSE(req->has_sleep_ms());
  EXPECT_EQ(0u, req->ByteSizeLong());
  EXPECT_FALSE(resp->has_data());
}

TEST(MessageCacheTest, LargeOrUnsizedMessagesAreNotKept) {
  MessageCache::CallMessages m = TakeEcho();
  static_cast<EchoRequestPB*>(m.request.get())->set_data(std::string(1 << 20, 'x'));
  static_cast<EchoResponsePB*>(m.response.get())->set_data(std::string(100, 'y'));
  GiveEcho(std::move(m), (1 << 20) + 8, 110);
  MessageCache::CallMessages next = TakeEcho();
  EXPECT_LT(RequestCapacity(next), size_t{1} << 20);  // the large request went
  EXPECT_GE(ResponseCapacity(next), 100u);            // the small response stayed

  // A response never serialized has no known size: it goes, its request stays.
  static_cast<EchoRequestPB*>(next.request.get())->set_data(std::string(200, 'z'));
  static_cast<EchoResponsePB*>(next.response.get())->set_data(std::string(300, 'w'));
  GiveEcho(std::move(next), 210, SIZE_MAX);
  MessageCache::CallMessages last = TakeEcho();
  EXPECT_GE(RequestCapacity(last), 200u);
  EXPECT_LT(ResponseCapacity(last), 300u);
}

TEST(MessageCacheTest, AThreadKeepsAtMostItsSlotsAndFreesThemAtExit) {
  std::thread t([] {
    constexpr int kMany = 3 * MessageCache::kSlots;
    std::vector<MessageCache::CallMessages> many;
    for (int i = 0; i < kMany; i++) {
      many.push_back(TakeEcho());
      static_cast<EchoRequestPB*>(many.back().request.get())->set_data(std::string(100, 'y'));
    }
    for (auto& m : many) GiveEcho(std::move(m), 110, 2);
    many.clear();
    // Exactly kSlots come back with their 100-byte capacity; the rest were deleted (ASAN checks
    // that what stays cached is freed when the thread exits).
    int kept = 0;
    for (int i = 0; i < kMany; i++) {
      many.push_back(TakeEcho());
      kept += RequestCapacity(many.back()) >= 100;
    }
    EXPECT_EQ(MessageCache::kSlots, kept);
  });
  t.join();
}

}  // namespace
}  // namespace rrpc::rpc
