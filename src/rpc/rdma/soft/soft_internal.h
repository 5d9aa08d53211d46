// Internals of the software verbs backend (soft_device.h), shared by soft_device.cc (the device:
// its NIC thread, links to peers, memory), soft_queues.cc (CQs, channels, SRQs) and soft_qp.cc
// (the RC rules).
//
// Locking: one mutex per device (SoftDeviceImpl::mu) guards every object of that device and
// every link; the NIC thread and the application threads take it for each operation. Devices
// never call into each other except through their sockets, so there is no lock order to keep.
#pragma once

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "rpc/rdma/soft/soft_device.h"
#include "rpc/rdma/soft/soft_ports.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rdma::soft {

class SoftDeviceImpl;
class SoftQp;

// The packet on a link between two devices: a fixed header then `length` payload bytes.
// kNotReady: not on any wire. A NIC drops a packet for a QP not yet in RTR and the sender
// retransmits after its timeout; this NAK tells the sender to do just that (OnNotReady).
enum class PacketType : uint8_t { kData = 1, kAck = 2, kRnrNak = 3, kErrNak = 4, kNotReady = 5 };
struct PacketHeader {
  uint8_t type;
  uint8_t has_imm;
  // kErrNak: the WcStatus the sender's request completes with. kData: the GidType of the
  // sender's GID (the entry its QP was connected on): a RoCE v2 QP ignores v1 frames and the
  // reverse, so the receiver drops a packet of the other type (the sender's retries run out).
  uint8_t status;
  // kData: the sender wants it acknowledged now (IB's AckReq bit; set on signaled sends). The
  // receiver acknowledges only those: an ACK covers every earlier packet, a NAK every packet
  // before the one it refuses. Unsignaled sends need no ACK of their own (nothing completes on
  // it), so a request/response exchange of unsignaled sends wakes no NIC thread for ACKs.
  uint8_t ack_req = 0;
  uint32_t dst_qpn;
  uint32_t src_qpn;
  uint32_t psn;
  uint32_t imm;
  uint32_t length;
};

// A byte stream to a peer device (UNIX socket). Data and NAK/ACKs for it travel both ways.
struct Link {
  int fd = -1;
  bool dead = false;
  bool outbound = false;  // we connected it (our QPs send on it)
  Gid peer{};
  std::string in;   // bytes read, not yet a whole packet
  std::string out;  // bytes to write
  bool want_write = false;
};

class SoftCq final : public CompletionQueue {
 public:
  SoftCq(SoftDeviceImpl* dev, int capacity, CompletionChannel* channel, int vector);
  ~SoftCq() override;
  Result<int> Poll(WorkCompletion* wc, int max) override;
  Status RequestNotify() override;
  int capacity() const override { return capacity_; }
  int comp_vector() const override { return vector_; }

  // REQUIRES: dev->mu held.
  void Push(const WorkCompletion& wc);
  void ReleaseStalled();
  // Drops queue pair `qpn`'s completions, as a NIC does when the QP is destroyed.
  void Clean(uint32_t qpn);

 private:
  SoftDeviceImpl* const dev_;
  const int capacity_;
  CompletionChannel* const channel_;
  const int vector_;
  std::deque<WorkCompletion> entries_;  // guarded by dev_->mu
  std::deque<WorkCompletion> stalled_;  // guarded by dev_->mu
  bool armed_ = false;                  // guarded by dev_->mu
  bool overflowed_ = false;             // guarded by dev_->mu
};

class SoftChannel final : public CompletionChannel {
 public:
  explicit SoftChannel(int event_fd) : fd_(event_fd) {}
  ~SoftChannel() override;
  int fd() const override { return fd_; }
  Result<CompletionQueue*> GetEvent() override;
  // Any thread.
  void Notify(CompletionQueue* cq);
  void Forget(CompletionQueue* cq);

 private:
  const int fd_;
  std::mutex mu_;
  std::deque<CompletionQueue*> events_;  // guarded by mu_
};

// A posted receive, its SGEs copied.
struct PostedRecv {
  static constexpr int kMaxSge = 4;
  uint64_t wr_id = 0;
  Sge sge[kMaxSge];
  int num_sge = 0;
  uint64_t capacity() const;
};

class SoftSrq final : public SharedReceiveQueue {
 public:
  SoftSrq(SoftDeviceImpl* dev, uint32_t max_wr, void* context)
      : dev_(dev), max_wr_(max_wr), context_(context) {}
  Status PostRecv(const RecvWr& wr) override;
  Status ArmLimit(uint32_t limit) override;
  // REQUIRES: dev->mu held. False when none is posted.
  bool Take(PostedRecv* out);

 private:
  SoftDeviceImpl* const dev_;
  const uint32_t max_wr_;
  void* const context_;            // what its async events carry
  std::deque<PostedRecv> posted_;  // guarded by dev_->mu
  uint32_t limit_ = 0;             // 0: disarmed
};

// A reliable-connected queue pair with the RC rules (soft_qp.cc).
class SoftQp final : public QueuePair {
 public:
  SoftQp(SoftDeviceImpl* dev, const void* pd, const QpInitAttr& attr, uint32_t qpn, QpCaps caps);
  ~SoftQp() override;
  uint32_t qp_num() const override { return qpn_; }
  QpState state() const override;
  const QpCaps& caps() const override { return caps_; }
  Status ToInit(int port, uint16_t pkey_index) override;
  Status Connect(const QpConnectParams& params) override;
  Status ToError() override;
  Status PostSend(const SendWr& wr) override;
  Status PostRecv(const RecvWr& wr) override;

  // The NIC thread, for packets addressed to this QP. REQUIRES: dev->mu held.
  void OnData(Link* link, const PacketHeader& h, const uint8_t* payload);
  void OnAck(uint32_t psn);
  void OnRnrNak(uint32_t psn);
  void OnNotReady(uint32_t psn);
  // The attributes it was connected with; false before RTR. REQUIRES dev_->mu held.
  bool connect_params(QpConnectParams* params) const {
    if (state_ == QpState::kReset || state_ == QpState::kInit) return false;
    *params = params_;
    return true;
  }
  void OnErrNak(uint32_t psn, WcStatus status);
  void OnLinkDead(Link* link);
  // The device found the QP broken (InjectAsyncEvent): ERR, then kQpFatal with its context.
  void OnFatal();
  // When the RNR wait ends (MonoTime::Max() when not waiting); OnTimer resends from there.
  MonoTime rnr_deadline() const { return rnr_deadline_; }
  void OnTimer(MonoTime now);
  // When a dropped send's retry timeout ends (MonoTime::Max() when none is pending); then
  // OnLostTimeout fails the QP with kRetryExceeded.
  MonoTime lost_deadline() const { return lost_deadline_; }
  void OnLostTimeout(MonoTime now);

 private:
  struct Outstanding {
    uint64_t wr_id;
    uint32_t psn;
    bool signaled;
    bool sent;
    bool has_imm;
    uint32_t imm;
    std::string payload;
    // Not inline: the memory the payload came from, checked again at completion.
    Sge sge[PostedRecv::kMaxSge];
    int num_sge = 0;
  };
  // REQUIRES: dev->mu held.
  void Transmit(Outstanding* s);
  void EnterError(WcStatus first_status);
  void CompleteSend(const Outstanding& s, WcStatus status);
  // Completes an acknowledged send: success when its memory still holds what was posted
  // (SoftDeviceOptions::verify_send_memory), else a protection error that puts the QP in ERR
  // (returns false: stop completing).
  bool CompleteAcked(const Outstanding& s);
  void CompleteRecv(uint64_t wr_id, WcStatus status, uint32_t len, bool has_imm, uint32_t imm);
  Status CheckSges(const Sge* sge, int n) const;

  SoftDeviceImpl* const dev_;
  const void* const pd_;
  SoftCq* const send_cq_;
  SoftCq* const recv_cq_;
  SoftSrq* const srq_;
  void* const context_;  // what its async events carry
  const uint32_t qpn_;
  const QpCaps caps_;
  // All below guarded by dev_->mu.
  QpState state_ = QpState::kReset;
  QpConnectParams params_;
  GidType gid_type_ = GidType::kIb;  // of the local GID entry params_.gid_index names
  Link* link_ = nullptr;             // where our sends go
  std::deque<Outstanding> unacked_;  // posted sends not yet acknowledged, in PSN order
  uint32_t next_psn_ = 0;            // for the next posted send
  uint32_t expected_psn_ = 0;        // for the next incoming message
  uint32_t slots_used_ = 0;          // send-queue slots held (unsignaled ones until a signaled
  uint32_t unsignaled_done_ = 0;     // completion behind them frees them, as on hardware)
  int rnr_left_ = 0;
  int retry_left_ = 0;  // retransmissions left for packets the peer's QP was not ready for
  MonoTime rnr_deadline_ = MonoTime::Max();
  MonoTime lost_deadline_ = MonoTime::Max();
  // The private receive queue; none on a QP attached to an SRQ (as on hardware, where such a
  // QP has no receive ring; an empty std::deque still allocates about 600 bytes, which 10,000
  // SRQ connections would pay for nothing).
  const std::unique_ptr<std::deque<PostedRecv>> rq_;
};

// The device: owns the NIC thread, the links and the registry of QPs and memory regions.
class SoftDeviceImpl final : public SoftDevice {
 public:
  // Opens on `port` (soft_ports.h, ChooseSoftPort): its number and its addresses' GIDs.
  SoftDeviceImpl(const SoftDeviceOptions& options, int listen_fd, Gid gid,
                 const SoftPortChoice& port);
  ~SoftDeviceImpl() override;
  Status StartNic();

  const std::string& device_name() const override { return options_.name; }
  PortInfo port() const override {
    MutexLock lock(port_mu_);
    return port_;
  }
  uint32_t max_msg_size() const { return kMaxMsgSize; }
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override;
  Result<std::unique_ptr<CompletionChannel>> CreateChannel() override;
  Result<std::unique_ptr<CompletionQueue>> CreateCq(int entries,
                                                    CompletionChannel* channel) override;
  int async_fd() const override { return async_fd_; }
  bool NextAsyncEvent(AsyncEvent* event) override;
  void DropPeers() override;
  void StallCompletions(bool stalled) override;
  void FailRegistrations(int n) override;
  void CorruptSendLkeys(bool on) override;
  void DropAllPackets(bool on) override;
  void BreakEcmpPath(int paths, int broken) override;
  // BreakEcmpPath: whether a data packet leaving on UDP source port `sport` is lost. REQUIRES mu
  // held.
  bool ecmp_drops(uint16_t sport) const {
    return ecmp_paths_ > 0 && EcmpPathOf(sport, ecmp_paths_) == ecmp_broken_;
  }
  void DropLargePacketsToward(const Gid& gid, uint32_t max_bytes) override;
  // DropLargePacketsToward: whether a data packet of `bytes` toward `gid` is lost. REQUIRES mu
  // held.
  bool drops_large(const Gid& gid, uint32_t bytes) const {
    for (const auto& [to, max_bytes] : large_drops_) {
      if (to == gid) return bytes > max_bytes;
    }
    return false;
  }
  Status UseGidIndex(int index) override;
  void SetPortActive(bool active) override;
  Status SetPortAddresses(const std::vector<std::string>& addresses) override;
  void SetLid(uint16_t lid) override;
  // DropAllPackets, or the port is down. REQUIRES mu held.
  bool dropping_packets() const { return dropping_packets_ || port_down_; }
  // After an injected kDeviceFatal the device is dead, as a NIC after a fatal error: nothing
  // can be created on it (PD, channel, CQ, QP, SRQ, memory region); what exists may still be
  // destroyed. REQUIRES mu held.
  Status CheckAlive() const;
  Status Alive() {  // the same, taking mu
    std::lock_guard<std::mutex> lock(mu);
    return CheckAlive();
  }
  // Makes the NIC thread look at its timers again (a deadline set on another thread).
  void Wake() {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  void DiscardReceives(int n) override;
  void InjectAsyncEvent(AsyncEventType type, QueuePair* qp) override;
  void HoldControlVerbs(bool held) override;
  int control_verbs_held() override;
  void HoldRtrToward(const Gid& gid, bool held) override;
  int rtrs_held() override;
  PortCounters port_counters() override {
    std::lock_guard<std::mutex> lock(mu);
    return counters_;
  }
  // Called on entry by every control-path verb, without mu: the modelled delay, then the wait
  // while HoldControlVerbs holds them.
  void ControlVerb();
  // Called by modify-QP to RTR toward `remote`, without mu: waits while HoldRtrToward holds it.
  void RtrToward(const Gid& remote);

  const SoftDeviceOptions& options() const { return options_; }

  std::mutex mu;
  // All below: REQUIRES mu held.
  bool stalled() const { return stalled_; }
  void PostAsyncEvent(const AsyncEvent& event);
  // An event that follows completions already pushed (last WQE reached): held back with them
  // while completions are stalled.
  void PostAsyncEventAfterCompletions(const AsyncEvent& event);
  // Drops the queued events of queue pair `qpn` (destroyed: verbs delivers none after).
  void ForgetAsyncEvents(uint32_t qpn);
  uint32_t NewQpNum() { return next_qpn_++; }
  uint32_t NewKey() { return next_key_++; }
  void AddQp(SoftQp* qp) { qps_[qp->qp_num()] = qp; }
  bool ConnectParamsOf(uint32_t qp_num, QpConnectParams* params) override;
  void RemoveQp(uint32_t qpn) {
    auto it = qps_.find(qpn);
    if (it == qps_.end()) return;
    rnr_waiting.erase(it->second);
    lost_waiting.erase(it->second);
    qps_.erase(it);
  }
  // QPs waiting out an RNR delay: the NIC loop's timers look at these only (looking at every QP
  // after every wakeup made the software NIC O(connections) per packet). REQUIRES mu held.
  std::unordered_set<SoftQp*> rnr_waiting;
  // QPs whose sends were dropped (DropAllPackets), waiting out their retry timeout.
  std::unordered_set<SoftQp*> lost_waiting;
  void AddCq(SoftCq* cq) { cqs_.insert(cq); }
  void RemoveCq(SoftCq* cq) { cqs_.erase(cq); }
  bool ConsumeRegistrationFailure();
  bool corrupt_send_lkeys() const { return corrupt_send_lkeys_; }
  // DiscardReceives: true (counting it) when the receive being posted is to be lost.
  bool ConsumeReceiveDiscard();
  // The link our QPs use to send to `peer`, connected on first use.
  Result<Link*> OutboundLink(const Gid& peer);
  // Queues a packet on `link` and writes what the socket takes now.
  void SendPacket(Link* link, const PacketHeader& header, const std::string* payload);
  // Memory regions, by lkey: [addr, addr + length) of the PD `pd`.
  struct MrEntry {
    const void* pd;
    uint8_t* addr;
    size_t length;
  };
  std::map<uint32_t, MrEntry> mrs;
  uint64_t pinned_bytes = 0;  // registered, against options().locked_memory_limit

 private:
  void NicLoop();
  void HandleReadable(Link* link);
  void HandleWritable(Link* link);
  void Accept();
  void FlushLink(Link* link);
  void KillLink(Link* link);
  void Dispatch(Link* link, const PacketHeader& header, const uint8_t* payload);
  MonoTime RunTimers();  // returns the next timer deadline (MonoTime::Max() when none)
  void Watch(Link* link);
  // The port as its hardware is now (the fields below, REQUIRES mu held), and port_ made so.
  PortInfo ReadPort() const;
  void RefreshPort() { SetPort(ReadPort()); }  // REQUIRES mu held
  void SetPort(PortInfo port) {
    MutexLock lock(port_mu_);
    port_ = std::move(port);
  }

  static constexpr uint32_t kMaxMsgSize = 1u << 30;
  const SoftDeviceOptions options_;
  const Gid own_gid_;  // names its socket; its address GIDs route to it (soft_ports.h)
  const int port_num_;
  // The port's hardware (guarded by mu): what ReadPort reads.
  std::vector<std::string> addresses_;
  uint16_t lid_ = 0;
  bool port_down_ = false;
  int pinned_gid_index_ = -1;  // UseGidIndex
  // The port as the context last read it (at open, then on each port event read): port().
  // Its own lock, taken alone or under mu (never mu under it).
  mutable Mutex port_mu_;
  PortInfo port_ RRPC_GUARDED_BY(port_mu_);
  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int async_fd_ = -1;
  std::thread nic_;
  bool stop_ = false;
  bool stalled_ = false;
  int failing_registrations_ = 0;
  bool corrupt_send_lkeys_ = false;
  bool dropping_packets_ = false;
  int ecmp_paths_ = 0;  // BreakEcmpPath
  int ecmp_broken_ = 0;
  std::vector<std::pair<Gid, uint32_t>> large_drops_;  // DropLargePacketsToward: gid, max bytes
  bool dead_ = false;                                  // InjectAsyncEvent(kDeviceFatal)
  int discarding_receives_ = 0;
  PortCounters counters_;
  uint32_t next_qpn_ = 0x100;
  uint32_t next_key_ = 0x1000;
  uint32_t next_vector_ = 0;
  std::map<uint32_t, SoftQp*> qps_;
  std::set<SoftCq*> cqs_;
  std::vector<std::unique_ptr<Link>> links_;  // kept (dead ones too) until the device goes
  std::map<Gid, Link*> outbound_;
  std::deque<AsyncEvent> async_events_;
  std::deque<AsyncEvent> stalled_events_;  // PostAsyncEventAfterCompletions while stalled
  // HoldControlVerbs: its own lock, never held with mu.
  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool control_held_ = false;
  int control_waiting_ = 0;
  std::set<Gid> rtr_held_toward_;  // HoldRtrToward: under control_mu_ too
  int rtr_waiting_ = 0;
};

}  // namespace rrpc::rdma::soft
