// The bootstrap message byte by byte (docs/wire-format.md), and the credit window's rules.
#include "rpc/rdma/bootstrap/bootstrap.h"

#include <gtest/gtest.h>

#include "rpc/rdma/credit_window.h"

namespace rrpc::rdma {
namespace {

TEST(BootstrapTest, EncodesVersionOneExactlyAsDocumented) {
  BootstrapMessage m;
  m.srq = true;
  m.backend = BootstrapBackend::kSoft;
  m.qp.qp_num = 0x00010203;
  m.qp.lid = 0x0405;
  for (int i = 0; i < 16; ++i) m.qp.gid[i] = static_cast<uint8_t>(0xA0 + i);
  m.qp.psn = 0x00ABCDEF;
  m.path_mtu = 4096;
  m.buffer_size = 0x4000;
  m.credits = 64;
  m.send_queue_depth = 65;
  m.inline_cap = 236;
  m.nonce = 0x1122334455667788ull;
  m.gid_type = GidType::kRoceV2;
  std::string b = EncodeBootstrap(m);
  ASSERT_EQ(b.size(), 64u);
  // clang-format off
  const uint8_t expect[64] = {
      1, 2, 0, 0,                                      // version, flags (SRQ), reason
      0x00, 0x01, 0x02, 0x03,                          // QP number
      0x04, 0x05, 1, 2,                                // LID, backend (soft), GID type
      0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,  // GID
      0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF,  //
      0x00, 0xAB, 0xCD, 0xEF,                          // PSN
      0, 0, 0x10, 0,                                   // path MTU
      0, 0, 0x40, 0,                                   // receive buffer size
      0, 0, 0, 64,                                     // initial credits
      0, 0, 0, 65,                                     // send-queue depth
      0, 0, 0, 236,                                    // inline cap
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,  // nonce
      0, 0, 0, 0};                                     // reserved
  // clang-format on
  for (int i = 0; i < 64; ++i) EXPECT_EQ(static_cast<uint8_t>(b[i]), expect[i]) << "byte " << i;
  BootstrapMessage d;
  ASSERT_TRUE(DecodeBootstrap(Slice(b), &d).ok());
  EXPECT_EQ(d.qp.qp_num, m.qp.qp_num);
  EXPECT_EQ(d.qp.gid, m.qp.gid);
  EXPECT_EQ(d.nonce, m.nonce);
  EXPECT_TRUE(d.srq);
  EXPECT_FALSE(d.fallback);
  EXPECT_EQ(d.inline_cap, 236u);
  EXPECT_EQ(d.gid_type, GidType::kRoceV2);
}

TEST(BootstrapTest, FallbackCarriesItsReason) {
  BootstrapMessage m;
  m.fallback = true;
  m.reason = FallbackReason::kNoDevice;
  BootstrapMessage d;
  ASSERT_TRUE(DecodeBootstrap(Slice(EncodeBootstrap(m)), &d).ok());
  EXPECT_TRUE(d.fallback);
  EXPECT_EQ(d.reason, FallbackReason::kNoDevice);
}

TEST(BootstrapTest, RefusesShortMessagesAndOtherVersions) {
  std::string b = EncodeBootstrap(BootstrapMessage());
  BootstrapMessage d;
  EXPECT_TRUE(DecodeBootstrap(Slice(b.data(), 63), &d).IsCorruption());
  EXPECT_TRUE(DecodeBootstrap(Slice(), &d).IsCorruption());
  b[0] = 2;
  EXPECT_TRUE(DecodeBootstrap(Slice(b), &d).IsNotSupported());
}

TEST(BootstrapTest, RefusesBitsVersionOneDoesNotDefine) {
  const std::string good = EncodeBootstrap(BootstrapMessage());
  BootstrapMessage d;
  ASSERT_TRUE(DecodeBootstrap(Slice(good), &d).ok());
  EXPECT_TRUE(DecodeBootstrap(Slice(good + "x"), &d).IsCorruption());  // longer than 64
  // {offset, value}: an unknown flag, reason 10, backend 2, GID type 3.
  const std::pair<size_t, uint8_t> bad[] = {{1, 4}, {1, 0x80}, {3, 10}, {2, 1}, {10, 2}, {11, 3}};
  for (const auto& [offset, value] : bad) {
    std::string b = good;
    b[offset] = static_cast<char>(value);
    BootstrapMessage untouched;
    untouched.nonce = 99;
    Status s = DecodeBootstrap(Slice(b), &untouched);
    EXPECT_TRUE(s.IsCorruption()) << "byte " << offset << ": " << s.ToString();
    EXPECT_EQ(untouched.nonce, 99u) << "a refused message changed the output";
  }
}

TEST(BootstrapTest, EveryAcceptedMessageEncodesBackToItsBytes) {
  BootstrapMessage m;
  m.fallback = true;
  m.srq = true;
  m.reason = FallbackReason::kGidType;
  m.backend = BootstrapBackend::kVerbs;
  m.gid_type = GidType::kRoceV1;
  m.probe_qp = 0xfedcba98;
  m.qp.psn = 0xffffffff;
  m.nonce = ~0ull;
  const std::string b = EncodeBootstrap(m);
  BootstrapMessage d;
  ASSERT_TRUE(DecodeBootstrap(Slice(b), &d).ok());
  EXPECT_EQ(EncodeBootstrap(d), b);
}

TEST(CreditWindowTest, TheLastCreditGoesOnlyOnAMessageThatGrants) {
  CreditWindow w(/*send_credits=*/2, /*posted=*/8);
  EXPECT_TRUE(w.CanSendData());
  EXPECT_EQ(w.Spend(), 0u);
  EXPECT_EQ(w.credits(), 1u);
  EXPECT_FALSE(w.CanSendData());  // the last credit, and nothing to grant
  w.Reposted();
  EXPECT_TRUE(w.CanSendData());  // now it would carry a grant
  EXPECT_EQ(w.Spend(), 1u);
  EXPECT_EQ(w.credits(), 0u);
  EXPECT_FALSE(w.CanSendData());
  w.Granted(3);
  EXPECT_TRUE(w.CanSendData());
}

TEST(CreditWindowTest, AGrantOnlyMessageIsDueAtHalfTheBuffers) {
  CreditWindow w(/*send_credits=*/1, /*posted=*/8);
  for (int i = 0; i < 3; ++i) w.Reposted();
  EXPECT_FALSE(w.GrantDue());
  w.Reposted();
  EXPECT_TRUE(w.GrantDue());  // 4 owed of 8: worth a message, even on the last credit
  EXPECT_EQ(w.Spend(), 4u);
  EXPECT_FALSE(w.GrantDue());
  w.Reposted();
  w.Reposted();
  w.Reposted();
  w.Reposted();
  EXPECT_FALSE(w.GrantDue());  // owed, but no credit to carry them
}

}  // namespace
}  // namespace rrpc::rdma
