// rrpc's narrow verbs interface: the part of RC verbs the RDMA transport uses, behind which sit
// two backends, libibverbs (verbs_ibv.h, loaded at run time) and the strict software backend
// (soft/soft_device.h). Objects are created from a Context and must be destroyed before it, a
// QueuePair before its completion queues and SRQ, memory regions before their protection domain.
// Thread-safety: as verbs, each object may be used from any thread; the transport uses a
// connection's objects from its reactor thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "rpc/rdma/verbs_types.h"
#include "rrpc/util/status.h"

namespace rrpc::rdma {

class CompletionQueue;
class SharedReceiveQueue;

// Registered memory: the NIC may read (sends) and write (receives) [addr, addr + length).
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;  // deregisters
  virtual uint8_t* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
};

// Signals, through a pollable fd, that an armed completion queue received a completion.
class CompletionChannel {
 public:
  virtual ~CompletionChannel() = default;
  // Becomes readable when an event waits: watch it in the event loop.
  virtual int fd() const = 0;
  // Non-blocking: the queue an event was for, nullptr when none waits. Re-arm it with
  // RequestNotify() before polling it empty, or completions may arrive unseen.
  virtual Result<CompletionQueue*> GetEvent() = 0;
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Takes up to `max` completions; an error once the queue overflowed (it is then unusable).
  virtual Result<int> Poll(WorkCompletion* wc, int max) = 0;
  // Arms the queue: the next completion signals its channel once.
  virtual Status RequestNotify() = 0;
  virtual int capacity() const = 0;
  // The completion vector it signals on (PortInfo::num_comp_vectors).
  virtual int comp_vector() const = 0;
};

class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;
  virtual Status PostRecv(const RecvWr& wr) = 0;
  // Arms the limit event: kSrqLimitReached fires once when posted receives drop below `limit`.
  virtual Status ArmLimit(uint32_t limit) = 0;
};

// A reliable-connected queue pair: RESET -> INIT -> RTR -> RTS; any state -> ERR.
// Destroying a QP removes its completions from both CQs, as mlx5 does (a receive taken from an
// SRQ is then lost to its owner: no completion, never reposted). So a QP on an SRQ is destroyed
// only after ToError(), its kQpLastWqeReached event, and a poll of both CQs after that event.
class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual uint32_t qp_num() const = 0;
  virtual QpState state() const = 0;
  // What the device granted at creation (max_inline_data may be less than asked, even 0).
  virtual const QpCaps& caps() const = 0;
  // RESET -> INIT on `port`, in the partition of its P_Key table entry `pkey_index`
  // (PortInfo::pkey_index): receives may be posted from now on.
  virtual Status ToInit(int port, uint16_t pkey_index) = 0;
  // INIT -> RTR -> RTS: connected to `params.remote`, sends may be posted.
  virtual Status Connect(const QpConnectParams& params) = 0;
  // -> ERR: every outstanding request completes flushed.
  virtual Status ToError() = 0;
  // An error return means the request was not queued (full queue, inline too large, wrong
  // state); a request that was queued reports its outcome as a work completion.
  virtual Status PostSend(const SendWr& wr) = 0;
  virtual Status PostRecv(const RecvWr& wr) = 0;
};

struct QpInitAttr {
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // receives come from here when set
  QpCaps caps;
  // Comes back in the QP's async events (AsyncEvent::context), as verbs' qp_context.
  void* context = nullptr;
};

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  virtual Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length) = 0;
  // The device may grant more than asked (mlx5 rounds depths up to powers of two): size what
  // depends on the depths (the CQs) from QueuePair::caps(), not from the request.
  virtual Result<std::unique_ptr<QueuePair>> CreateQp(const QpInitAttr& attr) = 0;
  // `context` comes back in the SRQ's async events (AsyncEvent::context), as verbs' srq_context.
  virtual Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(uint32_t max_wr,
                                                                void* context = nullptr) = 0;
};

// The local port the context uses, as a peer needs to know it.
struct PortInfo {
  uint16_t lid = 0;
  Gid gid{};
  int port = 1;
  int gid_index = 0;
  GidType gid_type = GidType::kIb;  // of the entry at gid_index (the bootstrap carries it)
  // gid_index was set by the user (--rdma_gid_index, SoftDevice::UseGidIndex): every connection
  // uses it. Otherwise each connection chooses by its bootstrap socket (ConnectionGid).
  bool gid_pinned = false;
  // The port's non-empty GID entries, as the device lists them (gid_choice.h chose gid_index).
  std::vector<GidEntry> gid_table;
  uint32_t active_mtu = 1024;       // bytes
  uint32_t max_msg_size = 1 << 30;  // largest message a send may carry
  bool ethernet = false;            // RoCE (else InfiniBand): every packet carries a GRH
  int num_comp_vectors = 1;         // completion vectors (interrupts) CQs are spread over
  bool active = true;               // the port's state is ACTIVE (it opened so)
  // The P_Key table entry every queue pair joins at INIT (its partition): index 0, the port's
  // first (the default partition on a standard subnet; RoCE ports have only 0xFFFF), unless
  // VerbsDeviceOptions::pkey names another. `pkey` is its value (0 when not read).
  uint16_t pkey_index = 0;
  uint16_t pkey = 0xFFFF;
};

// An opened device (one port; its GID is the default, each connection chooses its own from the
// port's table: gid_choice.h, ConnectionGid).
class Context {
 public:
  virtual ~Context() = default;
  virtual const std::string& device_name() const = 0;
  // The port as last read: at open, then again whenever NextAsyncEvent returns a port event
  // (kPortActive, kPortError, kGidChange, kLidChange), before it returns it. A copy: the reader
  // of the async events may replace it at any time.
  virtual PortInfo port() const = 0;
  virtual Result<std::unique_ptr<ProtectionDomain>> AllocPd() = 0;
  virtual Result<std::unique_ptr<CompletionChannel>> CreateChannel() = 0;
  // `channel` may be nullptr (polled only). Successive CQs go round-robin over the port's
  // completion vectors, so completion interrupts spread over CPUs.
  virtual Result<std::unique_ptr<CompletionQueue>> CreateCq(int entries,
                                                            CompletionChannel* channel) = 0;
  // Async events (port changes, fatal QP errors, SRQ limit, last WQE): fd readable when one
  // waits. An event goes to whoever reads it first: the transport reads it from one thread per
  // device (DeviceEventWatcher, async_events.h).
  virtual int async_fd() const = 0;
  // Non-blocking: false when none waits. A port event re-reads port() first.
  virtual bool NextAsyncEvent(AsyncEvent* event) = 0;
};

}  // namespace rrpc::rdma
