// Tests of RpczStore: the in-flight list and the sample rings on their own (entries made by the
// test, times set in the past so that "slow" never depends on how fast the machine is), then
// through a real server messenger whose handler the test holds.
#include "rpc/observe/rpcz_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

const Sockaddr kPeer = Sockaddr::Loopback(4242);
// Stand-ins for RpcMethodInfo pointers: any distinct addresses do.
const int kEchoKey = 0;
const int kAddKey = 0;

RpczCallInfo Info(const void* key, std::string_view method, int32_t call_id, MonoTime arrival) {
  RpczCallInfo info;
  info.method_key = key;
  info.service = "rrpc.rtest.EchoService";
  info.method = method;
  info.peer = &kPeer;
  info.call_id = call_id;
  info.arrival = arrival;
  return info;
}

// Tracks `entry` with `info`, as the service pool does (the info set in place first).
void TrackCall(RpczStore* store, RpczCallEntry* entry, const RpczCallInfo& info, size_t stripe) {
  *entry->mutable_info() = info;
  store->Track(entry, stripe);
}

MonoTime SecondsAgo(int s) { return MonoTime::Now() - MonoDelta::FromSeconds(s); }

// Finished calls of sampled traces are kept, a bounded number of them, newest replacing oldest;
// unsampled and untraced calls are not; in-flight calls carry their trace ids.
TEST(RpczStoreTest, KeepsTheLastSpansOfSampledTracesBounded) {
  RpczStoreOptions options;
  options.trace_spans = 4;
  RpczStore store(options);
  auto traced = [](int32_t call_id, uint64_t trace_low, bool sampled) {
    RpczCallInfo info = Info(&kEchoKey, "Echo", call_id, MonoTime::Now());
    info.trace.trace_id_high = 1;
    info.trace.trace_id_low = trace_low;
    info.trace.span_id = 100 + call_id;
    info.trace.parent_span_id = 7;
    info.trace.flags = sampled ? 1 : 0;
    return info;
  };
  {
    RpczCallEntry e;
    TrackCall(&store, &e, traced(1, 5, true), 0);
    RpczInFlightList list = store.ListInFlight(10);
    ASSERT_EQ(1u, list.calls.size());
    EXPECT_TRUE(list.calls[0].trace.SameTrace(1, 5));
    EXPECT_EQ(7u, list.calls[0].trace.parent_span_id);
    e.Finish(/*sent=*/true);
  }
  for (int32_t id = 2; id <= 7; id++) {  // trace 5 sampled, trace 6 not, then untraced
    RpczCallEntry a, b, c;
    TrackCall(&store, &a, traced(id, 5, true), 0);
    TrackCall(&store, &b, traced(id, 6, false), 1);
    TrackCall(&store, &c, Info(&kEchoKey, "Echo", id, MonoTime::Now()), 2);
    a.Finish(true);
    b.Finish(true);
    c.Finish(true);
  }
  const std::vector<RpczSpan> spans = store.ListSpans(1, 5);
  ASSERT_EQ(4u, spans.size());  // the last 4 of 7, oldest first
  for (size_t i = 0; i < spans.size(); i++) {
    EXPECT_EQ(static_cast<int32_t>(4 + i), spans[i].call.call_id);
    EXPECT_EQ(static_cast<uint64_t>(104 + i), spans[i].call.trace.span_id);
    EXPECT_EQ(7u, spans[i].call.trace.parent_span_id);
    EXPECT_EQ("Echo", spans[i].method);
  }
  EXPECT_TRUE(store.ListSpans(1, 6).empty());
  EXPECT_TRUE(store.ListSpans(0, 0).empty());
}

TEST(RpczStoreTest, ListsCallsInFlightWithTheirStateLongestFirst) {
  RpczStore store;
  RpczCallEntry queued, running, sending;
  TrackCall(&store, &queued, Info(&kEchoKey, "Echo", 1, SecondsAgo(1)), 0);
  TrackCall(&store, &running, Info(&kEchoKey, "Echo", 2, SecondsAgo(3)), 1);
  TrackCall(&store, &sending, Info(&kAddKey, "Add", 3, SecondsAgo(2)), 17);
  running.MarkStarted(MonoTime::Now());
  sending.MarkStarted(MonoTime::Now());
  sending.MarkResponded(MonoTime::Now(), -1, {});

  RpczInFlightList list = store.ListInFlight(100);
  ASSERT_EQ(3u, list.total);
  ASSERT_EQ(3u, list.calls.size());
  EXPECT_EQ(2, list.calls[0].call_id);
  EXPECT_EQ(RpczCallState::kRunning, list.calls[0].state);
  EXPECT_GE(list.calls[0].started.ToNanoseconds(), 0);
  EXPECT_LT(list.calls[0].responded.ToNanoseconds(), 0);
  EXPECT_EQ(3, list.calls[1].call_id);
  EXPECT_EQ(RpczCallState::kSending, list.calls[1].state);
  EXPECT_EQ("Add", list.calls[1].method);
  EXPECT_EQ(1, list.calls[2].call_id);
  EXPECT_EQ(RpczCallState::kQueued, list.calls[2].state);
  EXPECT_EQ("rrpc.rtest.EchoService", list.calls[2].service);
  EXPECT_EQ("127.0.0.1:4242", list.calls[2].peer);
  EXPECT_GE(list.calls[2].elapsed.ToNanoseconds(), MonoDelta::FromSeconds(1).ToNanoseconds());

  // A limit keeps the longest ones and still reports the total.
  list = store.ListInFlight(1);
  EXPECT_EQ(3u, list.total);
  ASSERT_EQ(1u, list.calls.size());
  EXPECT_EQ(2, list.calls[0].call_id);

  queued.Finish(/*sent=*/true);
  running.Finish(/*sent=*/true);
  sending.Finish(/*sent=*/true);
  EXPECT_FALSE(queued.tracked());
  EXPECT_EQ(0u, store.ListInFlight(100).total);
}

TEST(RpczStoreTest, DestroyedEntryLeavesTheListAsNotSent) {
  RpczStoreOptions options;
  options.slow_threshold = MonoDelta::FromSeconds(3600);
  RpczStore store(options);
  {
    RpczCallEntry entry;
    TrackCall(&store, &entry, Info(&kEchoKey, "Echo", 7, MonoTime::Now()), 0);
    EXPECT_EQ(1u, store.ListInFlight(10).total);
  }
  EXPECT_EQ(0u, store.ListInFlight(10).total);
  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  ASSERT_EQ(1u, samples[0].failed.size());
  EXPECT_EQ("NOT_SENT", samples[0].failed[0].error_code);
  EXPECT_FALSE(samples[0].failed[0].sent);
}

TEST(RpczStoreTest, SamplesSlowSuccessfulCallsWithTheirTimeline) {
  RpczStoreOptions options;
  options.slow_threshold = MonoDelta::FromSeconds(1);
  RpczStore store(options);
  RpczCallEntry slow, fast;
  const MonoTime arrival = SecondsAgo(2);
  TrackCall(&store, &slow, Info(&kEchoKey, "Echo", 11, arrival), 0);
  TrackCall(&store, &fast, Info(&kEchoKey, "Echo", 12, MonoTime::Now()), 0);
  slow.MarkStarted(arrival + MonoDelta::FromMilliseconds(500));
  slow.MarkResponded(arrival + MonoDelta::FromMilliseconds(1500), -1, {});
  slow.Finish(/*sent=*/true);
  fast.Finish(/*sent=*/true);  // took far less than a second: not sampled

  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  EXPECT_EQ("Echo", samples[0].method);
  EXPECT_EQ(1u, samples[0].slow_seen);
  EXPECT_TRUE(samples[0].failed.empty());
  ASSERT_EQ(1u, samples[0].slow.size());
  const RpczSample& s = samples[0].slow[0];
  EXPECT_EQ(11, s.call_id);
  EXPECT_EQ("127.0.0.1:4242", s.peer);
  EXPECT_TRUE(s.sent);
  EXPECT_EQ("", s.error_code);
  EXPECT_EQ(500'000, s.started_us);
  EXPECT_EQ(1'500'000, s.responded_us);
  EXPECT_GE(s.done_us, 2'000'000);
  EXPECT_GT(s.arrival_unix_us, 0);
}

// A response its worker wrote whole right after serializing it is finished with the response's
// time (no clock read): the sample's done time is its responded time.
TEST(RpczStoreTest, FinishSentAtResponseTakesTheResponseTime) {
  RpczStoreOptions options;
  options.slow_threshold = MonoDelta::FromSeconds(1);
  RpczStore store(options);
  RpczCallEntry slow;
  const MonoTime arrival = SecondsAgo(5);
  TrackCall(&store, &slow, Info(&kEchoKey, "Echo", 21, arrival), 0);
  slow.MarkStarted(arrival + MonoDelta::FromMilliseconds(500));
  slow.MarkResponded(arrival + MonoDelta::FromMilliseconds(1500), nullptr);
  slow.FinishSentAtResponse();
  EXPECT_FALSE(slow.tracked());
  EXPECT_EQ(0u, store.ListInFlight(10).calls.size());

  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  ASSERT_EQ(1u, samples[0].slow.size());
  const RpczSample& s = samples[0].slow[0];
  EXPECT_TRUE(s.sent);
  EXPECT_EQ(1'500'000, s.responded_us);
  EXPECT_EQ(1'500'000, s.done_us);
}

TEST(RpczStoreTest, SamplesFailedCallsWithTheirError) {
  RpczStoreOptions options;
  options.min_sample_interval = MonoDelta::FromNanoseconds(0);
  RpczStore store(options);
  RpczCallEntry timed_out, dropped;
  TrackCall(&store, &timed_out, Info(&kEchoKey, "Echo", 21, MonoTime::Now()), 0);
  TrackCall(&store, &dropped, Info(&kEchoKey, "Echo", 22, MonoTime::Now()), 0);
  timed_out.MarkResponded(MonoTime::Now(), ErrorStatusPB::ERROR_TIMED_OUT, "expired in queue");
  timed_out.Finish(/*sent=*/true);
  dropped.Finish(/*sent=*/false);

  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  ASSERT_EQ(2u, samples[0].failed.size());
  EXPECT_EQ(22, samples[0].failed[0].call_id);  // newest first
  EXPECT_EQ("NOT_SENT", samples[0].failed[0].error_code);
  EXPECT_EQ(21, samples[0].failed[1].call_id);
  EXPECT_EQ("ERROR_TIMED_OUT", samples[0].failed[1].error_code);
  EXPECT_EQ("expired in queue", samples[0].failed[1].error_message);
  EXPECT_EQ(-1, samples[0].failed[1].started_us);  // never reached a worker
  EXPECT_GE(samples[0].failed[1].responded_us, 0);
}

TEST(RpczStoreTest, RingKeepsTheNewestSamplesOfEachMethod) {
  RpczStoreOptions options;
  options.samples_per_method = 3;
  options.min_sample_interval = MonoDelta::FromNanoseconds(0);
  RpczStore store(options);
  for (int id = 1; id <= 5; id++) {
    RpczCallEntry e;
    TrackCall(&store, &e, Info(&kEchoKey, "Echo", id, MonoTime::Now()), 0);
    e.MarkResponded(MonoTime::Now(), ErrorStatusPB::ERROR_APPLICATION, "no");
    e.Finish(/*sent=*/true);
  }
  RpczCallEntry add;
  TrackCall(&store, &add, Info(&kAddKey, "Add", 99, MonoTime::Now()), 0);
  add.MarkResponded(MonoTime::Now(), ErrorStatusPB::ERROR_APPLICATION, "no");
  add.Finish(/*sent=*/true);

  auto samples = store.ListSamples();
  ASSERT_EQ(2u, samples.size());
  EXPECT_EQ("Add", samples[0].method);  // sorted by name
  ASSERT_EQ(1u, samples[0].failed.size());
  EXPECT_EQ("Echo", samples[1].method);
  EXPECT_EQ(5u, samples[1].failed_seen);
  ASSERT_EQ(3u, samples[1].failed.size());
  EXPECT_EQ(5, samples[1].failed[0].call_id);
  EXPECT_EQ(4, samples[1].failed[1].call_id);
  EXPECT_EQ(3, samples[1].failed[2].call_id);
}

TEST(RpczStoreTest, RateLimitTakesOneSamplePerInterval) {
  RpczStoreOptions options;
  options.min_sample_interval = MonoDelta::FromSeconds(3600);
  RpczStore store(options);
  for (int id = 1; id <= 3; id++) {
    RpczCallEntry e;
    TrackCall(&store, &e, Info(&kEchoKey, "Echo", id, MonoTime::Now()), 0);
    e.MarkResponded(MonoTime::Now(), ErrorStatusPB::ERROR_SERVER_TOO_BUSY, "busy");
    e.Finish(/*sent=*/true);
  }
  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  ASSERT_EQ(1u, samples[0].failed.size());
  EXPECT_EQ(1, samples[0].failed[0].call_id);
  EXPECT_EQ(1u, samples[0].failed_seen);
}

TEST(RpczStoreTest, FullMethodTableStillTracksCallsInFlight) {
  RpczStoreOptions options;
  options.max_methods = 1;
  RpczStore store(options);
  const int keys[3] = {};
  // The store keeps views of the method names: they must outlive the calls.
  const std::string names[3] = {"M0", "M1", "M2"};
  for (int i = 0; i < 3; i++) {
    RpczCallEntry e;
    TrackCall(&store, &e, Info(&keys[i], names[i], i, MonoTime::Now()), 0);
    EXPECT_EQ(1u, store.ListInFlight(10).total);
    e.Finish(/*sent=*/false);
  }
  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  EXPECT_EQ("M0", samples[0].method);
}

TEST(RpczStoreTest, ThresholdCanChangeAtRunTime) {
  RpczStore store;
  store.set_slow_threshold(MonoDelta::FromMilliseconds(5));
  EXPECT_EQ(5000, store.slow_threshold().ToMicroseconds());
  RpczCallEntry e;
  TrackCall(&store, &e, Info(&kEchoKey, "Echo", 1, SecondsAgo(1)), 0);
  e.MarkResponded(MonoTime::Now(), -1, {});
  e.Finish(/*sent=*/true);
  auto samples = store.ListSamples();
  ASSERT_EQ(1u, samples.size());
  EXPECT_EQ(1u, samples[0].slow.size());
}

// Several "reactors" track and finish calls (some failing) while a "page" reads: the counts add
// up and nothing is left behind. Run it under TSAN too.
TEST(RpczStoreTest, ConcurrentTrackFinishAndReads) {
  RpczStoreOptions options;
  options.min_sample_interval = MonoDelta::FromNanoseconds(0);
  options.samples_per_method = 4;
  options.slow_threshold = MonoDelta::FromSeconds(3600);  // only failures are sampled
  RpczStore store(options);
  constexpr int kThreads = 4;
  constexpr int kCalls = 2000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    for (int i = 0; i < 10000 && !done.load(); i++) {
      RpczInFlightList list = store.ListInFlight(50);
      EXPECT_LE(list.calls.size(), 50u);
      store.ListSamples();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::vector<std::unique_ptr<RpczCallEntry>> live;
      for (int i = 0; i < kCalls; i++) {
        auto e = std::make_unique<RpczCallEntry>();
        TrackCall(&store, e.get(), Info(t % 2 == 0 ? &kEchoKey : &kAddKey, "M", i, MonoTime::Now()),
                  static_cast<size_t>(t));
        e->MarkStarted(MonoTime::Now());
        if (i % 7 == 0) {
          e->MarkResponded(MonoTime::Now(), ErrorStatusPB::ERROR_APPLICATION, "x");
        } else {
          e->MarkResponded(MonoTime::Now(), -1, {});
        }
        live.push_back(std::move(e));
        if (live.size() > 16) {  // finish out of order, from the middle
          live[live.size() / 2]->Finish(/*sent=*/true);
          live.erase(live.begin() + static_cast<long>(live.size() / 2));
        }
      }
      for (auto& e : live) e->Finish(/*sent=*/true);
    });
  }
  for (auto& th : threads) th.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(0u, store.ListInFlight(10).total);
  uint64_t failed = 0;
  for (const auto& m : store.ListSamples()) failed += m.failed_seen;
  // Every 7th call failed; a sample is skipped only when its ring was busy.
  const uint64_t expected = kThreads * ((kCalls + 6) / 7);
  EXPECT_EQ(expected, failed + store.samples_dropped());
}

// ---- Through a real server.

class RpczServerTest : public RpcTestBase {
 protected:
  RpczStore* store() { return MessengerInternals::service_pool(*server_)->rpcz_store(); }
  // Sends Echo(`data`) and returns at once; `done` counts down when it finishes.
  struct Call {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
  };
  void Send(Call* call, CountDownLatch* done) {
    call->ctl.set_timeout(MonoDelta::FromSeconds(60));
    Proxy().EchoAsync(call->req, &call->resp, &call->ctl, [done] { done->CountDown(); });
  }
};

TEST_F(RpczServerTest, ListsBlockedCallAsRunningAndQueuedOneBehindIt) {
  MessengerOptions options;
  options.num_workers = 1;
  StartServer(options);
  StartClient();
  HandlerGate gate;
  service_->set_echo_hook([&](const rtest::EchoRequestPB&, RpcContext*) { gate.Pass(); });
  CountDownLatch done(2);
  Call first, second;
  first.req.set_data("first");
  second.req.set_data("second");
  Send(&first, &done);
  ASSERT_TRUE(gate.WaitForEntered(1));
  Send(&second, &done);
  ASSERT_TRUE(WaitForCondition([&] { return store()->ListInFlight(10).total == 2; }));

  RpczInFlightList list = store()->ListInFlight(10);
  ASSERT_EQ(2u, list.calls.size());
  EXPECT_EQ(RpczCallState::kRunning, list.calls[0].state);
  EXPECT_EQ(RpczCallState::kQueued, list.calls[1].state);
  for (const auto& c : list.calls) {
    EXPECT_EQ("rrpc.rtest.EchoService", c.service);
    EXPECT_EQ("Echo", c.method);
    EXPECT_EQ(0u, c.peer.rfind("127.0.0.1:", 0)) << c.peer;
  }

  gate.Open();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(first.ctl.status().ok()) << first.ctl.status().ToString();
  EXPECT_TRUE(second.ctl.status().ok()) << second.ctl.status().ToString();
  // The server forgets a call once its response is written, which may be just after the
  // client has it.
  EXPECT_TRUE(WaitForCondition([&] { return store()->ListInFlight(10).total == 0; }));
}

TEST_F(RpczServerTest, SamplesSlowAndFailedCalls) {
  StartServer();
  StartClient();
  store()->set_slow_threshold(MonoDelta::FromMilliseconds(10));
  auto proxy = Proxy();
  auto call_both = [&] {
    {
      rtest::EchoRequestPB req;
      req.set_data("slow");
      req.set_sleep_ms(30);
      rtest::EchoResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(60));
      ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
    }
    {
      rtest::EchoRequestPB req;
      req.set_data("bad");
      req.set_fail_with("boom");
      rtest::EchoResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(60));
      EXPECT_FALSE(proxy.Echo(req, &resp, &ctl).ok());
    }
  };
  auto has_both = [&] {
    auto samples = store()->ListSamples();
    return samples.size() == 1 && !samples[0].slow.empty() && !samples[0].failed.empty();
  };
  // The server samples a call after its response is out, so the client may be listing the
  // samples (holding the method's rings) just then, and the store drops a sample rather than
  // wait for a lock on the call path. A dropped sample is counted: the calls are made again.
  for (int attempt = 0; attempt < 5 && !has_both(); attempt++) {
    const uint64_t dropped = store()->samples_dropped();
    call_both();
    ASSERT_TRUE(
        WaitForCondition([&] { return has_both() || store()->samples_dropped() > dropped; }));
  }
  ASSERT_TRUE(has_both());
  auto samples = store()->ListSamples();
  EXPECT_EQ("Echo", samples[0].method);
  const RpczSample& slow = samples[0].slow[0];
  EXPECT_TRUE(slow.sent);
  EXPECT_GE(slow.started_us, 0);
  EXPECT_GE(slow.responded_us - slow.started_us, 30'000);  // the handler slept 30 ms
  EXPECT_GE(slow.done_us, slow.responded_us);
  const RpczSample& failed = samples[0].failed[0];
  EXPECT_EQ("ERROR_APPLICATION", failed.error_code);
  EXPECT_EQ("boom", failed.error_message);
  EXPECT_GE(failed.started_us, 0);
}

}  // namespace
}  // namespace rrpc::rpc
