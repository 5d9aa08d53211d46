// Stream mode (bench_modes.h): config.streams streams on one client connection. Per stream, a
// reader (down, bidi) drains messages from OnReadable callbacks and checks each one (its seq in
// order, its payload and sidecar byte for byte), and a writer (up, bidi) queues messages with
// TryWrite until the window is full and goes on from OnWritable. Both run on the client's reactor
// threads (at first on the main thread), one callback of each per stream at a time, so a stream's
// counters need no lock; they are read once the client messenger is shut down.
//
// The run ends: down, by the client cancelling each stream (the server's writes then fail);
// up and bidi, by the writer closing its writes once the run stops, after which the server
// answers (up: its totals, checked against what was sent; bidi: the last echoes, then OK).
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "bench/bench_stream_ready.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/stream.h"
#include "util/countdown_latch.h"

namespace rrpc::bench {

namespace {

// One stream of the run and its checks. Shared by its callbacks.
class StreamClient {
 public:
  StreamClient(const BenchConfig& config, RunControl* control, RetryParker* parker, int index)
      : config_(config),
        control_(control),
        parker_(parker),
        index_(index),
        sidecar_(Pattern() + (1ULL << 32), config.sidecar_bytes) {
    payload_.resize(config.payload_bytes);
    if (config.text_payload) {
      FillText(Pattern(), payload_.data(), payload_.size());
    } else {
      FillPattern(Pattern(), payload_.data(), payload_.size());
    }
    out_.set_payload(payload_);
    if (sidecar_.size > 0) sidecars_.push_back(sidecar_.block_slice());
  }

  // Opens the stream and starts its reader and writer. Main thread.
  void Open(const BenchServiceProxy& proxy, const rpc::StreamOptions& options,
            const std::shared_ptr<StreamClient>& self) {
    switch (config_.stream_direction) {
      case StreamDirection::kDown: {
        StreamOpenPB open;
        open.set_payload_bytes(static_cast<uint32_t>(config_.payload_bytes));
        if (config_.sidecar_bytes > 0) {
          open.set_sidecar_bytes(static_cast<uint32_t>(config_.sidecar_bytes));
        }
        open.set_pattern(Pattern());
        if (config_.text_payload) open.set_text(true);
        stream_ = proxy.Download(open, options).untyped();
        Drain(self);
        break;
      }
      case StreamDirection::kUp:
        stream_ = proxy.Upload(options).untyped();
        Pump(self);
        break;
      case StreamDirection::kBidi:
        stream_ = proxy.Exchange(options).untyped();
        Pump(self);
        Drain(self);
        break;
    }
  }

  // Main thread, once the run stopped: ends the stream and checks how it ended. Down: cancels.
  // Up and bidi: waits for the server's answer to the writer's half-close (bounded by the
  // stream's deadline) and checks it against what was sent.
  Status Finish() {
    if (config_.stream_direction == StreamDirection::kDown || control_->failed()) {
      stream_.Cancel();
      return Status::OK();
    }
    Status s = stream_.AwaitEnd();
    if (!s.ok()) return s.CloneAndPrepend(Name() + " ended");
    if (config_.stream_direction == StreamDirection::kUp) {
      StreamTotalsPB totals;
      if (stream_.final_response() != nullptr) totals.CopyFrom(*stream_.final_response());
      const uint64_t bytes = sent_ * (config_.payload_bytes + config_.sidecar_bytes);
      if (totals.messages() != sent_ || totals.bytes() != bytes) {
        return Status::Corruption(Name() + ": the server counted " +
                                  std::to_string(totals.messages()) + " messages, " +
                                  std::to_string(totals.bytes()) + " bytes; sent " +
                                  std::to_string(sent_) + ", " + std::to_string(bytes));
      }
    } else if (!reader_done_.WaitFor(config_.call_timeout)) {
      // The server's answer came after its last echo; the reader may still be draining them.
      return Status::TimedOut(Name() + ": the reader never saw the stream's end");
    } else if (received_ != sent_) {
      return Status::Corruption(Name() + ": " + std::to_string(sent_) + " sent, " +
                                std::to_string(received_) + " echoed");
    }
    return Status::OK();
  }

  // Once the client messenger is shut down.
  uint64_t window_messages() const { return window_messages_; }
  uint64_t window_bytes() const { return window_messages_ * MessageBytes(); }
  const Histogram& latency_ns() const { return latency_ns_; }

 private:
  uint64_t Pattern() const { return static_cast<uint64_t>(index_); }
  size_t MessageBytes() const { return config_.payload_bytes + config_.sidecar_bytes; }
  std::string Name() const { return "stream " + std::to_string(index_); }

  // The writer: queues messages until the window is full or the run stops.
  static void Pump(const std::shared_ptr<StreamClient>& self) {
    bool was_ready = false;  // OnWritable said ready at once: a second kFull parks (RetryParker)
    while (true) {
      if (self->control_->stopping()) {
        self->stream_.CloseWrites();
        return;
      }
      self->out_.set_seq(self->sent_);
      self->out_.set_sent_ns(static_cast<uint64_t>(MonoTime::Now().ToNanoseconds()));
      switch (self->stream_.TryWrite(self->out_, self->sidecars_)) {
        case rpc::StreamWrite::kQueued:
          self->sent_++;
          was_ready = false;
          // Up: what the client queued is what it measures (the window keeps it within one
          // window of what the server consumed).
          if (self->config_.stream_direction == StreamDirection::kUp &&
              self->control_->measuring()) {
            self->window_messages_++;
          }
          continue;
        case rpc::StreamWrite::kFull:
          if (was_ready) {
            self->parker_->Park([self] { Pump(self); });
            return;
          }
          if (ResumeWhenReady([&](auto cb) { self->stream_.OnWritable(std::move(cb)); },
                              [self] { Pump(self); })) {
            was_ready = true;
            continue;
          }
          return;
        case rpc::StreamWrite::kClosed:
          if (!self->control_->stopping()) {
            self->control_->Fail(self->stream_.status().CloneAndPrepend(
                self->Name() + " closed for writing before the run ended"));
          }
          return;
      }
    }
  }

  // The reader: checks and counts each message until the stream is empty or ends.
  static void Drain(const std::shared_ptr<StreamClient>& self) {
    rpc::StreamMessage m;
    while (true) {
      switch (self->stream_.TryRead(&m)) {
        case rpc::StreamRead::kMessage: {
          const MonoTime now = MonoTime::Now();
          Status s = self->Check(m);
          if (!s.ok()) {
            self->control_->Fail(s.CloneAndPrepend(self->Name()));
            self->stream_.Cancel();
            self->reader_done_.CountDown();
            return;
          }
          if (self->control_->measuring()) {
            self->window_messages_++;
            self->latency_ns_.Record(static_cast<uint64_t>(std::max<int64_t>(
                0, now.ToNanoseconds() - static_cast<int64_t>(self->in_.sent_ns()))));
          }
          continue;
        }
        case rpc::StreamRead::kEmpty:
          if (ResumeWhenReady([&](auto cb) { self->stream_.OnReadable(std::move(cb)); },
                              [self] { Drain(self); })) {
            continue;
          }
          return;
        case rpc::StreamRead::kEnd:
          if (!self->control_->stopping()) {
            Status s = self->stream_.status();
            self->control_->Fail((s.ok() ? Status::IllegalState("the server ended it") : s)
                                     .CloneAndPrepend(self->Name() + " ended before the run did"));
          }
          self->reader_done_.CountDown();
          return;
      }
    }
  }

  // One message read: the next seq, the pattern's payload and sidecar.
  Status Check(const rpc::StreamMessage& m) {
    if (!in_.ParseFromArray(m.body.slice.data(), static_cast<int>(m.body.slice.size()))) {
      return Status::Corruption("message " + std::to_string(received_) + " does not parse");
    }
    if (in_.seq() != received_) {
      return Status::Corruption("message " + std::to_string(in_.seq()) + " came where " +
                                std::to_string(received_) + " was due");
    }
    received_++;
    if (in_.payload().size() != payload_.size() ||
        memcmp(in_.payload().data(), payload_.data(), payload_.size()) != 0) {
      return Status::Corruption("message " + std::to_string(in_.seq()) + ": wrong payload (" +
                                std::to_string(in_.payload().size()) + " B)");
    }
    const size_t want_sidecars = sidecar_.size > 0 ? 1 : 0;
    if (m.sidecars.size() != want_sidecars) {
      return Status::Corruption("message " + std::to_string(in_.seq()) + " has " +
                                std::to_string(m.sidecars.size()) + " sidecars");
    }
    if (want_sidecars == 1) {
      const Slice got = m.sidecars[0].slice;
      if (got.size() != sidecar_.size || memcmp(got.data(), sidecar_.data(), sidecar_.size) != 0) {
        return Status::Corruption("message " + std::to_string(in_.seq()) + ": wrong sidecar");
      }
    }
    return Status::OK();
  }

  const BenchConfig& config_;
  RunControl* const control_;
  RetryParker* const parker_;
  const int index_;
  rpc::Stream stream_;  // set by Open before any callback
  std::string payload_;
  SidecarBlock sidecar_;  // never changed once filled: shared by every message in flight
  std::vector<BlockSlice> sidecars_;
  // The writer's (one Pump at a time).
  StreamChunkPB out_;
  uint64_t sent_ = 0;
  // The reader's (one Drain at a time).
  StreamChunkPB in_;
  uint64_t received_ = 0;
  Histogram latency_ns_{LatencyRecorders::kMaxLatencyNs};
  // The reader's (down, bidi) or the writer's (up).
  uint64_t window_messages_ = 0;
  // Counted down when the reader is done (the stream's end, or a wrong message); bidi's Finish
  // waits for it before it compares received_ with sent_.
  CountDownLatch reader_done_{1};
};

}  // namespace

Status RunStreamMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client,
                        NewClientMessenger(config, "client"));
  Result<BenchServiceProxy> proxy = NewBenchProxy(config, client);
  if (!proxy.ok()) {
    client->Shutdown();
    return proxy.status();
  }
  rpc::StreamOptions options;
  // Bounds the wait for the server's final answer if it never comes.
  options.timeout =
      MonoDelta::FromSeconds(config.warmup_seconds + config.run_seconds) + config.call_timeout;
  RetryParker parker;
  std::vector<std::shared_ptr<StreamClient>> streams;
  for (int i = 0; i < config.streams; i++) {
    auto stream = std::make_shared<StreamClient>(config, control, &parker, i);
    stream->Open(*proxy, options, stream);
    streams.push_back(std::move(stream));
  }
  std::unique_ptr<UnaryProbe> probe;
  if (config.with_unary_probe) {
    Result<std::unique_ptr<UnaryProbe>> started = UnaryProbe::Start(config, *proxy, control);
    if (started.ok()) {
      probe = std::move(started).value();
    } else {
      control->Fail(started.status());
    }
  }
  if (!control->failed()) {
    control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                       &out->window_end);
    out->measured = control->measured();
  }
  control->Stop();
  for (const auto& stream : streams) {
    Status s = stream->Finish();
    if (!s.ok()) control->Fail(s);
  }
  parker.Stop();
  if (probe && !probe->WaitIdle()) {
    control->Fail(Status::TimedOut("the probe's call still in flight long after the run stopped"));
  }
  // Joins the client reactors: no callback runs after this, so the counters are quiet.
  client->Shutdown();
  for (const auto& stream : streams) {
    out->completed += stream->window_messages();
    out->stream_bytes += stream->window_bytes();
    out->latency_ns.Merge(stream->latency_ns());
  }
  if (probe) probe->Merge(&out->probe_completed, &out->probe_latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
