// TestStreamService: the stream methods of rtest_stream.proto for rrpc's own tests. Range
// writes as the client reads without holding a worker (OnWritable); Sum reads on its worker;
// Double answers each message (and its sidecars) as it comes. Counters let tests wait for what
// the server saw. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rpc/testing/rtest_stream.rrpc.h"

namespace rrpc::rpc {

class TestStreamService : public rtest::StreamServiceIf {
 public:
  // Range's producers waiting for room (a stalled reader), streams whose writes were refused
  // because they ended (cancel, deadline, connection), and streams finished.
  std::atomic<int> producers_waiting{0};
  std::atomic<int> writes_refused{0};
  std::atomic<int> ranges_finished{0};
  std::atomic<int64_t> range_messages_queued{0};

  void Range(const rtest::RangeRequestPB* req,
             ServerStream<rtest::RangeRequestPB, rtest::NumberPB> stream) override {
    auto producer = std::make_shared<RangeProducer>(this, *req, std::move(stream));
    RangeProducer::Pump(producer);
  }

  void Sum(ServerStream<rtest::NumberPB, rtest::SumPB> stream) override {
    int64_t sum = 0;
    int64_t count = 0;
    rtest::NumberPB n;
    while (true) {
      Result<bool> got = stream.Read(&n);
      if (!got.ok()) return;  // the stream ended: nothing to answer
      if (!*got) break;
      sum += n.n();
      count++;
    }
    rtest::SumPB out;
    out.set_sum(sum);
    out.set_count(count);
    stream.Finish(out);
  }

  // Keeps the stream open and idle until ReleaseHeld() (or the client ends it).
  void Hold(ServerStream<rtest::NumberPB, rtest::NumberPB> stream) override {
    std::lock_guard<std::mutex> lock(held_mu_);
    held_.push_back(std::move(stream));
    held_count++;
  }
  std::atomic<int> held_count{0};
  // Reserves room for `n` held streams (so a memory test counts streams, not vector growth).
  void ReserveHeld(size_t n) {
    std::lock_guard<std::mutex> lock(held_mu_);
    held_.reserve(n);
  }
  void ReleaseHeld() {
    std::vector<ServerStream<rtest::NumberPB, rtest::NumberPB>> held;
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      held.swap(held_);
    }
    for (auto& s : held) s.Finish();
  }

  void Double(ServerStream<rtest::NumberPB, rtest::NumberPB> stream) override {
    rtest::NumberPB n;
    std::vector<BlockSlice> sidecars;
    while (true) {
      Result<bool> got = stream.Read(&n, &sidecars);
      if (!got.ok()) return;
      if (!*got) break;
      n.set_n(n.n() * 2);
      if (!stream.Write(n, std::move(sidecars)).ok()) return;
      sidecars.clear();
    }
    stream.Finish();
  }

 private:
  std::mutex held_mu_;
  std::vector<ServerStream<rtest::NumberPB, rtest::NumberPB>> held_;

  struct RangeProducer {
    RangeProducer(TestStreamService* service, const rtest::RangeRequestPB& req,
                  ServerStream<rtest::RangeRequestPB, rtest::NumberPB>&& stream)
        : service(service), req(req), next(req.first()), stream(std::move(stream)) {}

    // Writes until the window is full (then resumes from OnWritable) or the range is done.
    static void Pump(const std::shared_ptr<RangeProducer>& self) {
      const int64_t end = self->req.first() + self->req.count();
      rtest::NumberPB n;
      if (self->req.payload_bytes() > 0) n.set_payload(std::string(self->req.payload_bytes(), 'x'));
      while (self->next < end) {
        n.set_n(self->next);
        switch (self->stream.TryWrite(n)) {
          case StreamWrite::kQueued:
            self->next++;
            self->service->range_messages_queued++;
            continue;
          case StreamWrite::kFull:
            self->service->producers_waiting++;
            self->stream.OnWritable([self] {
              self->service->producers_waiting--;
              Pump(self);
            });
            return;
          case StreamWrite::kClosed:
            self->service->writes_refused++;
            return;
        }
      }
      if (self->req.has_fail_with()) {
        self->stream.Finish(Status::RuntimeError(self->req.fail_with()));
      } else {
        self->stream.Finish();
      }
      self->service->ranges_finished++;
    }

    TestStreamService* const service;
    const rtest::RangeRequestPB req;
    int64_t next;
    ServerStream<rtest::RangeRequestPB, rtest::NumberPB> stream;
  };
};

}  // namespace rrpc::rpc
