#include "rrpc/rpc/cluster/latency_window.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace rrpc::rpc {
namespace {

constexpr MonoDelta kWindow = MonoDelta::FromSeconds(1);
constexpr int kMinSamples = 100;

// Answers at a steady rate on a clock the test drives: `per_window` answers of `latency` per
// window of time.
class Feed {
 public:
  explicit Feed(LatencyWindow* w, MonoTime start) : w_(w), now_(start) {}
  void Run(MonoDelta latency, int per_window, double windows) {
    const MonoDelta step = MonoDelta::FromNanoseconds(kWindow.ToNanoseconds() / per_window);
    const int n = static_cast<int>(per_window * windows);
    for (int i = 0; i < n; i++) {
      now_ = now_ + step;
      w_->Record(latency, now_);
    }
  }
  MonoTime now() const { return now_; }
  void Skip(MonoDelta d) { now_ = now_ + d; }

 private:
  LatencyWindow* const w_;
  MonoTime now_;
};

const MonoDelta kFast = MonoDelta::FromMicroseconds(900);  // bucket 1024 us
const MonoDelta kSlow = MonoDelta::FromMilliseconds(20);   // bucket 32768 us
const MonoDelta kFastP95 = MonoDelta::FromMicroseconds(1024);
const MonoDelta kSlowP95 = MonoDelta::FromMicroseconds(32768);

TEST(LatencyWindowTest, PercentileIsUnknownUntilEnoughAnswers) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(kWindow, kMinSamples, t0);
  for (int i = 0; i < kMinSamples - 1; i++) w.Record(kFast, t0);
  EXPECT_EQ(w.Percentile(95), MonoDelta());
  w.Record(kFast, t0);
  EXPECT_EQ(w.Percentile(95), kFastP95);
}

TEST(LatencyWindowTest, PercentileIsTheBucketHoldingThatShareOfAnswers) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(kWindow, kMinSamples, t0);
  for (int i = 0; i < 94; i++) w.Record(MonoDelta::FromMicroseconds(100), t0);
  for (int i = 0; i < 6; i++) w.Record(MonoDelta::FromMicroseconds(5000), t0);
  EXPECT_EQ(w.Percentile(90), MonoDelta::FromMicroseconds(128));
  EXPECT_EQ(w.Percentile(95), MonoDelta::FromMicroseconds(8192));
  EXPECT_EQ(w.Percentile(50), MonoDelta::FromMicroseconds(128));
}

// The case the channel's former histogram (every answer since start) handled worst: a server
// slow for a long while that recovered. Ten minutes of slow answers, then fast ones: the p95
// is fast again two windows later. Counting everything it would stay slow until twenty times
// as many fast answers had come.
TEST(LatencyWindowTest, PercentileFollowsARecoveryWithinTwoWindows) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(kWindow, kMinSamples, t0);
  Feed feed(&w, t0);
  feed.Run(kSlow, 200, 600.5);  // the shift comes mid-window
  ASSERT_EQ(w.Percentile(95), kSlowP95);
  feed.Run(kFast, 200, 0.4);
  EXPECT_EQ(w.Percentile(95), kSlowP95) << "answers of the last two windows count";
  feed.Run(kFast, 200, 1.6);
  EXPECT_EQ(w.Percentile(95), kFastP95);
  EXPECT_EQ(w.Percentile(100), kFastP95) << "no answer older than two windows is counted";
  EXPECT_LE(w.samples(), 2 * 200 + 1);
}

TEST(LatencyWindowTest, PercentileFollowsASlowdownWithinTwoWindows) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(kWindow, kMinSamples, t0);
  Feed feed(&w, t0);
  feed.Run(kFast, 500, 10.5);  // the shift comes mid-window
  ASSERT_EQ(w.Percentile(95), kFastP95);
  // A slowdown of 3% of the answers stays under the p95; one of every answer moves it.
  feed.Run(kSlow, 500, 2);
  EXPECT_EQ(w.Percentile(95), kSlowP95);
  EXPECT_EQ(w.Percentile(0.1), kSlowP95) << "no answer older than two windows is counted";
}

// A window closes only once it holds enough answers: at a low rate windows stretch, so the
// estimate always rests on at least min_samples answers and never drops back to unknown.
TEST(LatencyWindowTest, AtALowRateWindowsStretchToHoldEnoughAnswers) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(kWindow, kMinSamples, t0);
  Feed feed(&w, t0);
  feed.Run(kFast, 10, 10);  // 100 answers over ten windows' time
  EXPECT_EQ(w.Percentile(95), kFastP95);
  for (int i = 0; i < 100; i++) {
    feed.Run(kSlow, 10, 1);
    ASSERT_GE(w.samples(), kMinSamples);
    ASSERT_NE(w.Percentile(95), MonoDelta());
  }
  EXPECT_EQ(w.Percentile(95), kSlowP95);
}

// With no answers nothing closes: after an hour of silence the last estimate stands, and the
// first answer after it does not replace the estimate on its own.
TEST(LatencyWindowTest, WithNoNewAnswersTheLastEstimateStays) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(kWindow, kMinSamples, t0);
  Feed feed(&w, t0);
  feed.Run(kFast, 200, 2.5);  // the current window holds 100 answers
  ASSERT_EQ(w.Percentile(95), kFastP95);
  feed.Skip(MonoDelta::FromSeconds(3600));
  EXPECT_EQ(w.Percentile(95), kFastP95);
  feed.Run(kSlow, 1, 1);  // one answer, an hour later: it closes the window it lands in
  EXPECT_EQ(w.samples(), 101);
  EXPECT_EQ(w.Percentile(95), kFastP95);
  // Then two windows of the new answers replace the old ones.
  feed.Run(kSlow, 200, 2.1);
  EXPECT_EQ(w.Percentile(50), kSlowP95);
}

// Several threads record (as reactors do) while another reads; run under TSAN. The estimate
// stays one of the recorded buckets.
TEST(LatencyWindowTest, ConcurrentRecordsAndReadsStaySane) {
  const MonoTime t0 = MonoTime::Now();
  LatencyWindow w(MonoDelta::FromMilliseconds(1), 10, t0);
  std::atomic<int64_t> clock_ns{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; t++) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 20000; i++) {
        const int64_t ns = clock_ns.fetch_add(1000, std::memory_order_relaxed);
        w.Record(t == 0 ? kSlow : kFast, t0 + MonoDelta::FromNanoseconds(ns));
      }
    });
  }
  std::thread reader([&] {
    while (!done.load()) {
      const MonoDelta p = w.Percentile(95);
      if (p != MonoDelta()) {
        ASSERT_TRUE(p == kFastP95 || p == kSlowP95) << p.ToString();
      }
    }
  });
  for (auto& t : writers) t.join();
  done.store(true);
  reader.join();
  EXPECT_GE(w.samples(), 10);
}

}  // namespace
}  // namespace rrpc::rpc
