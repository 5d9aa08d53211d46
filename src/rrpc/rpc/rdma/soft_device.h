// The strict software verbs backend: RC queue pairs between devices in one process or in several
// (each device is a thread that listens on an abstract UNIX socket named by its GID; peers reach
// it through that socket, so two processes on one host talk as two NICs would). Its first job is
// to punish every mistake real hardware punishes: a send with no receive posted gets RNR, retried
// rnr_retry times, then the QP goes to ERR and everything outstanding completes flushed; a
// receive buffer too small is a local length error (the receiver's QP goes to ERR); inline sends
// above the cap, a full send queue or a full CQ are errors; an SGE outside its memory region is a
// protection error. docs/rdma.md lists what it models and what it cannot (timing, wire speed).
//
// SoftDevice adds fault hooks for tests. Thread-safe, like the interface.
#pragma once

#include <memory>
#include <string>

#include "rrpc/rpc/rdma/verbs.h"

namespace rrpc::rdma {

struct SoftDeviceOptions {
  std::string name = "rrpc_soft0";
  // The largest inline send the device grants (what QP creation reads back).
  uint32_t max_inline_data = 236;
  uint32_t max_qp_wr = 16384;
  int max_cqe = 1 << 20;
  uint32_t max_sge = 4;
  // Registration faults every page of the region in, as a NIC's registration pins it: the
  // process's RSS then counts registered memory as it would on hardware (rpc-bench's memory
  // figures). Off, untouched registered pages cost nothing (what tests want).
  bool pin_registered_memory = false;
  // A send's memory must stay registered and unchanged until its completion (the NIC may read
  // it again, e.g. to retransmit). Every successful completion checks that its SGEs' lkeys still
  // name their regions (a freed or deregistered buffer completes with kLocalProtectionError and
  // the QP goes to ERR); with this on, it also compares the bytes with those posted (a buffer
  // reused before the completion fails the same way; a freed one is a use-after-free ASAN
  // reports). Costs a read of every sent byte on the NIC thread: tests turn it on.
  bool verify_send_memory = false;
  // Registered bytes the device pins at most, as RLIMIT_MEMLOCK bounds a NIC's (0: no limit):
  // a registration beyond it fails as ibv_reg_mr does (ENOMEM).
  uint64_t locked_memory_limit = 0;
  int num_comp_vectors = 4;  // CQs go round-robin over them (nothing else differs)
};

class SoftDevice : public Context {
 public:
  // Fault hooks, for tests. Any thread.
  // Cuts the links to every peer device (as if the peer's host vanished): queue pairs with sends
  // outstanding, or that send later, complete with kRetryExceeded and go to ERR.
  virtual void DropPeers() = 0;
  // While stalled, completions are held back (neither polled nor signalled); released in order.
  virtual void StallCompletions(bool stalled) = 0;
  // The next `n` memory registrations fail.
  virtual void FailRegistrations(int n) = 0;
  // The device reports `qp` broken (kQpFatal: the QP goes to ERR, its requests flush, then the
  // event, carrying the QP's context, is queued) or, with `qp` nullptr, itself (kDeviceFatal,
  // kPortError...: only the event).
  virtual void InjectAsyncEvent(AsyncEventType type, QueuePair* qp = nullptr) = 0;
};

Result<std::unique_ptr<SoftDevice>> OpenSoftDevice(const SoftDeviceOptions& options = {});

}  // namespace rrpc::rdma
