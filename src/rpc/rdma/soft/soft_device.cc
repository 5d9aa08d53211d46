// The software device: its NIC thread, links to peer devices, completion queues and channels,
// protection domains and memory regions. The RC rules themselves are in soft_qp.cc.
#include "rpc/rdma/soft/soft_device.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "rpc/rdma/bootstrap/gid_choice.h"
#include "rpc/rdma/memlock.h"
#include "rpc/rdma/soft/soft_internal.h"

namespace rrpc::rdma {
namespace soft {
namespace {

constexpr uint8_t kGidMagic[4] = {'r', 's', 'f', 't'};

// Faults every page of [addr, addr + length) in without changing its bytes, as pinning does.
void FaultIn(uint8_t* addr, size_t length) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels: write each page's first byte back to itself (nobody uses the region yet).
  for (uintptr_t p = begin; p < end; p += page) {
    volatile uint8_t* b = reinterpret_cast<volatile uint8_t*>(std::max(p, uintptr_t(addr)));
    *b = *b;
  }
}

uint32_t RoundUpToPowerOfTwo(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// A device's link-local GID carries its pid and id where the magic GID has them (bytes 4..11)
// in its interface identifier (bytes 8..15): the same device either way.
Gid LinkLocalOf(const Gid& magic) {
  Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  memcpy(g.data() + 8, magic.data() + 4, 8);
  return g;
}

Gid MagicOf(const Gid& link_local) {
  Gid g{};
  memcpy(g.data(), kGidMagic, 4);
  memcpy(g.data() + 4, link_local.data() + 8, 8);
  return g;
}

// The abstract UNIX socket address of the device a GID names: "\0rrpc-soft-<pid>-<id>".
sockaddr_un AddressOf(const Gid& gid, socklen_t* len) {
  uint32_t pid, id;
  memcpy(&pid, gid.data() + 4, 4);
  memcpy(&id, gid.data() + 8, 4);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "rrpc-soft-%u-%u", pid, id);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

class SoftMr final : public MemoryRegion {
 public:
  SoftMr(SoftDeviceImpl* dev, uint8_t* addr, size_t length, uint32_t key)
      : dev_(dev), addr_(addr), length_(length), key_(key) {}
  ~SoftMr() override {
    std::lock_guard<std::mutex> lock(dev_->mu);
    dev_->mrs.erase(key_);
    dev_->pinned_bytes -= length_;
  }
  uint8_t* addr() const override { return addr_; }
  size_t length() const override { return length_; }
  uint32_t lkey() const override { return key_; }
  uint32_t rkey() const override { return key_; }

 private:
  SoftDeviceImpl* const dev_;
  uint8_t* const addr_;
  const size_t length_;
  const uint32_t key_;
};

class SoftPd final : public ProtectionDomain {
 public:
  explicit SoftPd(SoftDeviceImpl* dev) : dev_(dev) {}

  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length) override {
    dev_->ControlVerb();
    // Outside the device lock: touching many pages takes a while.
    if (dev_->options().pin_registered_memory && addr != nullptr) {
      FaultIn(static_cast<uint8_t*>(addr), length);
    }
    std::lock_guard<std::mutex> lock(dev_->mu);
    RRPC_RETURN_NOT_OK(dev_->CheckAlive());
    if (dev_->ConsumeRegistrationFailure()) {
      return Status::IOError("memory registration failed (injected fault)");
    }
    if (addr == nullptr || length == 0) return Status::InvalidArgument("empty memory region");
    const uint64_t limit = dev_->options().locked_memory_limit;
    if (limit != 0 && dev_->pinned_bytes + length > limit) {
      return RegistrationError(ENOMEM, length, limit);
    }
    dev_->pinned_bytes += length;
    uint32_t key = dev_->NewKey();
    dev_->mrs[key] = {this, static_cast<uint8_t*>(addr), length};
    return std::unique_ptr<MemoryRegion>(
        new SoftMr(dev_, static_cast<uint8_t*>(addr), length, key));
  }

  Result<std::unique_ptr<QueuePair>> CreateQp(const QpInitAttr& attr) override {
    dev_->ControlVerb();
    const SoftDeviceOptions& o = dev_->options();
    if (attr.send_cq == nullptr || attr.recv_cq == nullptr) {
      return Status::InvalidArgument("a queue pair needs a send and a receive CQ");
    }
    if (attr.caps.max_send_wr == 0 || attr.caps.max_send_wr > o.max_qp_wr ||
        (attr.srq == nullptr &&
         (attr.caps.max_recv_wr == 0 || attr.caps.max_recv_wr > o.max_qp_wr))) {
      return Status::InvalidArgument("queue depth out of the device's range");
    }
    if (attr.caps.max_send_sge > o.max_sge || attr.caps.max_recv_sge > o.max_sge ||
        attr.caps.max_recv_sge > static_cast<uint32_t>(PostedRecv::kMaxSge)) {
      return Status::InvalidArgument("too many SGEs per request");
    }
    QpCaps granted = attr.caps;
    // As a NIC does: grant at most what the device can, and say so; and as mlx5 does, round the
    // queue depths up to powers of two (a CQ sized from the request can then overflow).
    granted.max_inline_data = std::min(attr.caps.max_inline_data, o.max_inline_data);
    granted.max_send_wr = RoundUpToPowerOfTwo(attr.caps.max_send_wr);
    granted.max_recv_wr = attr.srq != nullptr ? 0 : RoundUpToPowerOfTwo(attr.caps.max_recv_wr);
    std::lock_guard<std::mutex> lock(dev_->mu);
    RRPC_RETURN_NOT_OK(dev_->CheckAlive());
    auto qp = std::make_unique<SoftQp>(dev_, this, attr, dev_->NewQpNum(), granted);
    dev_->AddQp(qp.get());
    return std::unique_ptr<QueuePair>(std::move(qp));
  }

  Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(uint32_t max_wr, void* context) override {
    dev_->ControlVerb();
    if (max_wr == 0 || max_wr > dev_->options().max_qp_wr) {
      return Status::InvalidArgument("SRQ depth out of the device's range");
    }
    RRPC_RETURN_NOT_OK(dev_->Alive());
    return std::unique_ptr<SharedReceiveQueue>(new SoftSrq(dev_, max_wr, context));
  }

 private:
  SoftDeviceImpl* const dev_;
};

}  // namespace

// ---- The device.

SoftDeviceImpl::SoftDeviceImpl(const SoftDeviceOptions& options, int listen_fd, Gid gid,
                               const SoftPortChoice& port)
    : options_(options),
      own_gid_(gid),
      port_num_(port.port),
      addresses_(port.addresses),
      listen_fd_(listen_fd) {
  std::lock_guard<std::mutex> lock(mu);
  RefreshPort();
}

PortInfo SoftDeviceImpl::ReadPort() const {
  PortInfo p;
  // As an mlx5 RoCE port lists them: the IPv6 link-local entries first (v1, v2), then a v1/v2
  // pair for the device's address (here its magic GID, routable to it from any process).
  const Gid link_local = LinkLocalOf(own_gid_);
  p.gid_table = {{0, link_local, GidType::kRoceV1},
                 {1, link_local, GidType::kRoceV2},
                 {2, own_gid_, GidType::kRoceV1},
                 {3, own_gid_, GidType::kRoceV2}};
  (void)AppendAddressGids(addresses_, &p.gid_table);  // parsed by ChooseSoftPort
  p.port = port_num_;
  p.ethernet = true;
  GidEntry chosen = ChooseGid(p.gid_table, Sockaddr()).value();
  for (const GidEntry& e : p.gid_table) {
    if (e.index == pinned_gid_index_) chosen = e;
  }
  p.gid = chosen.gid;
  p.gid_index = chosen.index;
  p.gid_type = chosen.type;
  p.gid_pinned = pinned_gid_index_ >= 0;
  p.lid = lid_;
  p.active_mtu = 4096;
  p.max_msg_size = kMaxMsgSize;
  p.num_comp_vectors = std::max(1, options_.num_comp_vectors);
  p.active = !port_down_;
  return p;
}

SoftDeviceImpl::~SoftDeviceImpl() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop_ = true;
  }
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  if (nic_.joinable()) nic_.join();
  for (auto& l : links_) {
    if (l->fd >= 0) close(l->fd);
  }
  close(listen_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (async_fd_ >= 0) close(async_fd_);
  ReleaseAddressGids(own_gid_);
}

Status SoftDeviceImpl::StartNic() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  async_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || async_fd_ < 0) {
    return Status::FromErrno("soft device: epoll/eventfd", errno);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listener
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.ptr = &wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  nic_ = std::thread([this] { NicLoop(); });
  return Status::OK();
}

Status SoftDeviceImpl::CheckAlive() const {
  // As mlx5 after a fatal error: every create fails with EIO.
  if (dead_) return Status::FromErrno(options_.name + ": the device reported a fatal error", EIO);
  return Status::OK();
}

Result<std::unique_ptr<ProtectionDomain>> SoftDeviceImpl::AllocPd() {
  RRPC_RETURN_NOT_OK(Alive());
  return std::unique_ptr<ProtectionDomain>(new SoftPd(this));
}

Result<std::unique_ptr<CompletionChannel>> SoftDeviceImpl::CreateChannel() {
  RRPC_RETURN_NOT_OK(Alive());
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno("eventfd", errno);
  return std::unique_ptr<CompletionChannel>(new SoftChannel(fd));
}

Result<std::unique_ptr<CompletionQueue>> SoftDeviceImpl::CreateCq(int entries,
                                                                  CompletionChannel* channel) {
  ControlVerb();
  if (entries <= 0 || entries > options_.max_cqe) {
    return Status::InvalidArgument("CQ size out of the device's range");
  }
  std::lock_guard<std::mutex> lock(mu);
  RRPC_RETURN_NOT_OK(CheckAlive());
  const int vector = static_cast<int>(next_vector_++ % std::max(1, options_.num_comp_vectors));
  auto cq = std::make_unique<SoftCq>(this, entries, channel, vector);
  AddCq(cq.get());
  return std::unique_ptr<CompletionQueue>(std::move(cq));
}

void SoftDeviceImpl::PostAsyncEvent(const AsyncEvent& event) {
  async_events_.push_back(event);
  uint64_t one = 1;
  (void)!write(async_fd_, &one, sizeof(one));
}

void SoftDeviceImpl::PostAsyncEventAfterCompletions(const AsyncEvent& event) {
  if (stalled_) {
    stalled_events_.push_back(event);
  } else {
    PostAsyncEvent(event);
  }
}

void SoftDeviceImpl::ForgetAsyncEvents(uint32_t qpn) {
  auto of_qp = [qpn](const AsyncEvent& e) {
    return e.qp_num == qpn &&
           (e.type == AsyncEventType::kQpFatal || e.type == AsyncEventType::kQpLastWqeReached);
  };
  for (auto* q : {&async_events_, &stalled_events_}) {
    q->erase(std::remove_if(q->begin(), q->end(), of_qp), q->end());
  }
}

bool SoftDeviceImpl::NextAsyncEvent(AsyncEvent* event) {
  std::lock_guard<std::mutex> lock(mu);
  if (async_events_.empty()) return false;
  *event = async_events_.front();
  async_events_.pop_front();
  switch (event->type) {
    case AsyncEventType::kPortActive:
    case AsyncEventType::kPortError:
    case AsyncEventType::kGidChange:
    case AsyncEventType::kLidChange:
      RefreshPort();  // as a context on hardware queries its port again
      break;
    default:
      break;
  }
  if (async_events_.empty()) {
    uint64_t v;
    (void)!read(async_fd_, &v, sizeof(v));
  }
  return true;
}

void SoftDeviceImpl::DropPeers() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& l : links_) KillLink(l.get());
}

void SoftDeviceImpl::StallCompletions(bool stalled) {
  std::lock_guard<std::mutex> lock(mu);
  stalled_ = stalled;
  if (!stalled) {
    for (SoftCq* cq : cqs_) cq->ReleaseStalled();
    std::deque<AsyncEvent> held;
    held.swap(stalled_events_);
    for (const AsyncEvent& e : held) PostAsyncEvent(e);
  }
}

void SoftDeviceImpl::FailRegistrations(int n) {
  std::lock_guard<std::mutex> lock(mu);
  failing_registrations_ = n;
}

void SoftDeviceImpl::HoldControlVerbs(bool held) {
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    control_held_ = held;
  }
  control_cv_.notify_all();
}

int SoftDeviceImpl::control_verbs_held() {
  std::lock_guard<std::mutex> lock(control_mu_);
  return control_waiting_;
}

void SoftDeviceImpl::ControlVerb() {
  if (options_.control_verb_delay > MonoDelta()) SleepFor(options_.control_verb_delay);
  std::unique_lock<std::mutex> lock(control_mu_);
  if (!control_held_) return;
  ++control_waiting_;
  control_cv_.wait(lock, [this] { return !control_held_; });
  --control_waiting_;
}

void SoftDeviceImpl::HoldRtrToward(const Gid& gid, bool held) {
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    if (held) {
      rtr_held_toward_.insert(gid);
    } else {
      rtr_held_toward_.erase(gid);
    }
  }
  control_cv_.notify_all();
}

int SoftDeviceImpl::rtrs_held() {
  std::lock_guard<std::mutex> lock(control_mu_);
  return rtr_waiting_;
}

void SoftDeviceImpl::RtrToward(const Gid& remote) {
  std::unique_lock<std::mutex> lock(control_mu_);
  if (rtr_held_toward_.count(remote) == 0) return;
  ++rtr_waiting_;
  control_cv_.wait(lock, [&] { return rtr_held_toward_.count(remote) == 0; });
  --rtr_waiting_;
}

void SoftDeviceImpl::InjectAsyncEvent(AsyncEventType type, QueuePair* qp) {
  std::lock_guard<std::mutex> lock(mu);
  if (qp == nullptr) {
    if (type == AsyncEventType::kDeviceFatal) dead_ = true;
    PostAsyncEvent({type, 0, nullptr});
    return;
  }
  static_cast<SoftQp*>(qp)->OnFatal();
}

bool SoftDeviceImpl::ConnectParamsOf(uint32_t qp_num, QpConnectParams* params) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = qps_.find(qp_num);
  if (it == qps_.end()) return false;
  return it->second->connect_params(params);
}

Status SoftDeviceImpl::UseGidIndex(int index) {
  std::lock_guard<std::mutex> lock(mu);
  const PortInfo now = port();
  for (const GidEntry& e : now.gid_table) {
    if (e.index != index) continue;
    pinned_gid_index_ = index;
    RefreshPort();
    return Status::OK();
  }
  return Status::NotFound("no GID at index " + std::to_string(index));
}

void SoftDeviceImpl::SetPortActive(bool active) {
  std::lock_guard<std::mutex> lock(mu);
  if (port_down_ == !active) return;
  port_down_ = !active;
  PostAsyncEvent({active ? AsyncEventType::kPortActive : AsyncEventType::kPortError, 0, nullptr});
}

Status SoftDeviceImpl::SetPortAddresses(const std::vector<std::string>& addresses) {
  std::vector<GidEntry> table;
  RRPC_RETURN_NOT_OK(AppendAddressGids(addresses, &table));
  std::lock_guard<std::mutex> lock(mu);
  ReleaseAddressGids(own_gid_);
  Status claimed = ClaimAddressGids(table, own_gid_);
  if (!claimed.ok()) {
    std::vector<GidEntry> before;
    (void)AppendAddressGids(addresses_, &before);
    (void)ClaimAddressGids(before, own_gid_);
    return claimed;
  }
  addresses_ = addresses;
  PostAsyncEvent({AsyncEventType::kGidChange, 0, nullptr});
  return Status::OK();
}

void SoftDeviceImpl::SetLid(uint16_t lid) {
  std::lock_guard<std::mutex> lock(mu);
  lid_ = lid;
  PostAsyncEvent({AsyncEventType::kLidChange, 0, nullptr});
}

void SoftDeviceImpl::DropAllPackets(bool on) {
  std::lock_guard<std::mutex> lock(mu);
  dropping_packets_ = on;
}

void SoftDeviceImpl::BreakEcmpPath(int paths, int broken) {
  std::lock_guard<std::mutex> lock(mu);
  ecmp_paths_ = paths > 0 ? paths : 0;
  ecmp_broken_ = broken;
}

void SoftDeviceImpl::DropLargePacketsToward(const Gid& gid, uint32_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu);
  large_drops_.erase(std::remove_if(large_drops_.begin(), large_drops_.end(),
                                    [&](const auto& d) { return d.first == gid; }),
                     large_drops_.end());
  if (max_bytes != 0) large_drops_.emplace_back(gid, max_bytes);
}

void SoftDeviceImpl::CorruptSendLkeys(bool on) {
  std::lock_guard<std::mutex> lock(mu);
  corrupt_send_lkeys_ = on;
}

void SoftDeviceImpl::DiscardReceives(int n) {
  std::lock_guard<std::mutex> lock(mu);
  discarding_receives_ = n;
}

bool SoftDeviceImpl::ConsumeReceiveDiscard() {
  if (discarding_receives_ == 0) return false;
  --discarding_receives_;
  return true;
}

bool SoftDeviceImpl::ConsumeRegistrationFailure() {
  if (failing_registrations_ == 0) return false;
  --failing_registrations_;
  return true;
}

// ---- Links (NIC thread, except OutboundLink and SendPacket).

Result<Link*> SoftDeviceImpl::OutboundLink(const Gid& peer) {
  auto it = outbound_.find(peer);
  if (it != outbound_.end() && !it->second->dead) return it->second;
  Gid route = GidIsLinkLocal(peer) ? MagicOf(peer) : peer;
  if (memcmp(route.data(), kGidMagic, 4) != 0 && !RouteOfAddressGid(peer, &route)) {
    return Status::InvalidArgument(
        "not a software-device GID (nor an address GID of a device "
        "of this process)");
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("soft device: socket", errno);
  socklen_t len;
  sockaddr_un addr = AddressOf(route, &len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno("soft device: connect to peer device", err);
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    close(fd);
    return Status::FromErrno("soft device: fcntl", errno);
  }
  auto link = std::make_unique<Link>();
  link->fd = fd;
  link->outbound = true;
  link->peer = peer;
  Link* raw = link.get();
  links_.push_back(std::move(link));
  outbound_[peer] = raw;
  Watch(raw);
  return raw;
}

void SoftDeviceImpl::Watch(Link* link) {
  epoll_event ev{};
  ev.events = EPOLLIN | (link->want_write ? uint32_t{EPOLLOUT} : 0u);
  ev.data.ptr = link;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, link->fd, &ev);
}

void SoftDeviceImpl::SendPacket(Link* link, const PacketHeader& header,
                                const std::string* payload) {
  if (link->dead) return;
  if (header.type == static_cast<uint8_t>(PacketType::kData)) ++counters_.data_sent;
  link->out.append(reinterpret_cast<const char*>(&header), sizeof(header));
  if (payload != nullptr) link->out.append(*payload);
  FlushLink(link);
}

void SoftDeviceImpl::FlushLink(Link* link) {
  while (!link->out.empty()) {
    ssize_t n = send(link->fd, link->out.data(), link->out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      link->out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    KillLink(link);
    return;
  }
  bool want = !link->out.empty();
  if (want != link->want_write) {
    link->want_write = want;
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? uint32_t{EPOLLOUT} : 0u);
    ev.data.ptr = link;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, link->fd, &ev);
  }
}

void SoftDeviceImpl::KillLink(Link* link) {
  if (link->dead) return;
  link->dead = true;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, link->fd, nullptr);
  close(link->fd);
  link->fd = -1;
  link->out.clear();
  link->in.clear();
  // OnLinkDead may complete requests but never adds or removes queue pairs: iterating is safe.
  for (auto& [qpn, qp] : qps_) qp->OnLinkDead(link);
}

void SoftDeviceImpl::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto link = std::make_unique<Link>();
    link->fd = fd;
    Link* raw = link.get();
    links_.push_back(std::move(link));
    Watch(raw);
  }
}

void SoftDeviceImpl::HandleReadable(Link* link) {
  char buf[64 * 1024];
  for (int round = 0; round < 16 && !link->dead; ++round) {
    ssize_t n = recv(link->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      KillLink(link);
      return;
    }
    link->in.append(buf, static_cast<size_t>(n));
    size_t off = 0;
    while (link->in.size() - off >= sizeof(PacketHeader)) {
      PacketHeader h;
      memcpy(&h, link->in.data() + off, sizeof(h));
      if (link->in.size() - off - sizeof(h) < h.length) break;
      Dispatch(link, h, reinterpret_cast<const uint8_t*>(link->in.data() + off + sizeof(h)));
      if (link->dead) return;
      off += sizeof(h) + h.length;
    }
    link->in.erase(0, off);
    if (static_cast<size_t>(n) < sizeof(buf)) break;
  }
}

void SoftDeviceImpl::Dispatch(Link* link, const PacketHeader& h, const uint8_t* payload) {
  switch (static_cast<PacketType>(h.type)) {
    case PacketType::kData:
      ++counters_.data_received;
      break;
    case PacketType::kAck:
      ++counters_.acks_received;
      break;
    case PacketType::kRnrNak:
      ++counters_.rnr_naks_received;
      break;
    case PacketType::kNotReady:
      ++counters_.not_ready_received;
      break;
    case PacketType::kErrNak:
      break;
  }
  auto it = qps_.find(h.dst_qpn);
  if (it == qps_.end()) {
    // No such queue pair (destroyed, or never existed): hardware drops the packet and the
    // sender's retries run out; we answer at once with the outcome it would reach.
    if (h.type == static_cast<uint8_t>(PacketType::kData)) {
      PacketHeader nak{static_cast<uint8_t>(PacketType::kErrNak),
                       0,
                       static_cast<uint8_t>(WcStatus::kRetryExceeded),
                       0,
                       h.src_qpn,
                       h.dst_qpn,
                       h.psn,
                       0,
                       0};
      SendPacket(link, nak, nullptr);
    }
    return;
  }
  SoftQp* qp = it->second;
  switch (static_cast<PacketType>(h.type)) {
    case PacketType::kData:
      qp->OnData(link, h, payload);
      break;
    case PacketType::kAck:
      qp->OnAck(h.psn);
      break;
    case PacketType::kRnrNak:
      qp->OnRnrNak(h.psn);
      break;
    case PacketType::kNotReady:
      qp->OnNotReady(h.psn);
      break;
    case PacketType::kErrNak:
      qp->OnErrNak(h.psn, static_cast<WcStatus>(h.status));
      break;
    default:
      KillLink(link);  // a peer device speaking nonsense
  }
}

MonoTime SoftDeviceImpl::RunTimers() {
  MonoTime now = MonoTime::Now();
  MonoTime next = MonoTime::Max();
  for (auto it = rnr_waiting.begin(); it != rnr_waiting.end();) {
    SoftQp* qp = *it;
    if (qp->rnr_deadline() <= now) qp->OnTimer(now);
    if (qp->rnr_deadline().IsMax()) {
      it = rnr_waiting.erase(it);  // resent, or gone to ERR
    } else {
      next = std::min(next, qp->rnr_deadline());
      ++it;
    }
  }
  for (auto it = lost_waiting.begin(); it != lost_waiting.end();) {
    SoftQp* qp = *it;
    if (qp->lost_deadline() <= now) qp->OnLostTimeout(now);
    if (qp->lost_deadline().IsMax()) {
      it = lost_waiting.erase(it);  // gone to ERR
    } else {
      next = std::min(next, qp->lost_deadline());
      ++it;
    }
  }
  return next;
}

void SoftDeviceImpl::NicLoop() {
  epoll_event events[64];
  int timeout_ms = -1;
  for (;;) {
    int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    std::lock_guard<std::mutex> lock(mu);
    if (stop_) return;
    for (int i = 0; i < n; ++i) {
      void* p = events[i].data.ptr;
      if (p == nullptr) {
        Accept();
      } else if (p == &wake_fd_) {
        uint64_t v;
        (void)!read(wake_fd_, &v, sizeof(v));
      } else {
        Link* link = static_cast<Link*>(p);
        if (!link->dead && (events[i].events & EPOLLOUT)) FlushLink(link);
        if (!link->dead && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
          HandleReadable(link);
        }
      }
    }
    MonoTime next = RunTimers();
    if (next.IsMax()) {
      timeout_ms = -1;
    } else {
      int64_t ns = (next - MonoTime::Now()).ToNanoseconds();
      timeout_ms = ns <= 0 ? 0 : static_cast<int>((ns + 999999) / 1000000);
    }
  }
}

}  // namespace soft

uint16_t RoceUdpSourcePort(uint32_t flow_label, uint32_t local_qpn, uint32_t remote_qpn) {
  // 0: no label; mlx5 then labels the flow by the QP numbers (rdma_calc_flow_label).
  const uint32_t fl = flow_label != 0 ? flow_label : CalcFlowLabel(local_qpn, remote_qpn);
  // rdma_flow_label_to_udp_sport: 14 bits folded from 20, in the range 0xC000..0xFFFF.
  const uint32_t low = (fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14);
  return static_cast<uint16_t>(low | 0xC000);
}

int EcmpPathOf(uint16_t udp_source_port, int paths) {
  const uint32_t hash = (uint32_t{udp_source_port} * 0x9E3779B1u) >> 16;
  return static_cast<int>(hash % static_cast<uint32_t>(paths));
}

Result<std::unique_ptr<SoftDevice>> OpenSoftDevice(const SoftDeviceOptions& options,
                                                   const Sockaddr& local) {
  RRPC_ASSIGN_OR_RETURN(const soft::SoftPortChoice port, soft::ChooseSoftPort(options, local));
  SoftDeviceOptions named = options;
  named.name = port.device;
  static std::atomic<uint32_t> next_id{0};
  Gid gid{};
  memcpy(gid.data(), soft::kGidMagic, 4);
  uint32_t pid = static_cast<uint32_t>(getpid());
  uint32_t id = next_id.fetch_add(1);
  memcpy(gid.data() + 4, &pid, 4);
  memcpy(gid.data() + 8, &id, 4);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("soft device: socket", errno);
  socklen_t len;
  sockaddr_un addr = soft::AddressOf(gid, &len);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno("soft device: bind/listen", err);
  }
  auto dev = std::make_unique<soft::SoftDeviceImpl>(named, fd, gid, port);
  RRPC_RETURN_NOT_OK(soft::ClaimAddressGids(dev->port().gid_table, gid));
  RRPC_RETURN_NOT_OK(dev->StartNic());
  return std::unique_ptr<SoftDevice>(std::move(dev));
}

}  // namespace rrpc::rdma
