#include "rpc/core/fault_injection.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "rrpc/rpc/service_if.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

void FaultInjector::set_spec(const FaultSpec& spec) {
  MutexLock l(mu_);
  spec_ = spec;
}

FaultSpec FaultInjector::spec() const {
  MutexLock l(mu_);
  return spec_;
}

FaultCounts FaultInjector::counts() const {
  auto get = [this](Kind k) {
    return counts_[static_cast<int>(k)].load(std::memory_order_relaxed);
  };
  FaultCounts c;
  c.delayed_reads = get(Kind::kDelayedRead);
  c.dropped_reads = get(Kind::kDroppedRead);
  c.cut_reads = get(Kind::kCutRead);
  c.delayed_writes = get(Kind::kDelayedWrite);
  c.cut_writes = get(Kind::kCutWrite);
  c.failed_accepts = get(Kind::kFailedAccept);
  c.failed_connects = get(Kind::kFailedConnect);
  c.slowed_handlers = get(Kind::kSlowedHandler);
  return c;
}

bool FaultInjector::Roll(double p) {
  if (p <= 0) return false;
  if (p >= 1) return true;
  // splitmix64 over a shared counter: lock-free, and one thread's sequence repeats per seed.
  uint64_t z = rng_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < p;
}

void FaultInjector::BeforeHandler() {
  const FaultSpec s = spec();
  if (!Roll(s.slow_handler)) return;
  Count(Kind::kSlowedHandler);
  SleepFor(s.handler_delay);
}

void FaultInjector::SlowWorkerHandlers(ServiceIf* service) {
  for (auto& [method_name, info] : service->methods_) {
    if (info->run_inline) continue;
    info->handler = [this, handler = std::move(info->handler)](
                        const google::protobuf::Message* request,
                        google::protobuf::Message* response, RpcContext* context) {
      BeforeHandler();
      handler(request, response, context);
    };
  }
}

namespace {

// The first `n` bytes waiting in a write queue, copied, as one transfer: what a cut write sends.
class PrefixTransfer final : public OutboundTransfer {
 public:
  PrefixTransfer(const TransferQueue& queue, size_t n) {
    BlockRef block = Block::Allocate(n);
    iovec iov[64];
    const int count = queue.GatherIovecs(iov, 64, n);
    size_t copied = 0;
    for (int i = 0; i < count && copied < n; i++) {
      const size_t take = std::min(n - copied, iov[i].iov_len);
      memcpy(block->data() + copied, iov[i].iov_base, take);
      copied += take;
    }
    SetPayload(BlockSlice{block, Slice(block->data(), copied)}, {});
  }
  void TransferDone() override {}
  void TransferAborted(const Status&) override {}
};

// At most `max_bytes`.
size_t QueuedBytes(const TransferQueue& queue, size_t max_bytes) {
  iovec iov[64];
  const int count = queue.GatherIovecs(iov, 64, max_bytes);
  size_t total = 0;
  for (int i = 0; i < count; i++) total += iov[i].iov_len;
  return total;
}

// A transport under fault injection: the real one inside, faults rolled per frame and per write.
// Reports concurrent_write = false, so every Write() runs on the reactor thread, where its timers
// live. Reactor thread only.
class FaultyTransport final : public Transport, private TransportHost {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, std::shared_ptr<FaultInjector> faults,
                  bool fail_at_start)
      : inner_(std::move(inner)), faults_(std::move(faults)), fail_at_start_(fail_at_start) {
    faults_->TransportCreated();
  }
  ~FaultyTransport() override {
    Close();
    faults_->TransportDestroyed();
  }

  const char* name() const override { return inner_->name(); }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps = inner_->capabilities();
    caps.concurrent_write = false;
    return caps;
  }

  void Start(struct ev_loop* loop, TransportHost* host) override {
    loop_ = loop;
    host_ = host;
    ev_timer_init(&read_timer_, &FaultyTransport::OnReadTimer, 0, 0);
    read_timer_.data = this;
    ev_timer_init(&write_timer_, &FaultyTransport::OnWriteTimer, 0, 0);
    write_timer_.data = this;
    ev_timer_init(&fail_timer_, &FaultyTransport::OnFailTimer, 0, 0);
    fail_timer_.data = this;
    inner_->Start(loop, this);
    if (fail_at_start_) {
      // An accept that "failed": the socket closes at once; the host hears of it on the next
      // loop iteration, not from inside its own Start().
      Cut();
      ev_timer_start(loop_, &fail_timer_);
    }
  }
  Status ExpectPreamble(size_t bytes) override { return inner_->ExpectPreamble(bytes); }

  Result<size_t> Write(const TransferQueue& queue, size_t max_bytes) override {
    if (cut_) return Status::NetworkError("connection cut by fault injection");
    if (ev_is_active(&write_timer_)) return size_t{0};
    const FaultSpec spec = faults_->spec();
    if (faults_->Roll(spec.delay_write)) {
      faults_->Count(FaultInjector::Kind::kDelayedWrite);
      ev_timer_set(&write_timer_, spec.write_delay.ToSeconds(), 0);
      ev_timer_start(loop_, &write_timer_);
      inner_->NotifyWhenWritable(false);
      return size_t{0};
    }
    const size_t queued = QueuedBytes(queue, max_bytes);
    size_t cut_at = 0;  // write this many bytes, then cut; 0: no cut
    if (spec.cut_after_bytes_written > 0 &&
        bytes_written_ + queued > spec.cut_after_bytes_written) {
      cut_at = std::max<uint64_t>(
          spec.cut_after_bytes_written - std::min(bytes_written_, spec.cut_after_bytes_written), 1);
    } else if (queued > 1 && faults_->Roll(spec.cut_write)) {
      cut_at = queued / 2;
    }
    if (cut_at > 0 && cut_at < queued) {
      faults_->Count(FaultInjector::Kind::kCutWrite);
      TransferQueue prefix_queue;
      PrefixTransfer prefix(queue, cut_at);
      prefix_queue.push_back(&prefix);
      Result<size_t> w = inner_->Write(prefix_queue, max_bytes);
      prefix_queue.pop_front();
      Cut();  // the connection's next Write() fails, and it shuts down
      if (!w.ok() || *w == 0) return Status::NetworkError("connection cut by fault injection");
      bytes_written_ += *w;
      return *w;
    }
    Result<size_t> w = inner_->Write(queue, max_bytes);
    if (w.ok()) bytes_written_ += *w;
    return w;
  }

  void NotifyWhenWritable(bool on) override {
    wants_writable_ = on;
    if (!ev_is_active(&write_timer_)) inner_->NotifyWhenWritable(on);
  }
  void PauseReading(bool paused) override {
    host_paused_ = paused;
    if (!cut_) inner_->PauseReading(paused || !held_.empty());
  }
  Result<DetachedStream> Detach() override {
    if (cut_) return Status::IllegalState("connection cut by fault injection");
    StopTimers();
    return inner_->Detach();
  }
  void Close() override {
    StopTimers();
    held_.clear();
    inner_->Close();
  }
  void Describe(std::vector<std::pair<std::string, std::string>>* out) const override {
    inner_->Describe(out);
    out->emplace_back("fault_injection", "on");
  }

 private:
  // ---- From the inner transport.
  void OnTransportConnected() override { host_->OnTransportConnected(); }
  void OnBytesReceived(size_t bytes, MonoTime now) override { host_->OnBytesReceived(bytes, now); }
  void OnPreamble(Slice preamble) override { host_->OnPreamble(preamble); }
  void OnWritable() override {
    if (!ev_is_active(&write_timer_)) host_->OnWritable();
  }
  void OnTransportFailed(const Status& reason) override { host_->OnTransportFailed(reason); }
  void OnProtocolError(const Status& reason) override { host_->OnProtocolError(reason); }

  void OnFrame(BlockSlice&& frame) override {
    if (cut_) return;
    frames_seen_++;
    if (!held_.empty()) {  // behind a delayed frame: keep the order
      held_.push_back(std::move(frame));
      return;
    }
    const FaultSpec spec = faults_->spec();
    if (frames_seen_ > 1 && faults_->Roll(spec.drop_read)) {
      faults_->Count(FaultInjector::Kind::kDroppedRead);
      return;
    }
    if (faults_->Roll(spec.cut_read)) {
      faults_->Count(FaultInjector::Kind::kCutRead);
      Cut();
      host_->OnTransportFailed(Status::NetworkError("connection cut by fault injection"));
      return;
    }
    if (faults_->Roll(spec.delay_read)) {
      faults_->Count(FaultInjector::Kind::kDelayedRead);
      held_.push_back(std::move(frame));
      inner_->PauseReading(true);
      ev_timer_set(&read_timer_, spec.read_delay.ToSeconds(), 0);
      ev_timer_start(loop_, &read_timer_);
      return;
    }
    host_->OnFrame(std::move(frame));
  }

  // ---- Timers (reactor thread).
  static void OnReadTimer(struct ev_loop*, ev_timer* w, int) {
    auto* self = static_cast<FaultyTransport*>(w->data);
    std::deque<BlockSlice> frames;
    frames.swap(self->held_);
    // The host may close (even destroy the connection's last use of) this transport in any
    // callback: stop as soon as it closed.
    while (!frames.empty() && !self->closed_by_host()) {
      BlockSlice f = std::move(frames.front());
      frames.pop_front();
      self->host_->OnFrame(std::move(f));
    }
    if (!self->closed_by_host()) self->inner_->PauseReading(self->host_paused_);
  }
  static void OnWriteTimer(struct ev_loop*, ev_timer* w, int) {
    auto* self = static_cast<FaultyTransport*>(w->data);
    if (self->wants_writable_ && !self->cut_) self->host_->OnWritable();
  }
  static void OnFailTimer(struct ev_loop*, ev_timer* w, int) {
    auto* self = static_cast<FaultyTransport*>(w->data);
    self->host_->OnTransportFailed(Status::NetworkError("accept failed by fault injection"));
  }

  // Closes the real connection: the peer sees it end, wherever its frames were.
  void Cut() {
    cut_ = true;
    held_.clear();
    inner_->Close();
  }
  bool closed_by_host() const { return closed_ || cut_; }
  void StopTimers() {
    closed_ = true;
    if (loop_ == nullptr) return;
    ev_timer_stop(loop_, &read_timer_);
    ev_timer_stop(loop_, &write_timer_);
    ev_timer_stop(loop_, &fail_timer_);
  }

  std::unique_ptr<Transport> inner_;
  const std::shared_ptr<FaultInjector> faults_;
  const bool fail_at_start_;
  struct ev_loop* loop_ = nullptr;
  TransportHost* host_ = nullptr;
  ev_timer read_timer_;
  ev_timer write_timer_;
  ev_timer fail_timer_;
  std::deque<BlockSlice> held_;  // frames delayed by a read fault, in arrival order
  uint64_t frames_seen_ = 0;
  uint64_t bytes_written_ = 0;
  bool host_paused_ = false;
  bool wants_writable_ = false;
  bool cut_ = false;
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<Transport> FaultInjectingTransportFactory::NewServerTransport(Socket accepted) {
  const bool fail = faults_->Roll(faults_->spec().fail_accept);
  if (fail) faults_->Count(FaultInjector::Kind::kFailedAccept);
  return std::make_unique<FaultyTransport>(inner_->NewServerTransport(std::move(accepted)), faults_,
                                           fail);
}

Result<std::unique_ptr<Transport>> FaultInjectingTransportFactory::NewClientTransport(
    const Sockaddr& remote) {
  if (faults_->Roll(faults_->spec().fail_connect)) {
    faults_->Count(FaultInjector::Kind::kFailedConnect);
    return Status::NetworkError("connect failed by fault injection", remote.ToString());
  }
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> inner, inner_->NewClientTransport(remote));
  return std::unique_ptr<Transport>(std::make_unique<FaultyTransport>(std::move(inner), faults_,
                                                                      /*fail_at_start=*/false));
}

}  // namespace rrpc::rpc
