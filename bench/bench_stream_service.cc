// The stream methods of rpc-bench's service (bench_service.h). Each handler makes a small state
// object shared by its callbacks and returns: the stream then goes on from OnWritable and
// OnReadable callbacks on the server's reactor threads, never holding a worker.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "bench/bench_service.h"
#include "bench/bench_stream_ready.h"

namespace rrpc::bench {

namespace {

// Download: the same payload (and sidecar block, shared, never changed) in every message; only
// seq and sent_ns differ.
struct Downloader {
  Downloader(const StreamOpenPB& open, rpc::ServerStream<StreamOpenPB, StreamChunkPB>&& s,
             RetryParker* parker)
      : parker(parker),
        stream(std::move(s)),
        sidecar(open.pattern() + (1ULL << 32), open.sidecar_bytes()) {
    std::string* payload = chunk.mutable_payload();
    payload->resize(open.payload_bytes());
    if (open.text()) {
      FillText(open.pattern(), payload->data(), payload->size());
    } else {
      FillPattern(open.pattern(), payload->data(), payload->size());
    }
    if (sidecar.size > 0) sidecars.push_back(sidecar.block_slice());
  }

  // Writes until the window is full (then resumes from OnWritable) or the client cancels.
  static void Pump(const std::shared_ptr<Downloader>& self) {
    bool was_ready = false;  // OnWritable said ready at once: a second kFull parks (RetryParker)
    while (true) {
      self->chunk.set_seq(self->seq);
      self->chunk.set_sent_ns(static_cast<uint64_t>(MonoTime::Now().ToNanoseconds()));
      switch (self->stream.TryWrite(self->chunk, self->sidecars)) {
        case rpc::StreamWrite::kQueued:
          self->seq++;
          was_ready = false;
          continue;
        case rpc::StreamWrite::kFull:
          if (was_ready) {
            self->parker->Park([self] { Pump(self); });
            return;
          }
          if (ResumeWhenReady([&](auto cb) { self->stream.OnWritable(std::move(cb)); },
                              [self] { Pump(self); })) {
            was_ready = true;
            continue;
          }
          return;
        case rpc::StreamWrite::kClosed:
          return;  // cancelled by the client (the run's end), or its connection went
      }
    }
  }

  RetryParker* const parker;  // the service's
  rpc::ServerStream<StreamOpenPB, StreamChunkPB> stream;
  StreamChunkPB chunk;
  SidecarBlock sidecar;
  std::vector<BlockSlice> sidecars;
  uint64_t seq = 0;  // one pump runs at a time (it registers its continuation last)
};

struct Uploader {
  explicit Uploader(rpc::ServerStream<StreamChunkPB, StreamTotalsPB>&& s) : stream(std::move(s)) {}

  static void Drain(const std::shared_ptr<Uploader>& self) {
    StreamChunkPB chunk;
    std::vector<BlockSlice> sidecars;
    while (true) {
      Result<rpc::StreamRead> r = self->stream.TryRead(&chunk, &sidecars);
      if (!r.ok()) return;  // does not parse: TryRead ended the stream
      switch (*r) {
        case rpc::StreamRead::kMessage:
          if (chunk.seq() != self->totals.messages()) {
            self->stream.Finish(
                Status::InvalidArgument("message " + std::to_string(chunk.seq()) + " came where " +
                                        std::to_string(self->totals.messages()) + " was due"));
            return;
          }
          self->totals.set_messages(self->totals.messages() + 1);
          self->totals.set_bytes(self->totals.bytes() + chunk.payload().size());
          for (const BlockSlice& s : sidecars) {
            self->totals.set_bytes(self->totals.bytes() + s.slice.size());
          }
          continue;
        case rpc::StreamRead::kEmpty:
          if (ResumeWhenReady([&](auto cb) { self->stream.OnReadable(std::move(cb)); },
                              [self] { Drain(self); })) {
            continue;
          }
          return;
        case rpc::StreamRead::kEnd:
          // OK: the client's half-close; otherwise the stream ended already.
          if (self->stream.status().ok()) self->stream.Finish(self->totals);
          return;
      }
    }
  }

  rpc::ServerStream<StreamChunkPB, StreamTotalsPB> stream;
  StreamTotalsPB totals;  // one drain runs at a time
};

struct Echoer {
  Echoer(rpc::ServerStream<StreamChunkPB, StreamChunkPB>&& s, RetryParker* parker)
      : parker(parker), stream(std::move(s)) {}

  // Reads a message, writes it back (waiting for room first), reads the next.
  static void Run(const std::shared_ptr<Echoer>& self) {
    bool was_ready = false;  // as in Downloader::Pump
    while (true) {
      if (self->has_pending) {
        switch (self->stream.TryWrite(self->pending, self->pending_sidecars)) {
          case rpc::StreamWrite::kQueued:
            self->has_pending = false;
            self->pending_sidecars.clear();
            was_ready = false;
            break;
          case rpc::StreamWrite::kFull:
            if (was_ready) {
              self->parker->Park([self] { Run(self); });
              return;
            }
            if (ResumeWhenReady([&](auto cb) { self->stream.OnWritable(std::move(cb)); },
                                [self] { Run(self); })) {
              was_ready = true;
              continue;
            }
            return;
          case rpc::StreamWrite::kClosed:
            return;
        }
      }
      Result<rpc::StreamRead> r = self->stream.TryRead(&self->pending, &self->pending_sidecars);
      if (!r.ok()) return;
      switch (*r) {
        case rpc::StreamRead::kMessage:
          self->has_pending = true;
          continue;
        case rpc::StreamRead::kEmpty:
          if (ResumeWhenReady([&](auto cb) { self->stream.OnReadable(std::move(cb)); },
                              [self] { Run(self); })) {
            continue;
          }
          return;
        case rpc::StreamRead::kEnd:
          if (self->stream.status().ok()) self->stream.Finish();
          return;
      }
    }
  }

  RetryParker* const parker;
  rpc::ServerStream<StreamChunkPB, StreamChunkPB> stream;
  StreamChunkPB pending;
  std::vector<BlockSlice> pending_sidecars;
  bool has_pending = false;  // one Run at a time
};

}  // namespace

void BenchEchoService::Download(const StreamOpenPB* req,
                                rpc::ServerStream<StreamOpenPB, StreamChunkPB> stream) {
  Downloader::Pump(std::make_shared<Downloader>(*req, std::move(stream), &parker_));
}

void BenchEchoService::Upload(rpc::ServerStream<StreamChunkPB, StreamTotalsPB> stream) {
  Uploader::Drain(std::make_shared<Uploader>(std::move(stream)));
}

void BenchEchoService::Exchange(rpc::ServerStream<StreamChunkPB, StreamChunkPB> stream) {
  Echoer::Run(std::make_shared<Echoer>(std::move(stream), &parker_));
}

}  // namespace rrpc::bench
