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
#include <vector>

#include "rpc/rdma/verbs.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rdma {

// The UDP source port mlx5 gives a RoCE v2 queue pair `local_qpn` connected to `remote_qpn`
// with `flow_label` (the kernel's rdma_get_udp_sport): ECMP and LAG hash it.
uint16_t RoceUdpSourcePort(uint32_t flow_label, uint32_t local_qpn, uint32_t remote_qpn);
// Which of `paths` equal-cost paths a RoCE v2 packet from UDP source port `udp_source_port`
// takes (SoftDevice::BreakEcmpPath): a hash of the port, as a switch hashes the flow's fields.
int EcmpPathOf(uint16_t udp_source_port, int paths);

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
  // What queue pair `qp_num` of this device was connected with (its RTR/RTS attributes: the
  // path, traffic class, service level...); false when no such QP is connected.
  virtual bool ConnectParamsOf(uint32_t qp_num, QpConnectParams* params) = 0;
  // While on, the paths to peer devices let queue pairs connect (RTR/RTS) and drop every packet
  // they carry, as a path with UDP 4791 filtered or a RoCE v1/v2 mismatch does: a send is never
  // acknowledged and fails with kRetryExceeded (the QP goes to ERR) once the QP's retry timeout
  // (4.096 us x 2^timeout, retry_cnt + 1 times) has passed, as on hardware.
  virtual void DropAllPackets(bool on) = 0;
  // Models a fabric with `paths` equal-cost paths (ECMP or a LAG) towards the peers, of which
  // path `broken` loses every packet: a data packet this device sends takes the path a hash of
  // its UDP source port chooses, the port mlx5 gives a RoCE v2 QP (RoceUdpSourcePort: from the
  // QP's flow label, or, unlabelled, from its and its peer's QP numbers). Lost packets fail
  // their sends as with DropAllPackets. `paths` 0: one path, nothing lost.
  virtual void BreakEcmpPath(int paths, int broken) = 0;
  // Models an MTU black hole in one direction: a packet this device sends toward the device of
  // `gid` is lost when it is larger than `max_bytes` (a message's packets are path-MTU-sized but
  // for its last; smaller messages and acknowledgements cross). Lost packets fail their sends as
  // with DropAllPackets. `max_bytes` 0: nothing lost toward `gid`.
  virtual void DropLargePacketsToward(const Gid& gid, uint32_t max_bytes) = 0;
  // The port's GID table is an mlx5 RoCE port's: link-local v1 (index 0) and v2 (1), then v1 (2)
  // and v2 (3) of the device's own address, then a v1/v2 pair per address of its port
  // (SoftDeviceOptions::devices); the device opens on gid_choice.h's choice and each connection
  // chooses its own entry (ConnectionGid). This pins entry `index` for every connection instead
  // (as VerbsDeviceOptions::gid_index does on hardware).
  virtual Status UseGidIndex(int index) = 0;
  // While on, every send posted from registered memory names a wrong lkey in its last SGE (a
  // stale or mistyped key): it completes with kLocalProtectionError and its QP goes to ERR.
  virtual void CorruptSendLkeys(bool on) = 0;
  // The next `n` receives posted to a private receive queue are accepted and lost (never filled,
  // never flushed): a peer whose accounting counts receives it never posted, whose sender then
  // meets RNR.
  virtual void DiscardReceives(int n) = 0;
  // The device reports `qp` broken (kQpFatal: the QP goes to ERR, its requests flush, then the
  // event, carrying the QP's context, is queued) or, with `qp` nullptr, itself (kDeviceFatal,
  // kPortError...: only the event; after kDeviceFatal the device is dead: creating anything on
  // it fails, as on a NIC after a fatal error).
  virtual void InjectAsyncEvent(AsyncEventType type, QueuePair* qp = nullptr) = 0;
  // The port as its hardware changes at run time. Each queues its event (kPortError or
  // kPortActive, kGidChange, kLidChange); port() shows the change once that event is read
  // (NextAsyncEvent), as a context re-reads its port on hardware. While the port is down every
  // packet sent is lost, as with DropAllPackets: sends fail with kRetryExceeded once the QP's
  // retry timeout has passed.
  virtual void SetPortActive(bool active) = 0;
  // The port's IP addresses from now on (the v1/v2 pair of each after the device's own entries,
  // as at open); InvalidArgument for one that does not parse, AlreadyPresent when another
  // device of this process holds one.
  virtual Status SetPortAddresses(const std::vector<std::string>& addresses) = 0;
  virtual void SetLid(uint16_t lid) = 0;
  // While held, every control-path verb (SoftDeviceOptions::control_verb_delay lists them)
  // blocks its calling thread on entry until released (a NIC whose firmware command queue is
  // stuck): tests pin a thread inside a verb without timing. control_verbs_held() counts the
  // calls blocked now.
  virtual void HoldControlVerbs(bool held) = 0;
  virtual int control_verbs_held() = 0;
  // While held, a modify-QP to RTR toward `gid` (the remote GID it names: the peer's device)
  // blocks its calling thread until released, as a RoCE RTR does while the kernel resolves a peer
  // MAC that does not answer (up to ~1 s on hardware); other verbs, and RTRs toward other GIDs,
  // go on. rtrs_held() counts the calls blocked now.
  virtual void HoldRtrToward(const Gid& gid, bool held) = 0;
  virtual int rtrs_held() = 0;

  // Port counters, as a NIC keeps (mlx5's hw_counters): the packets this device put on its links
  // and took off them, by kind. Tests wait on them where something must NOT happen, to know the
  // packet that could have made it happen was answered. Any thread.
  struct PortCounters {
    uint64_t data_sent = 0;
    uint64_t data_received = 0;
    uint64_t acks_received = 0;
    uint64_t rnr_naks_received = 0;   // the peer had no receive posted
    uint64_t not_ready_received = 0;  // the peer's queue pair was not yet ready to receive
  };
  virtual PortCounters port_counters() = 0;
};

// `local`: the bootstrap address of the connection that opens it (unset: none); with
// options.devices, the ACTIVE port holding it is preferred (soft_ports.h, ChooseSoftPort).
Result<std::unique_ptr<SoftDevice>> OpenSoftDevice(const SoftDeviceOptions& options = {},
                                                   const Sockaddr& local = Sockaddr());

}  // namespace rrpc::rdma
