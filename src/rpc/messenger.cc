#include "rrpc/rpc/messenger.h"

#include <thread>

#include "rpc/core/fault_injection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/messenger_security.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/request_tracker.h"
#include "rpc/core/result_tracker.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/transport/tcp_transport.h"
#include "rpc/transport/tls_transport.h"
#include "rrpc/rpc/service_if.h"
#include "util/memory_tracker.h"

namespace rrpc::rpc {

namespace {
// Spreads a process's calling threads over the reactors: each thread gets its own salt, so two
// threads calling the same remote use two connections on two reactors.
size_t ThreadSalt() {
  static std::atomic<size_t> next{0};
  thread_local size_t salt = next.fetch_add(1, std::memory_order_relaxed);
  return salt;
}

// The deleter of the shared_ptr Build() returns: the last reference may go away on any thread.
// When it goes away in a callback on one of the messenger's own reactors (e.g. a channel call's
// attempt held it), that reactor cannot join itself, so a thread of its own shuts it down.
void DeleteFromAnyThread(Messenger* messenger) {
  const Reactor* current = Reactor::Current();
  if (current == nullptr || current->messenger() != messenger) {
    delete messenger;
    return;
  }
  std::thread([messenger] { delete messenger; }).detach();
}
}  // namespace

Result<std::shared_ptr<Messenger>> MessengerBuilder::Build() {
  if (options_.num_reactors < 1) return Status::InvalidArgument("need at least one reactor");
  if (options_.num_workers < 1) return Status::InvalidArgument("need at least one worker");
  if (options_.service_queue_length < 1) {
    return Status::InvalidArgument("service queue length must be positive");
  }
  if (options_.max_message_size < 64) return Status::InvalidArgument("max message size too small");
  std::shared_ptr<Messenger> messenger(new Messenger(options_), &DeleteFromAnyThread);
  messenger->fault_injector_ = fault_injector_;
  RRPC_RETURN_NOT_OK(messenger->Init());
  return messenger;
}

Messenger::Messenger(MessengerOptions options) : options_(std::move(options)) {}

Messenger::~Messenger() { Shutdown(); }

Status Messenger::Init() {
  if (options_.enable_metrics) {
    metric_registry_ = options_.metric_registry;
    if (metric_registry_ == nullptr) {
      owned_registry_ = std::make_unique<MetricRegistry>();
      metric_registry_ = owned_registry_.get();
    }
    metrics_ = std::make_unique<MessengerMetrics>(metric_registry_, options_.name);
  }
  RRPC_ASSIGN_OR_RETURN(security_, MessengerSecurity::Create(options_.security));
  inbound_memory_ = std::make_unique<MemoryTracker>(
      options_.name + "-inbound", static_cast<int64_t>(options_.inbound_memory_limit));
  transport_factory_ = options_.transport_factory;
  StreamTransportOptions stream;
  stream.max_frame_size = options_.max_message_size;
  stream.read_block_size = options_.read_block_size;
  stream.keepalive_idle = options_.tcp_keepalive_idle;
  stream.keepalive_interval = options_.tcp_keepalive_interval;
  stream.keepalive_count = options_.tcp_keepalive_count;
  stream.user_timeout = options_.tcp_user_timeout;
  if (transport_factory_ != nullptr) {
    transport_factory_->UseDeadPeerSettings(stream);
  } else if (security_->client_uses_tls()) {
    transport_factory_ = std::make_shared<TlsClientTransportFactory>(
        security_->tls(), options_.security.server_name, stream);
  } else {
    transport_factory_ = std::make_shared<TcpTransportFactory>(stream);
  }
  // A factory with metrics of its own (RDMA's) exports them with the messenger's.
  if (metric_registry_ != nullptr) transport_factory_->UseMetricRegistry(metric_registry_);
  if (fault_injector_ != nullptr) {
    transport_factory_ = std::make_shared<FaultInjectingTransportFactory>(
        std::move(transport_factory_), fault_injector_);
  }
  request_tracker_ = std::make_unique<RequestTracker>();
  if (options_.result_tracker.enabled) {
    result_tracker_ = std::make_unique<ResultTracker>(options_.result_tracker, metrics_.get());
  }
  ServicePoolOptions pool_options;
  pool_options.name = options_.name;
  pool_options.default_pool.num_workers = options_.num_workers;
  pool_options.default_pool.queue_length = options_.service_queue_length;
  pool_options.default_pool.background_share = options_.background_share;
  pool_options.default_pool.adaptive_limit = options_.adaptive_limit;
  pool_options.named_pools = options_.service_pools;
  pool_options.worker_idle_spin = options_.worker_idle_spin;
  pool_options.metrics = metrics_.get();
  pool_options.authorizer = options_.authorizer;
  pool_options.result_tracker = result_tracker_.get();
  service_pool_ = std::make_unique<ServicePool>(pool_options);
  if (metrics_) {
    ServicePool* pool = service_pool_.get();
    metrics_->AttachServiceQueueLength([pool] { return static_cast<int64_t>(pool->queue_size()); });
  }
  for (int i = 0; i < options_.num_reactors; i++) {
    reactors_.push_back(std::make_unique<Reactor>(this, i));
    RRPC_RETURN_NOT_OK(reactors_.back()->Start());
  }
  return Status::OK();
}

Status Messenger::Listen(const Sockaddr& addr, Sockaddr* bound) {
  MutexLock lock(mu_);
  if (listening_) return Status::IllegalState("messenger already listening");
  if (closing()) return Status::IllegalState("messenger shut down");
  RRPC_RETURN_NOT_OK(security_->CheckServerReady());
  // One SO_REUSEPORT socket per reactor, all on the same port: the kernel spreads new
  // connections over them, so each reactor accepts its own.
  std::vector<Socket> listeners;
  Sockaddr actual = addr;
  if (addr.port() != 0) {
    // SO_REUSEPORT would let this process share the port with another server of the same user
    // (say a second one started with the same flags), each silently taking part of the
    // connections. A socket without it cannot bind a port another process listens on.
    RRPC_ASSIGN_OR_RETURN(Socket probe, Socket::CreateTcp(addr.family()));
    RRPC_RETURN_NOT_OK(probe.SetReuseAddr(true));
    Status free = probe.Bind(addr);
    if (!free.ok()) {
      return free.CloneAndPrepend(
          "the RPC port is taken (another server on this host?); choose another (port 0 picks "
          "a free one)");
    }
  }
  for (int i = 0; i < options_.num_reactors; i++) {
    RRPC_ASSIGN_OR_RETURN(Socket sock, Socket::CreateTcp(addr.family()));
    RRPC_RETURN_NOT_OK(sock.SetReuseAddr(true));
    RRPC_RETURN_NOT_OK(sock.SetReusePort(true));
    RRPC_RETURN_NOT_OK(sock.Bind(actual));
    RRPC_RETURN_NOT_OK(sock.Listen(options_.listen_backlog));
    if (i == 0) {
      RRPC_ASSIGN_OR_RETURN(actual, sock.GetSocketAddress());
    }
    listeners.push_back(std::move(sock));
  }
  RRPC_RETURN_NOT_OK(service_pool_->Start());
  for (int i = 0; i < options_.num_reactors; i++) {
    reactors_[i]->StartAccepting(std::move(listeners[i]));
  }
  listening_ = true;
  listen_address_ = actual;
  if (bound != nullptr) *bound = actual;
  return Status::OK();
}

Status Messenger::ReloadSecurity() { return security_->Reload(); }
bool Messenger::TryAddServerConnection() {
  const size_t limit = options_.max_connections;
  size_t open = server_connections_.load(std::memory_order_relaxed);
  do {
    if (limit != 0 && open >= limit) return false;
  } while (!server_connections_.compare_exchange_weak(open, open + 1, std::memory_order_relaxed));
  return true;
}

Sockaddr Messenger::listen_address() const {
  MutexLock lock(mu_);
  return listen_address_;
}

Status Messenger::RegisterService(std::unique_ptr<ServiceIf> service) {
  MutexLock lock(mu_);
  if (listening_) return Status::IllegalState("register services before Listen()");
  if (fault_injector_ != nullptr) fault_injector_->SlowWorkerHandlers(service.get());
  return service_pool_->RegisterService(std::move(service));
}

std::vector<const ServiceIf*> Messenger::services() const { return service_pool_->services(); }

std::vector<ServicePoolInfo> Messenger::service_pools() const {
  return service_pool_->PoolSnapshots();
}

const ServiceIf* Messenger::FindService(std::string_view name) const {
  return service_pool_->FindService(name);
}

const RpczStore* Messenger::rpcz_store() const { return service_pool_->rpcz_store(); }

RpczStore* MessengerInternals::rpcz_store(const Messenger& m) {
  return m.service_pool_->rpcz_store();
}

void Messenger::QueueOutboundCall(scoped_refptr<OutboundCall>&& call) {
  if (closing()) {
    call->FailBeforeSend(Status::Aborted("messenger shut down"));
    return;
  }
  // A call made on one of our reactors (typically from a callback) stays there: no cross-thread
  // hand-off and the connection it already uses.
  Reactor* current = Reactor::Current();
  if (current != nullptr && current->messenger() == this) {
    current->QueueOutboundCall(std::move(call));
    return;
  }
  // Calls from other threads: spread by thread. A bulk call goes to the reactor after the one
  // this thread's small calls to the remote use, so that its connection is not served by theirs:
  // a reactor copying a megabyte into or out of a socket holds up every small call waiting on it.
  // Its callbacks then stay on that reactor.
  const size_t n = reactors_.size();
  size_t index = (call->remote().Hash() + ThreadSalt()) % n;
  if (n > 1 && call->IsBulk(options_)) index = (index + 1) % n;
  reactors_[index]->QueueOutboundCall(std::move(call));
}

void Messenger::RunAfter(MonoDelta delay, std::function<void()> task) {
  Reactor* current = Reactor::Current();
  Reactor* reactor = current != nullptr && current->messenger() == this
                         ? current
                         : reactors_[ThreadSalt() % reactors_.size()].get();
  reactor->RunAfter(delay, std::move(task));
}

int32_t Messenger::NextCallId() {
  // Wraps from INT32_MAX back to 0; ids only need to be unique among a connection's calls in
  // flight.
  return next_call_id_.fetch_add(1, std::memory_order_relaxed) & 0x7fffffff;
}

std::vector<ConnectionInfo> Messenger::DumpConnections() {
  std::vector<ConnectionInfo> out;
  for (auto& reactor : reactors_) {
    auto part = reactor->DumpConnections();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void Messenger::StopAccepting() {
  for (auto& reactor : reactors_) reactor->StopAccepting();
}

void Messenger::RefuseNewCalls() { service_pool_->RefuseNewCalls(); }

size_t Messenger::inbound_calls_in_flight() const {
  int64_t total = 0;
  for (const auto& reactor : reactors_) total += reactor->inbound_calls_in_flight();
  return total > 0 ? static_cast<size_t>(total) : 0;
}

bool Messenger::WaitForInboundCallsDone(MonoTime deadline) const {
  // Polled: a drain happens once per process life, and the call path stays free of wakeups.
  while (inbound_calls_in_flight() > 0) {
    if (MonoTime::Now() >= deadline) return false;
    SleepFor(MonoDelta::FromMilliseconds(2));
  }
  return true;
}

void Messenger::Shutdown() {
  if (closing_.exchange(true)) return;
  // Reactors first: no more calls arrive and every connection's calls fail (callbacks run once).
  // Then the workers: queued calls are answered "unavailable" into closed connections.
  for (auto& reactor : reactors_) reactor->Shutdown();
  service_pool_->Shutdown();
  // The registry may outlive the pool the gauge reads.
  if (metrics_) metrics_->DetachServiceQueueLength();
}

}  // namespace rrpc::rpc
