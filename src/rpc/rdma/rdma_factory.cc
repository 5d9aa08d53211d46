#include "rpc/rdma/rdma_factory.h"

#include <glog/logging.h>

#include <algorithm>

#include "rpc/rdma/async_events.h"
#include "rpc/rdma/bootstrap/rdma_upgrade.h"
#include "rpc/rdma/memlock.h"
#include "rpc/transport/reactor_thread.h"
#include "util/metrics/counter.h"
#include "util/metrics/histogram_metric.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rdma {
namespace {

constexpr MetricPrototype METRIC_rdma_fallbacks_total = MetricPrototype::Counter(
    "rdma_fallbacks_total", "RDMA fallbacks", MetricUnit::kConnections,
    "Connections that stayed on TCP instead of upgrading to RDMA, by reason (the entity id).");
constexpr MetricPrototype METRIC_rdma_inline_send_bytes = MetricPrototype::Histogram(
    "rdma_inline_send_bytes", "RDMA inline sends", MetricUnit::kBytes,
    "Sizes of RDMA messages sent inline (copied into the work request; no DMA read).", 1 << 20);
constexpr MetricPrototype METRIC_rdma_srq_posted_receives =
    MetricPrototype::Gauge("rdma_srq_posted_receives", "SRQ posted receives", MetricUnit::kEntries,
                           "Receive buffers posted in the reactor's shared receive queue.");
constexpr MetricPrototype METRIC_rdma_srq_pool_bytes = MetricPrototype::Gauge(
    "rdma_srq_pool_bytes", "SRQ receive pool", MetricUnit::kBytes,
    "Registered receive memory of the reactor's shared receive queue (capped by "
    "rdma_srq_max_memory).");
constexpr MetricPrototype METRIC_rdma_srq_grants_outstanding = MetricPrototype::Gauge(
    "rdma_srq_grants_outstanding", "SRQ grants outstanding", MetricUnit::kEntries,
    "Credits granted to peers (held or owed), never above posted receives minus the reserve.");
constexpr MetricPrototype METRIC_rdma_srq_credit_waits = MetricPrototype::Gauge(
    "rdma_srq_credit_waits", "SRQ credit waits", MetricUnit::kUnits,
    "Times a peer's credit top-up had to wait for the pool (since the reactor's SRQ was made).");
constexpr MetricPrototype METRIC_rdma_srq_pool_growths =
    MetricPrototype::Gauge("rdma_srq_pool_growths", "SRQ pool growths", MetricUnit::kUnits,
                           "Chunks of receive blocks added to the reactor's pool after the first.");
constexpr MetricPrototype METRIC_rdma_srq_connections =
    MetricPrototype::Gauge("rdma_srq_connections", "SRQ connections", MetricUnit::kConnections,
                           "RDMA connections receiving from the reactor's shared receive queue.");
constexpr MetricPrototype METRIC_rdma_srq_limit_events = MetricPrototype::Gauge(
    "rdma_srq_limit_events", "SRQ limit events", MetricUnit::kUnits,
    "Times the reactor's SRQ limit event fired (posted receives below a quarter of the pool); "
    "each grows the pool by a chunk within rdma_srq_max_memory.");
constexpr MetricPrototype METRIC_rdma_srq_reclaims = MetricPrototype::Gauge(
    "rdma_srq_reclaims", "SRQ reclaims", MetricUnit::kUnits,
    "Idle peers asked to give back their credits above rdma_srq_floor_credits.");
constexpr MetricPrototype METRIC_rdma_srq_credits_reclaimed = MetricPrototype::Gauge(
    "rdma_srq_credits_reclaimed", "SRQ credits reclaimed", MetricUnit::kEntries,
    "Credits idle peers gave back to the reactor's ledger.");
constexpr MetricPrototype METRIC_rdma_srq_background_growths = MetricPrototype::Gauge(
    "rdma_srq_background_growths", "SRQ background growths", MetricUnit::kUnits,
    "Chunks of receive blocks allocated and registered off the reactor thread.");
constexpr MetricPrototype METRIC_rdma_posted_send_bytes = MetricPrototype::Histogram(
    "rdma_posted_send_bytes", "RDMA non-inline sends", MetricUnit::kBytes,
    "Sizes of RDMA messages sent from registered memory (not inline).", 1 << 20);

constexpr MetricPrototype METRIC_rdma_upgrades_total = MetricPrototype::Counter(
    "rdma_upgrades_total", "RDMA upgrades", MetricUnit::kConnections,
    "Connections upgraded from TCP to RDMA after the bootstrap (the others fell back: "
    "rdma_fallbacks_total).");
constexpr MetricPrototype METRIC_rdma_credit_waits_total = MetricPrototype::Counter(
    "rdma_credit_waits_total", "RDMA credit waits", MetricUnit::kUnits,
    "Times an RDMA connection had bytes to send and no credit to spend (it waits for a grant).");
constexpr MetricPrototype METRIC_rdma_credit_slow_grants_total = MetricPrototype::Counter(
    "rdma_credit_slow_grants_total", "RDMA slow credit grants", MetricUnit::kUnits,
    "Times an RDMA connection still waited for credits when rdma_credit_starved_timeout ran out "
    "but had been granted some meanwhile, so its peer was not declared dead: a peer slow to "
    "grant, near that timeout.");
constexpr MetricPrototype METRIC_rdma_sent_bytes_total =
    MetricPrototype::Counter("rdma_sent_bytes_total", "RDMA bytes sent", MetricUnit::kBytes,
                             "Bytes of RDMA messages posted, headers included.");
constexpr MetricPrototype METRIC_rdma_received_bytes_total =
    MetricPrototype::Counter("rdma_received_bytes_total", "RDMA bytes received", MetricUnit::kBytes,
                             "Bytes of RDMA messages received, headers included.");
constexpr MetricPrototype METRIC_rdma_zero_copy_messages_total = MetricPrototype::Counter(
    "rdma_zero_copy_messages_total", "RDMA messages by reference", MetricUnit::kMessages,
    "Received RDMA messages whose frames went up to the calls in their receive block (no copy).");
constexpr MetricPrototype METRIC_rdma_copied_no_spare_total = MetricPrototype::Counter(
    "rdma_copied_no_spare_total", "RDMA copies, no spare", MetricUnit::kMessages,
    "Large RDMA messages copied out because calls held every spare receive block.");
constexpr MetricPrototype METRIC_rdma_zero_copy_sent_bytes_total = MetricPrototype::Counter(
    "rdma_zero_copy_sent_bytes_total", "RDMA bytes sent by reference", MetricUnit::kBytes,
    "Payload bytes RDMA sends read where they were (a registered Block: an echoed receive block, "
    "or a sidecar registered for its lifetime), without a copy.");
constexpr MetricPrototype METRIC_rdma_copied_sent_bytes_total = MetricPrototype::Counter(
    "rdma_copied_sent_bytes_total", "RDMA bytes sent copied", MetricUnit::kBytes,
    "Payload bytes copied into registered send blocks before sending (small pieces, borrowed "
    "sidecars, unregistered blocks below --rdma_register_min_bytes).");
constexpr MetricPrototype METRIC_rdma_send_registrations_total = MetricPrototype::Counter(
    "rdma_send_registrations_total", "RDMA send registrations", MetricUnit::kUnits,
    "Blocks registered with the device on their first zero-copy send (deregistered when freed).");

// What the device's watcher does with each async event of `ctx` (on its thread): connections'
// events to them (private-RQ and SRQ), a device fatal to the factory too (AsyncEventRouter), a
// port coming up counted in `activations` (the factory then forgets its dead paths). The port
// itself was read again by NextAsyncEvent.
DeviceEventWatcher::Handler EventHandler(Context* ctx,
                                         std::shared_ptr<std::atomic<uint64_t>> activations) {
  return [ctx, activations = std::move(activations)](const AsyncEvent& event) {
    AsyncEventRouter::Deliver(ctx, event);
    SrqContext::DeliverAsyncEvent(ctx, event);
    switch (event.type) {
      case AsyncEventType::kDeviceFatal:
        LOG(WARNING) << "RDMA device " << ctx->device_name() << " reported a fatal error";
        break;
      case AsyncEventType::kPortError:
        LOG(WARNING) << "RDMA device " << ctx->device_name() << ": port " << ctx->port().port
                     << " down; new connections stay on TCP until it is up";
        break;
      case AsyncEventType::kPortActive:
        activations->fetch_add(1, std::memory_order_release);
        LOG(INFO) << "RDMA device " << ctx->device_name() << ": port " << ctx->port().port
                  << " active";
        break;
      case AsyncEventType::kGidChange:
      case AsyncEventType::kLidChange: {
        const PortInfo port = ctx->port();
        LOG(INFO) << "RDMA device " << ctx->device_name() << ": port " << port.port
                  << (event.type == AsyncEventType::kGidChange ? " GID table" : " LID")
                  << " changed (LID " << port.lid << ", " << port.gid_table.size()
                  << " GID entries); new connections use it";
        break;
      }
      default:
        break;
    }
  };
}

// The TCP connection every RDMA connection starts on (and falls back to).
rpc::StreamTransportOptions StreamOptionsFor(const RdmaOptions& options) {
  rpc::StreamTransportOptions stream;
  stream.max_frame_size = options.transport.max_frame_size;
  return stream;
}

}  // namespace

std::shared_ptr<rpc::TransportFactory> NewRdmaTransportFactory(RdmaOptions options) {
  return std::make_shared<RdmaTransportFactory>(std::move(options));
}

Status ProbeRdmaDevice(const RdmaOptions& options) {
  if (options.backend == RdmaBackend::kSoft) return Status::OK();
  return OpenVerbsDevice(options.verbs).status();
}

RdmaTransportFactory::RdmaTransportFactory(RdmaOptions options, DeviceOpener open_device)
    : options_(std::move(options)),
      open_device_(std::move(open_device)),
      tcp_(std::make_shared<rpc::TcpTransportFactory>(StreamOptionsFor(options_))) {
  MetricRegistry* registry = options_.metric_registry;
  if (registry == nullptr) {
    owned_registry_ = std::make_shared<MetricRegistry>();
    registry = owned_registry_.get();
  }
  bound_ = BindMetrics(registry);
  if (options_.setup_off_reactor) {
    setup_ = std::make_shared<SetupThread>(std::max<size_t>(1, options_.setup_threads),
                                           std::max<size_t>(1, options_.setup_queue));
  }
}

void RdmaTransportFactory::UseMetricRegistry(MetricRegistry* registry) {
  if (options_.metric_registry != nullptr || registry == nullptr) return;
  std::shared_ptr<BoundMetrics> next = BindMetrics(registry);
  MutexLock lock(mu_);
  bound_ = std::move(next);
}

void RdmaTransportFactory::UseDeadPeerSettings(const rpc::StreamTransportOptions& stream) {
  rpc::StreamTransportOptions mine = StreamOptionsFor(options_);
  mine.keepalive_idle = stream.keepalive_idle;
  mine.keepalive_interval = stream.keepalive_interval;
  mine.keepalive_count = stream.keepalive_count;
  mine.user_timeout = stream.user_timeout;
  auto next = std::make_shared<rpc::TcpTransportFactory>(mine);
  MutexLock lock(mu_);
  tcp_ = std::move(next);
}

std::shared_ptr<rpc::TcpTransportFactory> RdmaTransportFactory::tcp() const {
  MutexLock lock(mu_);
  return tcp_;
}

std::shared_ptr<RdmaTransportFactory::BoundMetrics> RdmaTransportFactory::BindMetrics(
    MetricRegistry* registry) {
  auto b = std::make_shared<BoundMetrics>();
  b->registry = registry;
  auto entity = [&](const std::string& type, const std::string& id) {
    b->entities.push_back(registry->FindOrCreateEntity(type, id));
    return b->entities.back();
  };
  for (size_t r = 1; r < b->fallbacks.size(); ++r) {
    b->fallbacks[r] = entity("rdma_fallback", FallbackReasonName(static_cast<FallbackReason>(r)))
                          ->FindOrCreateCounter(&METRIC_rdma_fallbacks_total);
  }
  auto conns = entity("rdma", "connections");
  b->upgrades = conns->FindOrCreateCounter(&METRIC_rdma_upgrades_total);
  b->metrics.credit_waits = conns->FindOrCreateCounter(&METRIC_rdma_credit_waits_total);
  b->metrics.slow_grants = conns->FindOrCreateCounter(&METRIC_rdma_credit_slow_grants_total);
  auto sends = entity("rdma", "sends");
  b->metrics.inline_send_bytes = sends->FindOrCreateHistogram(&METRIC_rdma_inline_send_bytes);
  b->metrics.posted_send_bytes = sends->FindOrCreateHistogram(&METRIC_rdma_posted_send_bytes);
  b->metrics.sent_bytes = sends->FindOrCreateCounter(&METRIC_rdma_sent_bytes_total);
  b->metrics.zero_copy_sent_bytes =
      sends->FindOrCreateCounter(&METRIC_rdma_zero_copy_sent_bytes_total);
  b->metrics.copied_sent_bytes = sends->FindOrCreateCounter(&METRIC_rdma_copied_sent_bytes_total);
  b->metrics.send_registrations = sends->FindOrCreateCounter(&METRIC_rdma_send_registrations_total);
  auto receives = entity("rdma", "receives");
  b->metrics.received_bytes = receives->FindOrCreateCounter(&METRIC_rdma_received_bytes_total);
  b->metrics.lent_messages = receives->FindOrCreateCounter(&METRIC_rdma_zero_copy_messages_total);
  b->metrics.copied_no_spare = receives->FindOrCreateCounter(&METRIC_rdma_copied_no_spare_total);
  return b;
}

std::shared_ptr<RdmaTransportFactory::BoundMetrics> RdmaTransportFactory::bound() const {
  MutexLock lock(mu_);
  return bound_;
}

MetricRegistry* RdmaTransportFactory::metric_registry() const { return bound()->registry; }

RdmaMetrics RdmaTransportFactory::metrics() const { return bound()->metrics; }

void RdmaTransportFactory::CountUpgrade() { bound()->upgrades->Increment(); }

RdmaTransportFactory::~RdmaTransportFactory() {
  setup_.reset();  // stopped here unless a transport still holds it
  MutexLock lock(mu_);
  if (device_ != nullptr) AsyncEventRouter::UnwatchDevice(device_->context.get());
}

std::unique_ptr<rpc::Transport> RdmaTransportFactory::NewServerTransport(Socket accepted) {
  return tcp()->NewServerTransport(std::move(accepted));
}

Result<std::unique_ptr<rpc::Transport>> RdmaTransportFactory::NewClientTransport(
    const Sockaddr& remote) {
  return tcp()->NewClientTransport(remote);
}

std::unique_ptr<rpc::TransportUpgrade> RdmaTransportFactory::NewUpgrade(bool server_side) {
  return NewUpgrade(server_side, Sockaddr());
}

std::unique_ptr<rpc::TransportUpgrade> RdmaTransportFactory::NewUpgrade(bool server_side,
                                                                        const Sockaddr& remote) {
  return NewUpgrade(server_side, remote, Sockaddr());
}

std::unique_ptr<rpc::TransportUpgrade> RdmaTransportFactory::NewUpgrade(bool server_side,
                                                                        const Sockaddr& remote,
                                                                        const Sockaddr& local) {
  if (!options_.enabled) return nullptr;
  return std::make_unique<RdmaUpgrade>(this, server_side, remote, local);
}

void RdmaTransportFactory::ForgetDeadPathsIfPortCameUp() {
  if (port_activations_ == nullptr) return;
  const uint64_t now = port_activations_->load(std::memory_order_acquire);
  if (now == activations_seen_) return;
  activations_seen_ = now;
  if (dead_paths_.empty()) return;
  LOG(INFO) << "RDMA: the port came up; forgetting " << dead_paths_.size()
            << " dead path(s): their next connections probe again";
  dead_paths_.clear();
}

void RdmaTransportFactory::RememberDeadPath(const Sockaddr& peer) {
  const MonoTime now = MonoTime::Now();
  MutexLock lock(mu_);
  ForgetDeadPathsIfPortCameUp();
  // Our own port is down: the probe says nothing about the peer's path.
  if (device_ != nullptr && !device_->context->port().active) return;
  if (dead_paths_.size() >= kMaxDeadPaths) {
    // Bounded: the expired go, then (still full) the one that expires first.
    for (auto it = dead_paths_.begin(); it != dead_paths_.end();) {
      it = it->second <= now ? dead_paths_.erase(it) : std::next(it);
    }
    if (dead_paths_.size() >= kMaxDeadPaths) {
      auto first =
          std::min_element(dead_paths_.begin(), dead_paths_.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
      dead_paths_.erase(first);
    }
  }
  dead_paths_[peer.ToString()] = now + options_.dead_path_memory;
}

bool RdmaTransportFactory::PathKnownDead(const Sockaddr& peer) {
  MutexLock lock(mu_);
  ForgetDeadPathsIfPortCameUp();
  auto it = dead_paths_.find(peer.ToString());
  if (it == dead_paths_.end()) return false;
  if (it->second > MonoTime::Now()) return true;
  dead_paths_.erase(it);  // forgotten: the next connection probes again
  return false;
}

Result<std::shared_ptr<SrqContext>> RdmaTransportFactory::SrqForThisThread(
    const std::shared_ptr<RdmaDevice>& device) {
  std::shared_ptr<SrqContext> stale;  // released after the lock, on this (its reactor's) thread
  // The context watches this reactor's loop from its creation until the reactor stops (nullptr
  // off a reactor: nothing watched).
  struct ev_loop* loop = rpc::ReactorLoopOfThisThread();
  MutexLock lock(mu_);
  std::shared_ptr<SrqContext>& slot = srqs_[std::this_thread::get_id()];
  if (slot != nullptr &&
      (slot->device() != device->context.get() || (loop != nullptr && !slot->watching()))) {
    // Bound to a device that failed and was dropped (Device()): this reactor's connections
    // from now on use a context on the device reopened. The old one stops watching here, on its
    // thread (its connections failed with the device), so any thread may destroy it: the last
    // of its connections or jobs to go. (Or left by a reactor that stopped, whose thread's id
    // this one reuses.)
    slot->LeaveLoop();
    stale = std::move(slot);
  }
  if (slot == nullptr) {
    SrqOptions o = options_.srq;
    o.buffer_size = options_.endpoint.buffer_size;
    Result<std::unique_ptr<SrqContext>> made =
        SrqContext::Create(device->context.get(), device->pd.get(), o, loop, device);
    if (!made.ok()) {
      srqs_.erase(std::this_thread::get_id());
      return made.status();
    }
    slot = std::move(made).value();
    if (loop != nullptr) {
      // The reactor's loop goes after it stops: the context lets go of it first, on this thread
      // (kept for its stats; any thread may destroy it from then on). The messenger keeps its
      // factory until its reactors have stopped.
      rpc::AtReactorStop([this, thread = std::this_thread::get_id()] {
        MutexLock lock(mu_);
        auto it = srqs_.find(thread);
        if (it != srqs_.end()) it->second->LeaveLoop();
      });
    }
    // Gauges per reactor; they read the stats, which outlive the context if need be.
    // A reactor keeps its entity id when its context is made again (after a device failure):
    // the gauges then read the new context's stats.
    auto id = srq_ids_.try_emplace(std::this_thread::get_id(), srq_count_);
    if (id.second) ++srq_count_;
    auto entity = bound_->registry->FindOrCreateEntity(
        "rdma_srq", "reactor-" + std::to_string(id.first->second));
    bound_->entities.push_back(entity);
    std::shared_ptr<const SrqStats> st = slot->shared_stats();
    auto gauge = [&](const MetricPrototype* proto, const std::atomic<uint64_t> SrqStats::*field) {
      entity->FindOrCreateCallbackGauge(proto, [st, field] {
        return static_cast<int64_t>(((*st).*field).load(std::memory_order_relaxed));
      });
    };
    gauge(&METRIC_rdma_srq_posted_receives, &SrqStats::posted_receives);
    gauge(&METRIC_rdma_srq_pool_bytes, &SrqStats::pool_bytes);
    gauge(&METRIC_rdma_srq_grants_outstanding, &SrqStats::grants_outstanding);
    gauge(&METRIC_rdma_srq_credit_waits, &SrqStats::credit_waits);
    gauge(&METRIC_rdma_srq_pool_growths, &SrqStats::pool_growths);
    gauge(&METRIC_rdma_srq_connections, &SrqStats::connections);
    gauge(&METRIC_rdma_srq_limit_events, &SrqStats::limit_events);
    gauge(&METRIC_rdma_srq_reclaims, &SrqStats::reclaims);
    gauge(&METRIC_rdma_srq_credits_reclaimed, &SrqStats::credits_reclaimed);
    gauge(&METRIC_rdma_srq_background_growths, &SrqStats::background_growths);
  }
  return slot;
}

std::vector<RdmaTransportFactory::SrqSnapshot> RdmaTransportFactory::SrqStatsSnapshot() const {
  MutexLock lock(mu_);
  std::vector<SrqSnapshot> out;
  for (const auto& [thread, c] : srqs_) {
    const SrqStats& st = c->stats();
    out.push_back({st.posted_receives.load(), st.pool_bytes.load(), st.grants_outstanding.load(),
                   st.credit_waits.load(), st.pool_growths.load(), st.connections.load(),
                   st.limit_events.load(), st.reclaims.load(), st.credits_reclaimed.load(),
                   st.background_growths.load(), st.retiring.load()});
  }
  return out;
}

std::string MemlockWarningFor(const RdmaOptions& o, uint64_t limit) {
  if (o.use_srq && !o.transport.busy_poll) {
    const uint64_t per_reactor =
        o.srq.max_memory + uint64_t{o.srq.send_buffers} * o.srq.buffer_size;
    return MemlockWarning(limit, per_reactor, 1, "reactor");
  }
  const EndpointOptions& e = o.endpoint;
  const uint64_t per_connection =
      uint64_t{e.receive_buffers + e.spare_receive_buffers + e.send_buffers} * e.buffer_size;
  return MemlockWarning(limit, per_connection, 64, "connection");
}

Result<std::shared_ptr<RdmaDevice>> RdmaTransportFactory::Device(const Sockaddr& local) {
  MutexLock lock(mu_);
  if (device_ != nullptr && device_failed_->load(std::memory_order_acquire)) {
    // Its connections failed already (each holds the device until it goes); new ones wait for
    // a reopen. In SRQ mode each reactor's context (bound to this device, which it holds) is
    // dropped by its own reactor thread (SrqForThisThread), the last of its connections
    // destroying it.
    AsyncEventRouter::UnwatchDevice(device_->context.get());
    device_.reset();
    device_error_ = Status::NetworkError("the RDMA device reported a fatal error");
    retry_at_ = MonoTime::Now() + retry_backoff_;
    LOG(WARNING) << "RDMA: " << device_error_.ToString() << "; connections stay on TCP, "
                 << "reopening in " << retry_backoff_.ToString();
    retry_backoff_ = std::min(retry_backoff_ + retry_backoff_, kMaxRetry);
  }
  if (device_ == nullptr && MonoTime::Now() >= retry_at_) {
    std::shared_ptr<RdmaDevice> dev;
    Result<std::unique_ptr<RdmaDevice>> opened = open_device_(options_, local);
    if (opened.ok()) {
      dev = std::move(opened).value();
    } else {
      device_error_ = opened.status();
    }
    if (dev != nullptr) {
      Result<std::unique_ptr<ProtectionDomain>> pd = dev->context->AllocPd();
      if (pd.ok()) {
        dev->pd = std::move(pd).value();
      } else {
        device_error_ = pd.status();
        dev.reset();
      }
    }
    auto activations = std::make_shared<std::atomic<uint64_t>>(0);
    if (dev != nullptr) {
      // Its events are read from now on, connections or none (an idle process learns of a
      // device fatal, and of port changes, as a busy one does).
      Result<std::unique_ptr<DeviceEventWatcher>> watcher = DeviceEventWatcher::Start(
          dev->context.get(), EventHandler(dev->context.get(), activations));
      if (watcher.ok()) {
        dev->watcher = std::move(watcher).value();
        device_ = std::move(dev);
      } else {
        device_error_ = watcher.status();
      }
    }
    if (device_ == nullptr) {
      retry_at_ = MonoTime::Now() + retry_backoff_;
      LOG(WARNING) << "RDMA: no device (" << device_error_.ToString()
                   << "); connections stay on TCP, next try in " << retry_backoff_.ToString();
      retry_backoff_ = std::min(retry_backoff_ + retry_backoff_, kMaxRetry);
    }
    if (device_ != nullptr) {
      retry_backoff_ = kFirstRetry;
      device_failed_ = std::make_shared<std::atomic<bool>>(false);
      AsyncEventRouter::WatchDevice(device_->context.get(), device_failed_);
      port_activations_ = std::move(activations);
      activations_seen_ = 0;
      LOG(INFO) << "RDMA device " << device_->context->device_name() << " opened ("
                << (options_.backend == RdmaBackend::kSoft ? "software backend" : "libibverbs")
                << ")";
      const std::string warning = MemlockWarningFor(options_, LockedMemoryLimit());
      if (!warning.empty()) LOG(WARNING) << warning;
    }
  }
  if (device_ == nullptr) return device_error_;
  return device_;
}

Result<std::unique_ptr<RdmaDevice>> RdmaTransportFactory::OpenDevice(const RdmaOptions& options,
                                                                     const Sockaddr& local) {
  auto dev = std::make_unique<RdmaDevice>();
  if (options.backend == RdmaBackend::kSoft) {
    RRPC_ASSIGN_OR_RETURN(std::unique_ptr<SoftDevice> soft, OpenSoftDevice(options.soft, local));
    dev->soft = soft.get();
    dev->context = std::move(soft);
  } else {
    RRPC_ASSIGN_OR_RETURN(dev->context, OpenVerbsDevice(options.verbs, local));
  }
  return dev;
}

void RdmaTransportFactory::CountFallback(FallbackReason reason, const Status& detail) {
  size_t r = static_cast<size_t>(reason);
  std::shared_ptr<BoundMetrics> b = bound();
  if (r == 0 || r >= b->fallbacks.size()) return;
  b->fallbacks[r]->Increment();
  const int64_t n = b->fallbacks[r]->value();
  if (n == 1 || n % 1000 == 0) {
    LOG(WARNING) << "RDMA: connection stays on TCP (" << FallbackReasonName(reason)
                 << "): " << detail.ToString() << " [" << n << " so far for this reason]";
  }
}

std::shared_ptr<void> RdmaTransportFactory::KeepAlive(std::shared_ptr<RdmaDevice> device,
                                                      RdmaMetrics* metrics) const {
  std::shared_ptr<BoundMetrics> b = bound();
  *metrics = b->metrics;
  struct Held {
    std::shared_ptr<RdmaDevice> device;
    std::shared_ptr<MetricRegistry> registry;
    std::shared_ptr<BoundMetrics> metrics;  // what the connection counts into
  };
  return std::make_shared<Held>(Held{std::move(device), owned_registry_, std::move(b)});
}

uint64_t RdmaTransportFactory::fallbacks(FallbackReason reason) const {
  size_t r = static_cast<size_t>(reason);
  std::shared_ptr<BoundMetrics> b = bound();
  if (r == 0 || r >= b->fallbacks.size()) return 0;
  return static_cast<uint64_t>(b->fallbacks[r]->value());
}

}  // namespace rrpc::rdma
