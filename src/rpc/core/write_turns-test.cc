#include "rpc/core/write_turns.h"

#include <gtest/gtest.h>

namespace rrpc::rpc {
namespace {

constexpr size_t kUnlimited = TransferQueue::kNoByteLimit;

MonoTime At(int64_t us) { return MonoTime() + MonoDelta::FromMicroseconds(1'000'000 + us); }

TEST(WriteTurnsTest, AConnectionAloneWritesWithoutLimit) {
  WriteTurns turns;
  EXPECT_EQ(kUnlimited, turns.BudgetBytes());
  int a = 0;
  for (int us = 0; us < 5000; us += 100) turns.NoteReceived(&a, At(us));
  EXPECT_EQ(kUnlimited, turns.BudgetBytes());
}

TEST(WriteTurnsTest, TwoBusyConnectionsShareTheTurns) {
  WriteTurns turns;
  int stream = 0, probe = 0;
  turns.NoteReceived(&stream, At(0));
  turns.NoteReceived(&probe, At(10));
  EXPECT_EQ(WriteTurns::kSharedTurnBytes, turns.BudgetBytes());
  // The stream's credit keeps coming; the probe's calls, every 300 us, keep the reactor shared.
  for (int us = 20; us < 3000; us += 20) {
    turns.NoteReceived((us % 300 == 0) ? &probe : &stream, At(us));
    EXPECT_EQ(WriteTurns::kSharedTurnBytes, turns.BudgetBytes()) << us;
  }
}

TEST(WriteTurnsTest, AReactorIsNoLongerSharedAWindowAfterTheOtherWentQuiet) {
  WriteTurns turns;
  int stream = 0, probe = 0;
  turns.NoteReceived(&stream, At(0));
  turns.NoteReceived(&probe, At(10));
  turns.NoteReceived(&stream, At(20));
  const int64_t window_us = WriteTurns::kSharedWindow.ToMicroseconds();
  turns.NoteReceived(&stream, At(20 + window_us - 1));
  EXPECT_EQ(WriteTurns::kSharedTurnBytes, turns.BudgetBytes());
  turns.NoteReceived(&stream, At(20 + window_us));
  EXPECT_EQ(kUnlimited, turns.BudgetBytes());
}

}  // namespace
}  // namespace rrpc::rpc
