// IntMap: lookups, erasure inside probe runs, growth, and a long random run checked against
// std::map.
#include "util/int_map.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

namespace rrpc {
namespace {

TEST(IntMapTest, FindsWhatWasInsertedAndNotWhatWasErased) {
  IntMap<int> m;
  EXPECT_EQ(m.Find(1), nullptr);
  EXPECT_FALSE(m.Erase(1));
  m.Insert(1, 10);
  m.Insert(-7, 70);
  m.Insert(2, 20);
  ASSERT_NE(m.Find(-7), nullptr);
  EXPECT_EQ(*m.Find(-7), 70);
  EXPECT_EQ(m.size(), 3u);
  int out = 0;
  EXPECT_TRUE(m.Erase(1, &out));
  EXPECT_EQ(out, 10);
  EXPECT_EQ(m.Find(1), nullptr);
  EXPECT_EQ(*m.Find(2), 20);
  EXPECT_EQ(m.size(), 2u);
}

TEST(IntMapTest, MovesOwningValuesAndReleasesErasedOnes) {
  IntMap<std::shared_ptr<int>> m;
  auto v = std::make_shared<int>(5);
  m.Insert(3, v);
  EXPECT_EQ(v.use_count(), 2);
  EXPECT_TRUE(m.Erase(3));
  EXPECT_EQ(v.use_count(), 1);  // the slot let go of it
}

TEST(IntMapTest, GrowsAndKeepsEveryEntry) {
  IntMap<int> m;
  for (int i = 0; i < 10000; i++) m.Insert(i * 3, i);
  EXPECT_EQ(m.size(), 10000u);
  for (int i = 0; i < 10000; i++) {
    ASSERT_NE(m.Find(i * 3), nullptr) << i;
    EXPECT_EQ(*m.Find(i * 3), i);
    EXPECT_EQ(m.Find(i * 3 + 1), nullptr);
  }
  size_t seen = 0;
  m.ForEach([&](int32_t key, int& value) {
    EXPECT_EQ(key, value * 3);
    seen++;
  });
  EXPECT_EQ(seen, 10000u);
}

TEST(IntMapTest, RandomOperationsAgreeWithStdMap) {
  // Keys from a small range so that probe runs collide, wrap around the table's end and get
  // erased from the middle: the backward shift must keep every later entry findable.
  std::mt19937 rng(42);
  IntMap<int> m;
  std::map<int32_t, int> reference;
  for (int step = 0; step < 200000; step++) {
    const int32_t key = static_cast<int32_t>(rng() % 512) - 256;
    const int op = static_cast<int>(rng() % 3);
    if (op == 0 && reference.count(key) == 0) {
      m.Insert(key, step);
      reference[key] = step;
    } else if (op == 1) {
      int out = -1;
      const bool erased = m.Erase(key, &out);
      ASSERT_EQ(erased, reference.count(key) == 1) << "step " << step;
      if (erased) {
        EXPECT_EQ(out, reference[key]);
        reference.erase(key);
      }
    } else {
      int* found = m.Find(key);
      ASSERT_EQ(found != nullptr, reference.count(key) == 1) << "step " << step;
      if (found != nullptr) {
        EXPECT_EQ(*found, reference[key]);
      }
    }
    ASSERT_EQ(m.size(), reference.size());
  }
}

TEST(IntMapTest, SwapExchangesContents) {
  IntMap<int> a, b;
  a.Insert(1, 1);
  a.swap(b);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(*b.Find(1), 1);
}

}  // namespace
}  // namespace rrpc
