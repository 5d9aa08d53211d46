// The libibverbs backend: each interface object wraps its ibv_ object (verbs_ibv.h).
#include "rpc/rdma/ibv/verbs_ibv.h"

#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "rpc/rdma/bootstrap/gid_choice.h"
#include "rpc/rdma/ibv/verbs_ibv_library.h"
#include "rpc/rdma/ibv/verbs_ibv_ports.h"
#include "rpc/rdma/memlock.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rdma {
namespace {

using ibv::Library;

// Our Sge is laid out as ibv_sge, so scatter-gather lists pass through without copying.
static_assert(sizeof(Sge) == sizeof(ibv_sge) && offsetof(Sge, addr) == offsetof(ibv_sge, addr) &&
                  offsetof(Sge, length) == offsetof(ibv_sge, length) &&
                  offsetof(Sge, lkey) == offsetof(ibv_sge, lkey),
              "Sge must match ibv_sge");

WcStatus FromIbv(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return WcStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR:
      return WcStatus::kLocalLengthError;
    case IBV_WC_LOC_PROT_ERR:
      return WcStatus::kLocalProtectionError;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::kFlushed;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return WcStatus::kRnrRetryExceeded;
    case IBV_WC_RETRY_EXC_ERR:
      return WcStatus::kRetryExceeded;
    case IBV_WC_REM_INV_REQ_ERR:
      return WcStatus::kRemoteInvalidRequest;
    default:
      return WcStatus::kGeneralError;
  }
}

ibv_mtu MtuEnum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

Status Errno(const char* what, int err) { return Status::FromErrno(what, err ? err : EIO); }

// One receive request in the library's form. Sge has ibv_sge's layout (the static_assert above),
// so the list is passed as is.
ibv_recv_wr ToIbvRecvWr(const RecvWr& wr) {
  ibv_recv_wr w{};
  w.wr_id = wr.wr_id;
  w.sg_list = reinterpret_cast<ibv_sge*>(const_cast<Sge*>(wr.sg_list));
  w.num_sge = wr.num_sge;
  return w;
}

class IbvMr final : public MemoryRegion {
 public:
  IbvMr(const Library* lib, ibv_mr* mr) : lib_(lib), mr_(mr) {}
  ~IbvMr() override { lib_->dereg_mr(mr_); }
  uint8_t* addr() const override { return static_cast<uint8_t*>(mr_->addr); }
  size_t length() const override { return mr_->length; }
  uint32_t lkey() const override { return mr_->lkey; }
  uint32_t rkey() const override { return mr_->rkey; }

 private:
  const Library* const lib_;
  ibv_mr* const mr_;
};

class IbvCq final : public CompletionQueue {
 public:
  IbvCq(const Library* lib, ibv_cq* cq, int vector) : lib_(lib), cq_(cq), vector_(vector) {
    cq_->cq_context = this;
  }
  ~IbvCq() override {
    if (unacked_events_ > 0) lib_->ack_cq_events(cq_, unacked_events_);
    lib_->destroy_cq(cq_);
  }
  Result<int> Poll(WorkCompletion* out, int max) override {
    ibv_wc wc[32];
    int total = 0;
    while (total < max) {
      int n = ibv_poll_cq(cq_, std::min(max - total, 32), wc);
      if (n < 0) return Status::IOError("ibv_poll_cq failed");
      for (int i = 0; i < n; ++i) {
        WorkCompletion& w = out[total + i];
        w.wr_id = wc[i].wr_id;
        w.status = FromIbv(wc[i].status);
        w.opcode = (wc[i].opcode & IBV_WC_RECV) ? WcOpcode::kRecv : WcOpcode::kSend;
        w.byte_len = wc[i].byte_len;
        w.qp_num = wc[i].qp_num;
        w.has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
        w.imm = w.has_imm ? ntohl(wc[i].imm_data) : 0;
      }
      total += n;
      if (n < 32) break;
    }
    return total;
  }
  Status RequestNotify() override {
    int rc = ibv_req_notify_cq(cq_, 0);
    return rc == 0 ? Status::OK() : Errno("ibv_req_notify_cq", rc);
  }
  int capacity() const override { return cq_->cqe; }
  int comp_vector() const override { return vector_; }
  // Events are acknowledged in batches (each ack takes a lock in libibverbs).
  void CountEvent() {
    if (++unacked_events_ >= 64) {
      lib_->ack_cq_events(cq_, unacked_events_);
      unacked_events_ = 0;
    }
  }
  ibv_cq* raw() const { return cq_; }

 private:
  const Library* const lib_;
  ibv_cq* const cq_;
  const int vector_;
  unsigned unacked_events_ = 0;  // the channel's reader thread only
};

class IbvChannel final : public CompletionChannel {
 public:
  IbvChannel(const Library* lib, ibv_comp_channel* ch) : lib_(lib), ch_(ch) {}
  ~IbvChannel() override { lib_->destroy_comp_channel(ch_); }
  int fd() const override { return ch_->fd; }
  Result<CompletionQueue*> GetEvent() override {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (lib_->get_cq_event(ch_, &cq, &ctx) != 0) {
      if (errno == EAGAIN) return nullptr;
      return Errno("ibv_get_cq_event", errno);
    }
    auto* ours = static_cast<IbvCq*>(cq->cq_context);
    ours->CountEvent();
    return static_cast<CompletionQueue*>(ours);
  }
  ibv_comp_channel* raw() const { return ch_; }

 private:
  const Library* const lib_;
  ibv_comp_channel* const ch_;
};

class IbvSrq final : public SharedReceiveQueue {
 public:
  IbvSrq(const Library* lib, ibv_srq* srq) : lib_(lib), srq_(srq) {}
  ~IbvSrq() override { lib_->destroy_srq(srq_); }
  Status PostRecv(const RecvWr& wr) override {
    ibv_recv_wr w = ToIbvRecvWr(wr);
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_srq_recv(srq_, &w, &bad);
    return rc == 0 ? Status::OK() : Errno("ibv_post_srq_recv", rc);
  }
  Status ArmLimit(uint32_t limit) override {
    ibv_srq_attr attr{};
    attr.srq_limit = limit;
    int rc = lib_->modify_srq(srq_, &attr, IBV_SRQ_LIMIT);
    return rc == 0 ? Status::OK() : Errno("ibv_modify_srq", rc);
  }
  ibv_srq* raw() const { return srq_; }

 private:
  const Library* const lib_;
  ibv_srq* const srq_;
};

class IbvQp final : public QueuePair {
 public:
  IbvQp(const Library* lib, ibv_qp* qp, const QpCaps& caps, bool ethernet)
      : lib_(lib), qp_(qp), caps_(caps), ethernet_(ethernet) {}
  ~IbvQp() override { lib_->destroy_qp(qp_); }
  uint32_t qp_num() const override { return qp_->qp_num; }
  QpState state() const override {
    // The QP's state field is kept current by libibverbs after each modify.
    switch (qp_->state) {
      case IBV_QPS_RESET:
        return QpState::kReset;
      case IBV_QPS_INIT:
        return QpState::kInit;
      case IBV_QPS_RTR:
        return QpState::kRtr;
      case IBV_QPS_RTS:
        return QpState::kRts;
      default:
        return QpState::kError;
    }
  }
  const QpCaps& caps() const override { return caps_; }
  Status ToInit(int port, uint16_t pkey_index) override {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = pkey_index;
    attr.port_num = static_cast<uint8_t>(port);
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    int rc = lib_->modify_qp(qp_, &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    return rc == 0 ? Status::OK() : Errno("modify QP to INIT", rc);
  }
  Status Connect(const QpConnectParams& p) override {
    RRPC_RETURN_NOT_OK(CheckServiceLevel(p.service_level, ethernet_));
    RRPC_RETURN_NOT_OK(CheckFlowLabel(p.flow_label));
    RRPC_RETURN_NOT_OK(CheckAckTimeout(p.timeout));
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = MtuEnum(p.path_mtu);
    attr.dest_qp_num = p.remote.qp_num;
    attr.rq_psn = p.remote.psn & 0xFFFFFF;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = p.min_rnr_timer;
    attr.ah_attr.dlid = p.remote.lid;
    attr.ah_attr.port_num = static_cast<uint8_t>(p.port);
    attr.ah_attr.sl = p.service_level;
    if (p.global) {  // RoCE, or IB across subnets: route by GID
      attr.ah_attr.is_global = 1;
      memcpy(attr.ah_attr.grh.dgid.raw, p.remote.gid.data(), 16);
      attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(p.gid_index);
      attr.ah_attr.grh.hop_limit = 64;
      attr.ah_attr.grh.traffic_class = p.traffic_class;
      attr.ah_attr.grh.flow_label = p.flow_label;
    }
    int rc = lib_->modify_qp(qp_, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) return Errno("modify QP to RTR", rc);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = p.timeout;
    attr.retry_cnt = p.retry_cnt;
    attr.rnr_retry = p.rnr_retry;
    attr.sq_psn = p.local_psn & 0xFFFFFF;
    attr.max_rd_atomic = 1;
    rc = lib_->modify_qp(qp_, &attr,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    return rc == 0 ? Status::OK() : Errno("modify QP to RTS", rc);
  }
  Status ToError() override {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    int rc = lib_->modify_qp(qp_, &attr, IBV_QP_STATE);
    return rc == 0 ? Status::OK() : Errno("modify QP to ERR", rc);
  }
  Status PostSend(const SendWr& wr) override {
    ibv_send_wr w{};
    w.wr_id = wr.wr_id;
    w.sg_list = reinterpret_cast<ibv_sge*>(const_cast<Sge*>(wr.sg_list));
    w.num_sge = wr.num_sge;
    w.opcode = wr.has_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    w.send_flags = (wr.signaled ? IBV_SEND_SIGNALED : 0) | (wr.inline_data ? IBV_SEND_INLINE : 0);
    if (wr.has_imm) w.imm_data = htonl(wr.imm);
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp_, &w, &bad);
    return rc == 0 ? Status::OK() : Errno("ibv_post_send", rc);
  }
  Status PostRecv(const RecvWr& wr) override {
    ibv_recv_wr w = ToIbvRecvWr(wr);
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(qp_, &w, &bad);
    return rc == 0 ? Status::OK() : Errno("ibv_post_recv", rc);
  }

 private:
  const Library* const lib_;
  ibv_qp* const qp_;
  const QpCaps caps_;
  const bool ethernet_;  // a RoCE port: service levels 0..7 only
};

class IbvPd final : public ProtectionDomain {
 public:
  IbvPd(const Library* lib, ibv_pd* pd, bool ethernet) : lib_(lib), pd_(pd), ethernet_(ethernet) {}
  ~IbvPd() override { lib_->dealloc_pd(pd_); }
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length) override {
    ibv_mr* mr = lib_->reg_mr(pd_, addr, length, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) return RegistrationError(errno, length, LockedMemoryLimit());
    return std::unique_ptr<MemoryRegion>(new IbvMr(lib_, mr));
  }
  Result<std::unique_ptr<QueuePair>> CreateQp(const QpInitAttr& a) override {
    ibv_qp_init_attr init{};
    init.send_cq = static_cast<IbvCq*>(a.send_cq)->raw();
    init.recv_cq = static_cast<IbvCq*>(a.recv_cq)->raw();
    init.srq = a.srq ? static_cast<IbvSrq*>(a.srq)->raw() : nullptr;
    init.qp_type = IBV_QPT_RC;
    init.qp_context = a.context;  // comes back in the QP's async events
    init.cap.max_send_wr = a.caps.max_send_wr;
    init.cap.max_recv_wr = a.srq ? 0 : a.caps.max_recv_wr;
    init.cap.max_send_sge = a.caps.max_send_sge;
    init.cap.max_recv_sge = a.caps.max_recv_sge;
    // Ask for the inline cap; some devices refuse any (or a large) one: ask smaller.
    for (uint32_t inl = a.caps.max_inline_data;; inl /= 2) {
      init.cap.max_inline_data = inl;
      ibv_qp_init_attr attempt = init;
      ibv_qp* qp = lib_->create_qp(pd_, &attempt);
      if (qp != nullptr) {
        QpCaps granted = a.caps;  // read back what the device granted
        granted.max_send_wr = attempt.cap.max_send_wr;
        granted.max_recv_wr = attempt.cap.max_recv_wr;
        granted.max_send_sge = attempt.cap.max_send_sge;
        granted.max_inline_data = attempt.cap.max_inline_data;
        return std::unique_ptr<QueuePair>(new IbvQp(lib_, qp, granted, ethernet_));
      }
      if (inl == 0) return Errno("ibv_create_qp", errno);
    }
  }
  Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(uint32_t max_wr, void* context) override {
    ibv_srq_init_attr init{};
    init.srq_context = context;  // comes back in the SRQ's async events
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    ibv_srq* srq = lib_->create_srq(pd_, &init);
    if (srq == nullptr) return Errno("ibv_create_srq", errno);
    return std::unique_ptr<SharedReceiveQueue>(new IbvSrq(lib_, srq));
  }

 private:
  const Library* const lib_;
  ibv_pd* const pd_;
  const bool ethernet_;
};

class IbvContext final : public Context {
 public:
  IbvContext(const Library* lib, ibv_context* ctx, std::string name, PortInfo port,
             const VerbsDeviceOptions& options)
      : lib_(lib),
        ctx_(ctx),
        name_(std::move(name)),
        options_(options),
        port_num_(port.port),
        ethernet_(port.ethernet),
        num_comp_vectors_(port.num_comp_vectors),
        port_(std::move(port)) {
    fcntl(ctx_->async_fd, F_SETFL, fcntl(ctx_->async_fd, F_GETFL) | O_NONBLOCK);
  }
  ~IbvContext() override { lib_->close_device(ctx_); }
  const std::string& device_name() const override { return name_; }
  PortInfo port() const override {
    MutexLock lock(port_mu_);
    return port_;
  }
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override {
    ibv_pd* pd = lib_->alloc_pd(ctx_);
    if (pd == nullptr) return Errno("ibv_alloc_pd", errno);
    return std::unique_ptr<ProtectionDomain>(new IbvPd(lib_, pd, ethernet_));
  }
  Result<std::unique_ptr<CompletionChannel>> CreateChannel() override {
    ibv_comp_channel* ch = lib_->create_comp_channel(ctx_);
    if (ch == nullptr) return Errno("ibv_create_comp_channel", errno);
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    return std::unique_ptr<CompletionChannel>(new IbvChannel(lib_, ch));
  }
  Result<std::unique_ptr<CompletionQueue>> CreateCq(int entries,
                                                    CompletionChannel* channel) override {
    ibv_comp_channel* ch = channel ? static_cast<IbvChannel*>(channel)->raw() : nullptr;
    const int vector = static_cast<int>(next_vector_.fetch_add(1, std::memory_order_relaxed) %
                                        static_cast<unsigned>(std::max(1, num_comp_vectors_)));
    ibv_cq* cq = lib_->create_cq(ctx_, entries, nullptr, ch, vector);
    if (cq == nullptr) return Errno("ibv_create_cq", errno);
    return std::unique_ptr<CompletionQueue>(new IbvCq(lib_, cq, vector));
  }
  int async_fd() const override { return ctx_->async_fd; }
  bool NextAsyncEvent(AsyncEvent* out) override {
    ibv_async_event ev;
    if (lib_->get_async_event(ctx_, &ev) != 0) return false;
    *out = AsyncEvent{};
    // Objects are named by the context pointers their creators set (qp_context, srq_context;
    // our IbvCq for a CQ): the library's own objects mean nothing above this file.
    switch (ev.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
        out->type = AsyncEventType::kQpFatal;
        out->qp_num = ev.element.qp->qp_num;
        out->context = ev.element.qp->qp_context;
        break;
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        out->type = AsyncEventType::kQpLastWqeReached;
        out->qp_num = ev.element.qp->qp_num;
        out->context = ev.element.qp->qp_context;
        break;
      case IBV_EVENT_CQ_ERR:
        out->type = AsyncEventType::kCqError;
        out->context =
            static_cast<CompletionQueue*>(static_cast<IbvCq*>(ev.element.cq->cq_context));
        break;
      case IBV_EVENT_SRQ_LIMIT_REACHED:
        out->type = AsyncEventType::kSrqLimitReached;
        out->context = ev.element.srq->srq_context;
        break;
      case IBV_EVENT_SRQ_ERR:
        out->type = AsyncEventType::kSrqError;
        out->context = ev.element.srq->srq_context;
        break;
      case IBV_EVENT_PORT_ACTIVE:
        out->type = AsyncEventType::kPortActive;
        break;
      case IBV_EVENT_PORT_ERR:
        out->type = AsyncEventType::kPortError;
        break;
      case IBV_EVENT_GID_CHANGE:
        out->type = AsyncEventType::kGidChange;
        break;
      case IBV_EVENT_LID_CHANGE:
        out->type = AsyncEventType::kLidChange;
        break;
      case IBV_EVENT_DEVICE_FATAL:
        out->type = AsyncEventType::kDeviceFatal;
        break;
      default:
        out->type = AsyncEventType::kOther;
        break;
    }
    const bool port_event =
        (out->type == AsyncEventType::kPortActive || out->type == AsyncEventType::kPortError ||
         out->type == AsyncEventType::kGidChange || out->type == AsyncEventType::kLidChange) &&
        ev.element.port_num == port_num_;
    lib_->ack_async_event(&ev);
    if (port_event) RefreshPort();
    return true;
  }

 private:
  // Reads the port again (its state, LID, MTU and GID table; the GID re-chosen as at open), as
  // its events say it changed. A port that is not ACTIVE keeps what it had, marked inactive.
  void RefreshPort() {
    ibv_port_attr pattr{};
    const bool queried = lib_->query_port(ctx_, static_cast<uint8_t>(port_num_), &pattr) == 0;
    Result<PortInfo> info = Status::NotFound("port not ACTIVE");
    if (queried && pattr.state == IBV_PORT_ACTIVE) {
      info = ibv::PortInfoOf(lib_, ctx_, name_, port_num_, pattr, options_);
    }
    MutexLock lock(port_mu_);
    if (info.ok()) {
      port_ = std::move(info).value();
    } else {
      port_.active = false;
    }
  }

  const Library* const lib_;
  ibv_context* const ctx_;
  const std::string name_;
  const VerbsDeviceOptions options_;
  const int port_num_;
  const bool ethernet_;
  const int num_comp_vectors_;
  mutable Mutex port_mu_;
  PortInfo port_ RRPC_GUARDED_BY(port_mu_);  // replaced by RefreshPort (the events' reader)
  std::atomic<unsigned> next_vector_{0};
};

}  // namespace

bool VerbsLibraryAvailable() { return ibv::Load() != nullptr; }

Result<std::unique_ptr<Context>> OpenVerbsDevice(const VerbsDeviceOptions& options,
                                                 const Sockaddr& local) {
  const Library* lib = ibv::Load();
  if (lib == nullptr) return Status::NotFound("libibverbs.so.1 not found");
  return OpenVerbsDeviceWith(*lib, options, local);
}

Result<std::unique_ptr<Context>> OpenVerbsDeviceWith(const ibv::Library& library,
                                                     const VerbsDeviceOptions& options,
                                                     const Sockaddr& local) {
  const Library* lib = &library;
  // Only when asked (VerbsDeviceOptions::fork_init), before the device list as libibverbs
  // wants: before kernel 5.13 it makes every registration madvise(DONTFORK) its pages (VMA
  // splits toward vm.max_map_count, failures on hugetlbfs), a cost only a process that forks
  // with registered memory should pay. libibverbs makes a second call a no-op.
  if (options.fork_init && lib->fork_init != nullptr) {
    const int rc = lib->fork_init();
    if (rc != 0) return Status::FromErrno("ibv_fork_init", rc);
  }
  int n = 0;
  ibv_device** list = lib->get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list) lib->free_device_list(list);
    return Status::NotFound("no RDMA device");
  }
  // Every device (or the one named) and on it every port (or the one given), as candidates for
  // ChoosePort (gid_choice.h): an ACTIVE port with a usable GID, the one holding `local`'s
  // address (or on its netdev) first. What the others said goes into the error.
  std::string tried;
  struct Opened {
    std::string name;
    ibv_context* ctx;
  };
  std::vector<Opened> opened;
  std::vector<PortCandidate> candidates;
  std::vector<std::pair<size_t, ibv_port_attr>> where;  // per candidate: its device, attributes
  for (int i = 0; i < n; ++i) {
    const std::string name = lib->get_device_name(list[i]);
    if (!options.device.empty() && options.device != name) continue;
    ibv_context* ctx = lib->open_device(list[i]);
    if (ctx == nullptr) {
      tried += name + ": cannot open (" + strerror(errno) + "); ";
      continue;
    }
    opened.push_back({name, ctx});
    ibv_device_attr dattr{};
    const int ports = lib->query_device(ctx, &dattr) == 0 ? dattr.phys_port_cnt : 0;
    for (int port = 1; port <= ports; ++port) {
      if (options.port != 0 && port != options.port) continue;
      ibv_port_attr pattr{};
      PortCandidate c;
      c.device = name;
      c.port = port;
      if (lib->query_port(ctx, static_cast<uint8_t>(port), &pattr) == 0) {
        c.active = pattr.state == IBV_PORT_ACTIVE;
        if (c.active) c.table = ibv::GidTableOf(lib, ctx, name, port, pattr);
      }
      if (options.pkey >= 0 && c.active) {  // only ports in the partition asked for
        uint16_t value;
        const Result<uint16_t> index = ibv::PkeyIndexOf(
            lib, ctx, name, port, pattr, static_cast<uint16_t>(options.pkey), &value);
        if (!index.ok()) {
          tried += index.status().message() + "; ";
          c.table.clear();
        }
      }
      if (options.gid_index >= 0) {  // only ports that have the entry asked for
        std::vector<GidEntry> pinned;
        for (const GidEntry& e : c.table) {
          if (e.index == options.gid_index) pinned.push_back(e);
        }
        c.table = std::move(pinned);
      }
      candidates.push_back(std::move(c));
      where.emplace_back(opened.size() - 1, pattr);
    }
  }
  lib->free_device_list(list);
  // The interface is looked up only when no port holds the address itself.
  bool holds = false;
  for (const PortCandidate& c : candidates) holds |= TableHoldsAddress(c.table, local);
  const Result<size_t> chosen =
      ChoosePort(candidates, local, holds ? 0 : LocalInterfaceIndex(local));
  Result<PortInfo> info = Status::NotFound("no port");
  size_t keep = opened.size();
  if (chosen.ok()) {
    const auto& [device, pattr] = where[*chosen];
    info = ibv::PortInfoOf(lib, opened[device].ctx, opened[device].name, candidates[*chosen].port,
                           pattr, options);
    if (info.ok()) keep = device;
  }
  for (size_t d = 0; d < opened.size(); ++d) {
    if (d != keep) lib->close_device(opened[d].ctx);
  }
  if (keep < opened.size()) {
    return std::unique_ptr<Context>(
        new IbvContext(lib, opened[keep].ctx, opened[keep].name, *info, options));
  }
  if (opened.empty() && tried.empty()) {
    return Status::NotFound("no RDMA device named", options.device);
  }
  if (!chosen.ok()) return tried.empty() ? chosen.status() : chosen.status().CloneAndPrepend(tried);
  return info.status();
}

}  // namespace rrpc::rdma
