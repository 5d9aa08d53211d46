// MessageCache: messages come back cleared and of the right type, only small ones are kept, and
// a thread keeps a bounded number.
#include "rpc/core/message_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "rpc/testing/rtest.pb.h"

namespace rrpc::rpc {
namespace {

using rtest::AddRequestPB;
using rtest::EchoRequestPB;

TEST(MessageCacheTest, AGivenMessageComesBackClearedForItsOwnTypeOnly) {
  const EchoRequestPB& echo = EchoRequestPB::default_instance();
  const AddRequestPB& add = AddRequestPB::default_instance();
  auto m = MessageCache::Take(echo);
  auto* req = static_cast<EchoRequestPB*>(m.get());
  req->set_data("payload");
  req->set_sleep_ms(5);
  EchoRequestPB* const kept = req;
  MessageCache::Give(echo, std::move(m), /*serialized_bytes=*/20);

  auto other = MessageCache::Take(add);  // another type: a fresh message
  EXPECT_NE(static_cast<void*>(kept), static_cast<void*>(other.get()));
  EXPECT_EQ(AddRequestPB::descriptor(), other->GetDescriptor());

  auto again = MessageCache::Take(echo);
  ASSERT_EQ(static_cast<void*>(kept), static_cast<void*>(again.get()));
  const auto* cleared = static_cast<const EchoRequestPB*>(again.get());
  EXPECT_FALSE(cleared->has_data());
  EXPECT_FALSE(cleared->has_sleep_ms());
  EXPECT_EQ(0u, cleared->ByteSizeLong());
}

// A kept message is recognised by its data string's capacity, which Clear() keeps; a new one
// starts empty. (Addresses prove nothing: the allocator reuses a deleted message's memory.)
size_t DataCapacity(google::protobuf::Message* m) {
  return static_cast<EchoRequestPB*>(m)->mutable_data()->capacity();
}

TEST(MessageCacheTest, LargeMessagesAreNotKept) {
  const EchoRequestPB& echo = EchoRequestPB::default_instance();
  auto m = MessageCache::Take(echo);
  static_cast<EchoRequestPB*>(m.get())->set_data(std::string(1 << 20, 'x'));
  MessageCache::Give(echo, std::move(m), (1 << 20) + 8);
  auto next = MessageCache::Take(echo);
  EXPECT_LT(DataCapacity(next.get()), size_t{1} << 20);
}

TEST(MessageCacheTest, AThreadKeepsAtMostItsSlotsAndFreesThemAtExit) {
  std::thread t([] {
    const EchoRequestPB& echo = EchoRequestPB::default_instance();
    constexpr int kMany = 3 * MessageCache::kSlots;
    std::vector<std::unique_ptr<google::protobuf::Message>> many;
    for (int i = 0; i < kMany; i++) {
      many.push_back(MessageCache::Take(echo));
      static_cast<EchoRequestPB*>(many.back().get())->set_data(std::string(100, 'y'));
    }
    for (auto& m : many) MessageCache::Give(echo, std::move(m), 110);
    many.clear();
    // Exactly kSlots come back with their 100-byte capacity; the rest were deleted (ASAN checks
    // that what stays cached is freed when the thread exits).
    int kept = 0;
    for (int i = 0; i < kMany; i++) {
      many.push_back(MessageCache::Take(echo));
      kept += DataCapacity(many.back().get()) >= 100;
    }
    EXPECT_EQ(MessageCache::kSlots, kept);
  });
  t.join();
}

}  // namespace
}  // namespace rrpc::rpc
