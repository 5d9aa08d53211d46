#include "rrpc/server/server_base.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rpc/discovery/etcd_registration.h"
#include "rrpc/rpc/authorization.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/service_if.h"
#include "rrpc/server/reflection_service.h"
#include "rrpc/server/server_status.h"
#include "server/web/web_dashboard.h"
#include "server/web/web_pages.h"
#include "server/web/webserver.h"
#include "util/metrics/metric_registry.h"

namespace rrpc {

namespace {

// The write end of the self-pipe of the server in RunUntilSignalled(), or -1. Read by the
// signal handler, so a lock-free atomic.
std::atomic<int> g_signal_pipe{-1};
static_assert(std::atomic<int>::is_always_lock_free);

// Async-signal-safe: only write(2), with errno preserved.
void OnSignal(int signo) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signo);
    ssize_t ignored = write(fd, &byte, 1);
    (void)ignored;  // a full pipe already holds a wakeup
  }
  errno = saved_errno;
}

constexpr unsigned char kStopByte = 0;  // RequestStop(); signal numbers are never 0

Status InstallHandler(int signo, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(signo, &sa, nullptr) != 0) {
    return Status::IOError("sigaction", strerror(errno));
  }
  return Status::OK();
}

}  // namespace

ServerBase::ServerBase(ServerBaseOptions options) : options_(std::move(options)) {
  // Non-blocking write end: a handler must never block, and one pending byte is enough.
  PCHECK(pipe2(stop_pipe_, O_CLOEXEC) == 0) << "pipe2";
  PCHECK(fcntl(stop_pipe_[1], F_SETFL, O_NONBLOCK) == 0);
}

ServerBase::~ServerBase() {
  Shutdown();
  close(stop_pipe_[0]);
  close(stop_pipe_[1]);
}

Status ServerBase::RegisterService(std::unique_ptr<rpc::ServiceIf> service) {
  const State state = state_.load();
  if (state == State::kNew) {
    pending_services_.push_back(std::move(service));
    return Status::OK();
  }
  if (state != State::kInitialized) return Status::IllegalState("register services before Start()");
  return messenger_->RegisterService(std::move(service));
}

Status ServerBase::Init() {
  if (state_.load() != State::kNew) return Status::IllegalState("server already initialized");
  metric_registry_ = std::make_unique<MetricRegistry>();
  rpc::MessengerOptions mopts = options_.messenger;
  mopts.name = options_.name;
  mopts.metric_registry = metric_registry_.get();
  if (options_.rdma) {
    rdma_status_ = rdma::ProbeRdmaDevice(*options_.rdma);
    if (rdma_status_.ok()) {
      mopts.transport_factory = rdma::NewRdmaTransportFactory(*options_.rdma);
      LOG(INFO) << options_.name << ": RDMA on ("
                << (options_.rdma->backend == rdma::RdmaBackend::kSoft ? "soft" : "verbs")
                << (options_.rdma->use_srq ? ", SRQ" : "") << ")";
    } else {
      LOG(WARNING) << options_.name << ": RDMA asked for, but " << rdma_status_.ToString()
                   << ": serving over TCP only";
    }
  }
  RRPC_ASSIGN_OR_RETURN(messenger_, rpc::MessengerBuilder(mopts).Build());
  auto status = std::make_unique<ServerStatusServiceImpl>(this);
  // Lets generic clients (rrpc-cli) fetch the descriptors of everything registered here.
  std::unique_ptr<rpc::ServiceIf> reflection = server::MakeReflectionService(messenger_.get());
  if (options_.status_requires_authentication) {
    auto authenticated = std::make_shared<rpc::RequireAuthenticatedAuthorizer>();
    status->SetAuthorizer(authenticated);
    reflection->SetAuthorizer(authenticated);
  }
  RRPC_RETURN_NOT_OK(messenger_->RegisterService(std::move(status)));
  RRPC_RETURN_NOT_OK(messenger_->RegisterService(std::move(reflection)));
  for (auto& service : pending_services_) {
    RRPC_RETURN_NOT_OK(messenger_->RegisterService(std::move(service)));
  }
  pending_services_.clear();
  state_.store(State::kInitialized);
  return Status::OK();
}

Status ServerBase::Start() {
  if (state_.load() == State::kNew) RRPC_RETURN_NOT_OK(Init());
  if (state_.load() != State::kInitialized) return Status::IllegalState("server already started");
  RRPC_ASSIGN_OR_RETURN(Sockaddr bind, Sockaddr::Parse(options_.rpc_bind_address));
  start_time_ = MonoTime::Now();
  RRPC_RETURN_NOT_OK(messenger_->Listen(bind, &rpc_address_));
  if (!options_.registry.empty()) {
    Status s = StartRegistration();
    if (!s.ok()) {
      messenger_->Shutdown();
      state_.store(State::kStopped);
      return s.CloneAndPrepend("registry");
    }
  }
  if (!options_.webserver_bind_address.empty()) {
    WebserverOptions wopts;
    wopts.bind_address = options_.webserver_bind_address;
    wopts.tls_certificate_path = options_.webserver_tls_certificate_path;
    wopts.tls_private_key_path = options_.webserver_tls_private_key_path;
    wopts.tls_ca_certificate_path = options_.webserver_tls_ca_certificate_path;
    wopts.max_connections = options_.webserver_max_connections;
    wopts.metric_registry = metric_registry_.get();
    web_ = std::make_unique<Webserver>(wopts);
    RegisterDashboard(web_.get());
    WebPagesOptions popts;
    popts.server_name = options_.name;
    popts.health_check = [this] { return Health(); };
    popts.health_note = [this] { return HealthNote(); };
    RegisterRpcPages(web_.get(), messenger_.get(), metric_registry_.get(), popts);
    Status s = web_->Start();
    if (!s.ok()) {
      if (registration_) (void)registration_->Withdraw();
      messenger_->Shutdown();
      state_.store(State::kStopped);
      return s.CloneAndPrepend(
          "web UI (its port taken by another server on this host? set webserver_bind_address, "
          "--webserver_bind: another port, port 0 for a free one, empty for no web UI)");
    }
  }
  state_.store(State::kRunning);
  LOG(INFO) << options_.name << ": RPC on " << rpc_address_.ToString()
            << (web_ ? ", web UI at " + web_->url() : std::string(", no web UI"));
  return Status::OK();
}

Status ServerBase::StartRegistration() {
  rpc::EtcdRegistrationOptions ropts;
  ropts.target = options_.registry;
  ropts.ttl = options_.registry_ttl;
  ropts.address = options_.advertised_address;
  if (ropts.address.empty()) {
    const std::string host = rpc_address_.host();
    if (host == "0.0.0.0" || host == "::") {
      return Status::InvalidArgument(
          "the RPC server listens on a wildcard address: say what clients connect to "
          "(advertised_address, --rpc_advertise_address)",
          rpc_address_.ToString());
    }
    ropts.address = rpc_address_.ToString();
  }
  registration_ = std::make_unique<rpc::EtcdRegistration>(ropts);
  return registration_->Start();
}

void ServerBase::Shutdown() {
  MutexLock lock(shutdown_mu_);
  const State state = state_.load();
  if (state == State::kStopped) return;
  if (registration_) {
    // Withdrawn first: resolvers drop the server while it still answers, so no client picks it
    // after it starts refusing.
    Status s = registration_->Withdraw();
    LOG(INFO) << options_.name << ": withdrawn from the registry"
              << (s.ok() ? "" : " (" + s.ToString() + ")");
    registration_.reset();
    if (state == State::kRunning && options_.registry_withdraw_grace > MonoDelta()) {
      SleepFor(options_.registry_withdraw_grace);  // watchers hear of it; calls still served
    }
  }
  if (messenger_ && state == State::kRunning) {
    const MonoTime deadline = MonoTime::Now() + options_.shutdown_timeout;
    LOG(INFO) << options_.name << ": draining (up to " << options_.shutdown_timeout.ToString()
              << ")";
    // Refusing first: once Health() says "draining", no new call runs any more.
    messenger_->RefuseNewCalls();
    state_.store(State::kDraining);  // /healthz and GetStatus say so from now on
    messenger_->StopAccepting();
    if (!messenger_->WaitForInboundCallsDone(deadline)) {
      LOG(WARNING) << options_.name << ": " << messenger_->inbound_calls_in_flight()
                   << " calls still in flight after the shutdown timeout; closing anyway";
    }
  }
  state_.store(State::kDraining);
  if (web_) web_->Stop();
  if (messenger_) messenger_->Shutdown();
  state_.store(State::kStopped);
  LOG(INFO) << options_.name << ": stopped";
  RequestStop();  // a RunUntilSignalled() in another thread returns too
}

Status ServerBase::ReloadSecurity() {
  Status rpc = messenger_ ? messenger_->ReloadSecurity() : Status::OK();
  Status web = web_ != nullptr && web_->is_tls() ? web_->ReloadTlsCertificates() : Status::OK();
  if (!rpc.ok()) return rpc.CloneAndPrepend("RPC certificates");
  if (!web.ok()) return web.CloneAndPrepend("web UI certificate");
  return Status::OK();
}

void ServerBase::ReloadOnSighup() {
  Status s = ReloadSecurity();
  if (s.ok()) {
    LOG(INFO) << options_.name
              << ": SIGHUP: certificates, keys and CAs reloaded (those configured)";
  } else {
    LOG(WARNING) << options_.name
                 << ": SIGHUP: not reloaded, keeping the old ones: " << s.ToString();
  }
}

Status ServerBase::RunUntilSignalled() {
  int expected = -1;
  if (!g_signal_pipe.compare_exchange_strong(expected, stop_pipe_[1])) {
    return Status::IllegalState("another server already handles signals");
  }
  for (int signo : {SIGTERM, SIGINT, SIGHUP}) RRPC_RETURN_NOT_OK(InstallHandler(signo, OnSignal));
  int stop_signal = -1;
  while (stop_signal < 0) {
    unsigned char byte = 0;
    const ssize_t n = read(stop_pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) {
      PLOG(ERROR) << "reading the signal pipe";
      stop_signal = 0;
      break;
    }
    if (byte == SIGHUP) {
      ReloadOnSighup();
      continue;
    }
    stop_signal = byte;
  }
  // Default actions again: a second SIGTERM / SIGINT during the drain ends the process at once.
  for (int signo : {SIGTERM, SIGINT}) (void)InstallHandler(signo, SIG_DFL);
  (void)InstallHandler(SIGHUP, SIG_IGN);
  g_signal_pipe.store(-1);
  if (stop_signal == kStopByte) {
    LOG(INFO) << options_.name << ": stop requested";
  } else {
    LOG(INFO) << options_.name << ": " << strsignal(stop_signal) << ": shutting down";
  }
  Shutdown();
  return Status::OK();
}

void ServerBase::RequestStop() {
  const unsigned char byte = kStopByte;
  ssize_t ignored = write(stop_pipe_[1], &byte, 1);
  (void)ignored;
}

void ServerBase::ReportHealth(const std::string& component, HealthState state,
                              const std::string& detail) {
  MutexLock lock(health_mu_);
  auto it = component_health_.find(component);
  const bool changed = state == HealthState::kOk
                           ? it != component_health_.end()
                           : it == component_health_.end() || it->second.first != state ||
                                 it->second.second != detail;
  if (!changed) return;
  if (state == HealthState::kOk) {
    component_health_.erase(it);
    LOG(INFO) << options_.name << ": " << component << " healthy again";
    return;
  }
  component_health_[component] = {state, detail};
  LOG(WARNING) << options_.name << ": " << component << " "
               << (state == HealthState::kFailed ? "failed" : "degraded") << ": " << detail;
}

std::string ServerBase::HealthNote() const {
  MutexLock lock(health_mu_);
  std::string failed, degraded;
  for (const auto& [component, report] : component_health_) {
    std::string& list = report.first == HealthState::kFailed ? failed : degraded;
    list += (list.empty() ? "" : "; ") + component + ": " + report.second;
  }
  if (!failed.empty())
    return "FAILED: " + failed + (degraded.empty() ? "" : "; DEGRADED: " + degraded);
  return degraded.empty() ? "" : "DEGRADED: " + degraded;
}

Status ServerBase::Health() const {
  switch (state_.load()) {
    case State::kRunning: {
      MutexLock lock(health_mu_);
      std::string failed;
      for (const auto& [component, report] : component_health_) {
        if (report.first != HealthState::kFailed) continue;
        failed += (failed.empty() ? "" : "; ") + component + ": " + report.second;
      }
      if (!failed.empty()) return Status::ServiceUnavailable("FAILED: " + failed);
      return Status::OK();
    }
    case State::kDraining:
      return Status::ServiceUnavailable("draining");
    case State::kStopped:
      return Status::ServiceUnavailable("stopped");
    default:
      return Status::ServiceUnavailable("starting");
  }
}

std::string ServerBase::web_url() const { return web_ ? web_->url() : std::string(); }

}  // namespace rrpc
