#include "rrpc/util/sidecar.h"

#include <gtest/gtest.h>

#include <string>

namespace rrpc {
namespace {

TEST(SidecarTest, FromBytesCopiesIntoABlockThatOutlivesTheSource) {
  BlockSlice sidecar;
  {
    std::string payload(10000, 'x');
    payload[0] = 'a';
    payload.back() = 'z';
    sidecar = SidecarFromBytes(payload);
    payload.assign(payload.size(), '-');  // the sidecar does not see the source change
  }
  ASSERT_NE(nullptr, sidecar.block.get());
  EXPECT_EQ(10000u, sidecar.slice.size());
  const std::string back = SidecarToString(sidecar.slice);
  EXPECT_EQ('a', back.front());
  EXPECT_EQ('z', back.back());
  EXPECT_EQ(std::string(9998, 'x'), back.substr(1, 9998));
}

TEST(SidecarTest, EmptyAndBinaryBytesRoundTrip) {
  EXPECT_EQ("", SidecarToString(SidecarFromBytes(Slice()).slice));
  const std::string binary("a\0b\xff", 4);
  EXPECT_EQ(binary, SidecarToString(SidecarFromBytes(binary).slice));
}

}  // namespace
}  // namespace rrpc
