// Cancellation (RpcController::Cancel, RpcContext::cancelled/OnCancel; docs/wire-format.md,
// "Control frames"): a cancelled call ends at once on the client; the server skips a cancelled
// call still queued and tells a running handler; a deadline passed on the client cancels the
// same way; and peers that did not negotiate CANCELLATION never see a cancel frame.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

constexpr int kWorkers = 2;
constexpr int kQueued = 1000;
const MonoDelta kLong = MonoDelta::FromSeconds(60);

class CancelTest : public RpcTestBase {
 protected:
  void SetUp() override {
    MessengerOptions options;
    options.num_workers = kWorkers;
    options.service_queue_length = 2 * kQueued;
    StartServer(options);
    StartClient();
  }
  MessengerMetrics* server_metrics() { return MessengerInternals::metrics(*server_); }
};

// One asynchronous call and what its callback saw.
struct AsyncCall {
  rtest::EchoRequestPB req;
  rtest::EchoResponsePB resp;
  RpcController ctl;
  std::atomic<int> callbacks{0};
  CountDownLatch done{1};
};

void Send(rtest::EchoServiceProxy& proxy, AsyncCall* c, const std::string& data,
          MonoDelta timeout = kLong) {
  c->req.set_data(data);
  c->ctl.set_timeout(timeout);
  proxy.EchoAsync(c->req, &c->resp, &c->ctl, [c] {
    c->callbacks++;
    c->done.CountDown();
  });
}

TEST_F(CancelTest, QueuedCallsCancelledNeverRunTheirHandlers) {
  std::atomic<int> cancelled_ran{0};
  service_->set_echo_hook([&](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "blocker") {
      gate_.Pass();
    } else {
      cancelled_ran++;
    }
  });
  rtest::EchoServiceProxy proxy = Proxy();
  std::vector<std::unique_ptr<AsyncCall>> blockers, calls;
  for (int i = 0; i < kWorkers; i++) {
    blockers.push_back(std::make_unique<AsyncCall>());
    Send(proxy, blockers.back().get(), "blocker");
  }
  ASSERT_TRUE(gate_.WaitForEntered(kWorkers));
  for (int i = 0; i < kQueued; i++) {
    calls.push_back(std::make_unique<AsyncCall>());
    Send(proxy, calls.back().get(), "queued-" + std::to_string(i));
  }
  ASSERT_TRUE(WaitForCondition(
      [&] { return MessengerInternals::service_pool(*server_)->queue_size() == kQueued; }));

  // Each ends at once, cancelled, while the server's workers are still held: no answer from the
  // server could have ended it.
  for (auto& c : calls) c->ctl.Cancel();
  for (auto& c : calls) {
    ASSERT_TRUE(c->done.WaitFor(kLong));
    EXPECT_EQ(1, c->callbacks.load());
    EXPECT_TRUE(c->ctl.status().IsAborted()) << c->ctl.status().ToString();
    EXPECT_NE(std::string::npos, c->ctl.status().ToString().find("cancelled"));
  }
  EXPECT_EQ(0, cancelled_ran.load());
  ASSERT_TRUE(WaitForCondition([&] {
    return server_metrics()->cancel_requests->value() == static_cast<uint64_t>(kQueued);
  }));

  gate_.Open();
  for (auto& b : blockers) {
    ASSERT_TRUE(b->done.WaitFor(kLong));
    EXPECT_TRUE(b->ctl.status().ok()) << b->ctl.status().ToString();
  }
  ASSERT_TRUE(WaitForCondition(
      [&] { return MessengerInternals::service_pool(*server_)->queue_size() == 0; }));
  ASSERT_TRUE(WaitForCondition([&] {
    return server_metrics()->calls_cancelled_in_queue->value() +
               static_cast<uint64_t>(cancelled_ran.load()) ==
           static_cast<uint64_t>(kQueued);
  }));
  // The issue asks for at least 99%; every one of them is in fact skipped.
  EXPECT_LE(cancelled_ran.load(), kQueued / 100);
  EXPECT_EQ(static_cast<uint64_t>(kQueued - cancelled_ran.load()),
            server_metrics()->calls_cancelled_in_queue->value());
  // Cancelled once: a second Cancel, after the end, does nothing.
  calls[0]->ctl.Cancel();
  EXPECT_EQ(1, calls[0]->callbacks.load());
  EXPECT_TRUE(EchoOnce(proxy, "after").ok());
}

// A handler that waits until its call is cancelled, recording what it saw.
struct CancelWatcher {
  CountDownLatch started{1};
  CountDownLatch callback_ran{1};
  CountDownLatch finished{1};
  std::atomic<int> callbacks{0};
  std::atomic<bool> saw_cancelled{false};
  std::atomic<bool> waited_out{false};

  void Handle(RpcContext* context) {
    context->OnCancel([this] {
      callbacks++;
      callback_ran.CountDown();
    });
    started.CountDown();
    waited_out = !callback_ran.WaitFor(kLong);
    saw_cancelled = context->cancelled();
    finished.CountDown();
  }
};

TEST_F(CancelTest, RunningHandlerSeesCancelledAndItsCallbackOnce) {
  CancelWatcher watcher;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { watcher.Handle(context); });
  rtest::EchoServiceProxy proxy = Proxy();
  AsyncCall call;
  Send(proxy, &call, "running");
  ASSERT_TRUE(watcher.started.WaitFor(kLong));
  // From another thread, twice: one cancel, one callback.
  std::thread canceller([&] {
    call.ctl.Cancel();
    call.ctl.Cancel();
  });
  canceller.join();
  ASSERT_TRUE(call.done.WaitFor(kLong));
  EXPECT_TRUE(call.ctl.status().IsAborted()) << call.ctl.status().ToString();
  ASSERT_TRUE(watcher.finished.WaitFor(kLong));
  EXPECT_FALSE(watcher.waited_out.load());
  EXPECT_TRUE(watcher.saw_cancelled.load());
  EXPECT_EQ(1, watcher.callbacks.load());
  EXPECT_EQ(1u, server_metrics()->calls_cancelled_running->value());
  EXPECT_EQ(1, call.callbacks.load());
  EXPECT_TRUE(EchoOnce(proxy, "after").ok());
}

TEST_F(CancelTest, DeadlinePassedOnTheClientCancelsTheRunningHandler) {
  rtest::EchoServiceProxy proxy = Proxy();
  ASSERT_TRUE(EchoOnce(proxy, "warm").ok());  // the connection is up before the deadlines run
  // The deadline must pass while the handler runs. A loaded machine may hold the call past a
  // short deadline before its handler starts (then it is cancelled in the queue, not running):
  // such a round proves nothing and the next one doubles the deadline.
  std::atomic<CancelWatcher*> watcher{nullptr};
  service_->set_echo_hook([&](const rtest::EchoRequestPB& req, RpcContext* context) {
    if (req.data() == "slow") watcher.load()->Handle(context);
  });
  bool handler_ran = false;
  for (int ms = 300; !handler_ran && ms <= 300 * 64; ms *= 2) {
    CancelWatcher w;
    watcher = &w;
    auto skipped = [this] {
      return server_metrics()->calls_cancelled_in_queue->value() +
             server_metrics()->calls_expired_in_queue->value();
    };
    const auto skipped_before = skipped();
    AsyncCall call;
    Send(proxy, &call, "slow", MonoDelta::FromMilliseconds(ms));
    ASSERT_TRUE(call.done.WaitFor(kLong));
    EXPECT_TRUE(call.ctl.status().IsTimedOut()) << call.ctl.status().ToString();
    // Either the handler started (and must finish, cancelled) or the call never ran.
    ASSERT_TRUE(
        WaitForCondition([&] { return w.finished.count() == 0 || skipped() > skipped_before; }));
    handler_ran = w.started.count() == 0;
    if (!handler_ran) continue;
    ASSERT_TRUE(w.finished.WaitFor(kLong));
    EXPECT_FALSE(w.waited_out.load());
    EXPECT_TRUE(w.saw_cancelled.load());
    EXPECT_EQ(1, w.callbacks.load());
  }
  EXPECT_TRUE(handler_ran) << "no deadline up to 19.2 s passed while the handler ran";
}

TEST_F(CancelTest, CancelBeforeTheCallFailsItWithoutSending) {
  rtest::EchoServiceProxy proxy = Proxy();
  rtest::EchoRequestPB req;
  req.set_data("never");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.Cancel();
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsAborted()) << s.ToString();
  EXPECT_EQ(0, service_->calls());
  ctl.Reset();  // clears the cancel
  ctl.set_timeout(kLong);
  EXPECT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
}

TEST_F(CancelTest, SynchronousCallCancelledFromAnotherThreadReturnsAtOnce) {
  CancelWatcher watcher;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { watcher.Handle(context); });
  rtest::EchoServiceProxy proxy = Proxy();
  RpcController ctl;
  ctl.set_timeout(kLong);
  std::thread canceller([&] {
    if (watcher.started.WaitFor(kLong)) ctl.Cancel();
  });
  rtest::EchoRequestPB req;
  req.set_data("sync");
  rtest::EchoResponsePB resp;
  Status s = proxy.Echo(req, &resp, &ctl);
  canceller.join();
  EXPECT_TRUE(s.IsAborted()) << s.ToString();
  ASSERT_TRUE(watcher.finished.WaitFor(kLong));
  EXPECT_TRUE(watcher.saw_cancelled.load());
}

TEST_F(CancelTest, RunningHandlerThatOnlyPollsSeesItsCallCancelled) {
  // No OnCancel: the call stays where most calls are tracked (a cancel slot, connection.h).
  CountDownLatch started(1);
  std::atomic<bool> saw_cancelled{false};
  service_->set_echo_hook([&](const rtest::EchoRequestPB& req, RpcContext* context) {
    if (req.data() != "polls") return;
    started.CountDown();
    saw_cancelled = WaitForCondition([context] { return context->cancelled(); });
  });
  rtest::EchoServiceProxy proxy = Proxy();
  AsyncCall call;
  Send(proxy, &call, "polls");
  ASSERT_TRUE(started.WaitFor(kLong));
  call.ctl.Cancel();
  ASSERT_TRUE(call.done.WaitFor(kLong));
  EXPECT_TRUE(call.ctl.status().IsAborted()) << call.ctl.status().ToString();
  ASSERT_TRUE(
      WaitForCondition([&] { return server_metrics()->calls_cancelled_running->value() == 1; }));
  EXPECT_TRUE(WaitForCondition([&] { return saw_cancelled.load(); }));
  EXPECT_TRUE(EchoOnce(proxy, "after").ok());
}

TEST_F(CancelTest, CancelsRacingTheAnswersEndEachCallOnce) {
  // Calls answered at once, each cancelled from another thread as it goes: the cancel lands
  // before, during or after the answer, on both sides; every call ends exactly once and the
  // server keeps serving. Rounds repeat (at most 20) until the race went both ways: some calls
  // answered before their cancel, some cancelled before their answer. The canceller waits from
  // nothing to a few hundred microseconds after each send (longer each round), so on a loaded
  // machine too some cancels come before the answer and some after.
  constexpr int kCalls = 300;
  rtest::EchoServiceProxy proxy = Proxy();
  int answered = 0, cancelled = 0;
  for (int round = 0; round < 20 && (answered == 0 || cancelled == 0); round++) {
    std::vector<std::unique_ptr<AsyncCall>> calls;
    for (int i = 0; i < kCalls; i++) calls.push_back(std::make_unique<AsyncCall>());
    std::atomic<int> sent{0};
    std::thread canceller([&] {
      for (int i = 0; i < kCalls; i++) {
        while (sent.load() <= i) std::this_thread::yield();
        const MonoTime at =
            MonoTime::Now() + MonoDelta::FromMicroseconds((i % 16) * 25 * (round + 1));
        while (MonoTime::Now() < at) std::this_thread::yield();
        calls[i]->ctl.Cancel();
      }
    });
    for (int i = 0; i < kCalls; i++) {
      Send(proxy, calls[i].get(), "race-" + std::to_string(i));
      sent++;
    }
    canceller.join();
    for (auto& c : calls) {
      ASSERT_TRUE(c->done.WaitFor(kLong));
      EXPECT_EQ(1, c->callbacks.load());
      const Status& st = c->ctl.status();
      EXPECT_TRUE(st.ok() || st.IsAborted()) << st.ToString();
      if (st.ok()) {
        EXPECT_EQ(c->req.data(), c->resp.data());
        answered++;
      } else {
        cancelled++;
      }
    }
  }
  RecordProperty("answered", answered);
  RecordProperty("cancelled", cancelled);
  EXPECT_GT(answered, 0) << "no answer beat its cancel: the race was never run";
  EXPECT_GT(cancelled, 0) << "no cancel beat its answer: the race was never run";
  EXPECT_TRUE(EchoOnce(proxy, "after").ok());
}

TEST(CancelFrameTest, BytesAreAsDocumentedInWireFormat) {
  RequestHeader header;
  header.set_call_id(kControlCallId);
  ControlPB control;
  control.set_kind(ControlPB::CANCEL);
  control.add_call_ids(7);
  const std::string expected(
      "\x00\x00\x00\x12\x0b\x08\xfd\xff\xff\xff\xff\xff\xff\xff\xff\x01\x05\x08\x01\x12\x01\x07",
      22);
  EXPECT_EQ(expected, FrameBytes(header, control));
}

// ---- Peers without CANCELLATION, each way.

TEST_F(CancelTest, ClientWithoutCancellationIsServedAndCancelFramesAreHarmless) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE(conn.Negotiate(/*offer_cancellation=*/false).ok());
  rtest::EchoRequestPB req;
  req.set_data("old client");
  ASSERT_TRUE(conn.Write(CallFrame(1, "rrpc.rtest.EchoService", "Echo", req)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(1, header.call_id());
  EXPECT_FALSE(header.is_error());
  // A cancel frame from it anyway, for an unknown call: ignored; the connection serves on.
  RequestHeader control_header;
  control_header.set_call_id(kControlCallId);
  ControlPB control;
  control.set_kind(ControlPB::CANCEL);
  control.add_call_ids(12345);
  ASSERT_TRUE(conn.Write(FrameBytes(control_header, control)).ok());
  ASSERT_TRUE(conn.Write(CallFrame(2, "rrpc.rtest.EchoService", "Echo", req)).ok());
  ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(2, header.call_id());
  EXPECT_FALSE(header.is_error());
  EXPECT_EQ(0u, server_metrics()->calls_cancelled_in_queue->value());
}

TEST_F(CancelTest, MalformedControlFrameClosesOnlyItsConnection) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE(conn.Negotiate().ok());
  RequestHeader control_header;
  control_header.set_call_id(kControlCallId);
  rtest::EchoRequestPB not_control;  // field 1 as a string: not a ControlPB kind
  not_control.set_data("garbage");
  ASSERT_TRUE(conn.Write(FrameBytes(control_header, not_control)).ok());
  EXPECT_TRUE(conn.WaitForClose());
  EXPECT_TRUE(EchoOnce(Proxy(), "others unharmed").ok());
}

// A scripted server that negotiates (accepting CANCELLATION or not), reads a first call (its
// header to `first`), then reports the next frame it reads.
void RunScriptedServer(RawListener* listener, bool accept_cancellation, CountDownLatch* first_read,
                       RequestHeader* first, RequestHeader* next_header, std::string* next_body,
                       Status* status, CountDownLatch* next_read) {
  Result<Socket> sock = listener->Accept();
  if (!sock.ok()) {
    *status = sock.status();
    first_read->CountDown();
    next_read->CountDown();
    return;
  }
  RawConnection conn(std::move(sock).value());
  *status = conn.AcceptNegotiation(accept_cancellation);
  std::string body;
  if (status->ok()) *status = conn.ReadParsedFrame(first, &body);
  first_read->CountDown();
  if (status->ok()) *status = conn.ReadParsedFrame(next_header, next_body);
  next_read->CountDown();
  if (status->ok() && next_header->call_id() > 0) {
    ResponseHeader resp_header;
    resp_header.set_call_id(next_header->call_id());
    rtest::EchoResponsePB resp;
    resp.set_data("second");
    *status = conn.Write(FrameBytes(resp_header, resp));
  }
  conn.WaitForClose();
}

TEST_F(CancelTest, ServerWithoutCancellationNeverReceivesACancelFrame) {
  RawListener listener;
  ASSERT_TRUE(listener.status().ok());
  CountDownLatch first_read(1), next_read(1);
  RequestHeader first_header, next;
  std::string next_body;
  Status server_status;
  std::thread server([&] {
    RunScriptedServer(&listener, /*accept_cancellation=*/false, &first_read, &first_header, &next,
                      &next_body, &server_status, &next_read);
  });
  rtest::EchoServiceProxy proxy(client_, listener.addr());
  AsyncCall first;
  Send(proxy, &first, "first");
  ASSERT_TRUE(first_read.WaitFor(kLong));
  first.ctl.Cancel();
  ASSERT_TRUE(first.done.WaitFor(kLong));
  EXPECT_TRUE(first.ctl.status().IsAborted()) << first.ctl.status().ToString();
  // The next frame the server reads is the next call, not a cancel.
  AsyncCall second;
  Send(proxy, &second, "second");
  ASSERT_TRUE(second.done.WaitFor(kLong));
  EXPECT_TRUE(second.ctl.status().ok()) << second.ctl.status().ToString();
  client_->Shutdown();
  server.join();
  ASSERT_TRUE(server_status.ok()) << server_status.ToString();
  EXPECT_GT(next.call_id(), 0);
}

TEST_F(CancelTest, ServerWithCancellationReceivesTheCancelledCallsId) {
  RawListener listener;
  ASSERT_TRUE(listener.status().ok());
  CountDownLatch first_read(1), next_read(1);
  RequestHeader first_header, next;
  std::string next_body;
  Status server_status;
  std::thread server([&] {
    RunScriptedServer(&listener, /*accept_cancellation=*/true, &first_read, &first_header, &next,
                      &next_body, &server_status, &next_read);
  });
  // Call ids come from the messenger: two calls elsewhere first, so the cancelled call's id is
  // not 0 (a field left unset would read 0).
  for (int i = 0; i < 2; i++) ASSERT_TRUE(EchoOnce(Proxy(), "before").ok());
  rtest::EchoServiceProxy proxy(client_, listener.addr());
  AsyncCall first;
  Send(proxy, &first, "first");
  ASSERT_TRUE(first_read.WaitFor(kLong));
  first.ctl.Cancel();
  ASSERT_TRUE(first.done.WaitFor(kLong));
  EXPECT_TRUE(first.ctl.status().IsAborted()) << first.ctl.status().ToString();
  ASSERT_TRUE(next_read.WaitFor(kLong));
  client_->Shutdown();
  server.join();
  ASSERT_TRUE(server_status.ok()) << server_status.ToString();
  EXPECT_EQ(kControlCallId, next.call_id());
  EXPECT_FALSE(next.has_remote_method());
  ControlPB control;
  ASSERT_TRUE(control.ParseFromString(next_body));
  EXPECT_EQ(ControlPB::CANCEL, control.kind());
  ASSERT_EQ(1, control.call_ids_size());
  EXPECT_GT(first_header.call_id(), 0);
  EXPECT_EQ(first_header.call_id(), control.call_ids(0));  // the cancelled call's own id
}

}  // namespace
}  // namespace rrpc::rpc
