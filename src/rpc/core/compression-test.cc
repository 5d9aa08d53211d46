// Compress and Decompress: round trips, the threshold and the skip, and every way a compressed
// message is refused (a claim above the limit, data inflating past or falling short of its claim).
#include "rpc/core/compression.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace rrpc::rpc {
namespace {

// Text like a kv store's values: words from a small vocabulary.
std::string TextLike(size_t n) {
  static const char* kWords[] = {"user",    "order",  "status",   "shipped", "pending",  "region",
                                 "eu-west", "amount", "currency", "EUR",     "customer", "id"};
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < n) {
    s += kWords[rng() % 12];
    s += rng() % 4 == 0 ? ",\"" : " ";
  }
  s.resize(n);
  return s;
}

std::string Random(size_t n) {
  std::mt19937 rng(11);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class CompressionCodecTest : public ::testing::TestWithParam<Compression> {};

TEST_P(CompressionCodecTest, RoundTripsTextAndShrinksIt) {
  const std::string text = TextLike(64 << 10);
  auto compressed = Compress(Slice(text), GetParam(), 1024);
  ASSERT_TRUE(compressed.ok()) << compressed.status().ToString();
  ASSERT_TRUE(compressed.value().has_value());
  EXPECT_LT(compressed.value()->slice.size(), text.size() / 2);
  auto out = Decompress(compressed.value()->slice, GetParam(), text.size(), 1 << 20);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value().slice.ToString(), text);
}

TEST_P(CompressionCodecTest, SkipsBodiesBelowTheThreshold) {
  const std::string text = TextLike(1023);
  auto compressed = Compress(Slice(text), GetParam(), 1024);
  ASSERT_TRUE(compressed.ok());
  EXPECT_FALSE(compressed.value().has_value());
}

TEST_P(CompressionCodecTest, SkipsDataThatDoesNotShrink) {
  const std::string noise = Random(64 << 10);
  auto compressed = Compress(Slice(noise), GetParam(), 1024);
  ASSERT_TRUE(compressed.ok());
  EXPECT_FALSE(compressed.value().has_value());
}

// From 8 KiB on, the first 1 KiB decides: a head that does not shrink skips the whole.
TEST_P(CompressionCodecTest, ProbesTheHeadOfALargeBody) {
  const std::string head_noise = Random(1024) + TextLike(60 << 10);
  auto compressed = Compress(Slice(head_noise), GetParam(), 1024);
  ASSERT_TRUE(compressed.ok());
  EXPECT_FALSE(compressed.value().has_value());
  const std::string tail_noise = TextLike(60 << 10) + Random(4096);
  compressed = Compress(Slice(tail_noise), GetParam(), 1024);
  ASSERT_TRUE(compressed.ok());
  EXPECT_TRUE(compressed.value().has_value());
}

TEST_P(CompressionCodecTest, RefusesAClaimAboveTheLimitBeforeDecoding) {
  const std::string text = TextLike(8 << 10);
  auto compressed = Compress(Slice(text), GetParam(), 0);
  ASSERT_TRUE(compressed.ok() && compressed.value().has_value());
  // Claims 1 TiB: refused by the claim alone (no allocation of that size is attempted).
  auto out = Decompress(compressed.value()->slice, GetParam(), size_t{1} << 40, 64 << 20);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(out.status().IsInvalidArgument()) << out.status().ToString();
  EXPECT_NE(out.status().ToString().find("above the limit"), std::string::npos);
}

TEST_P(CompressionCodecTest, RefusesDataThatInflatesPastItsClaim) {
  // A bomb: 16 MiB of zeros compress to a few KiB; the sender claims 4 KiB.
  const std::string zeros(16 << 20, '\0');
  auto compressed = Compress(Slice(zeros), GetParam(), 0);
  ASSERT_TRUE(compressed.ok() && compressed.value().has_value());
  EXPECT_LT(compressed.value()->slice.size(), size_t{128} << 10);
  auto out = Decompress(compressed.value()->slice, GetParam(), 4096, 64 << 20);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(out.status().IsCorruption()) << out.status().ToString();
}

TEST_P(CompressionCodecTest, RefusesDataThatFallsShortOfItsClaim) {
  const std::string text = TextLike(8 << 10);
  auto compressed = Compress(Slice(text), GetParam(), 0);
  ASSERT_TRUE(compressed.ok() && compressed.value().has_value());
  auto out = Decompress(compressed.value()->slice, GetParam(), text.size() + 1, 64 << 20);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(out.status().IsCorruption()) << out.status().ToString();
}

TEST_P(CompressionCodecTest, RefusesGarbage) {
  const std::string garbage = Random(4096);
  auto out = Decompress(Slice(garbage), GetParam(), 100000, 64 << 20);
  EXPECT_FALSE(out.ok());
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressionCodecTest,
                         ::testing::Values(Compression::kLz4, Compression::kZstd),
                         [](const auto& info) { return std::string(CompressionName(info.param)); });

TEST(CompressionTest, NoneNeverCompresses) {
  const std::string text = TextLike(64 << 10);
  auto compressed = Compress(Slice(text), Compression::kNone, 0);
  ASSERT_TRUE(compressed.ok());
  EXPECT_FALSE(compressed.value().has_value());
}

TEST(CompressionTest, NamesRoundTrip) {
  for (Compression c : {Compression::kNone, Compression::kLz4, Compression::kZstd}) {
    Compression parsed;
    ASSERT_TRUE(ParseCompressionName(CompressionName(c), &parsed));
    EXPECT_EQ(parsed, c);
  }
  Compression parsed;
  EXPECT_FALSE(ParseCompressionName("gzip", &parsed));
  EXPECT_TRUE(IsKnownCompression(1));
  EXPECT_TRUE(IsKnownCompression(2));
  EXPECT_FALSE(IsKnownCompression(0));
  EXPECT_FALSE(IsKnownCompression(3));
}

}  // namespace
}  // namespace rrpc::rpc
