// RDMA for an embedding program: the options of the RDMA transport and the factory that makes
// it. Set the factory as MessengerOptions::transport_factory on both client and server:
//
//   rrpc::rdma::RdmaOptions rdma;  // libibverbs (a real NIC) by default
//   options.transport_factory = rrpc::rdma::NewRdmaTransportFactory(rdma);
//
// (SoftRdmaOptions() below for the software NIC: tests, development, a host without a NIC.) A
// server built on ServerBase needs no code: ServerBaseOptions::rdma, or --rpc_rdma
// (docs/server.md).
//
// Connections start on TCP and, right after the rrpc negotiation, upgrade to RDMA (RC queue
// pairs) when both sides can; otherwise they stay on TCP with the reason logged and counted in
// rrpc_rdma_fallbacks_total{entity="rdma_fallback",id=<reason>} (docs/rdma.md). Without a device
// the verbs backend leaves every connection on TCP (reason no_device; ProbeRdmaDevice() tells
// at start). The software backend needs no device (same host only); read docs/rdma.md, "Running
// on real hardware", before using kVerbs. Link rrpc::rdma (CMake) or `pkg-config --libs rrpc`.
// Plain values; NewRdmaTransportFactory may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rrpc/util/copy_counter.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc {
class MetricRegistry;
}  // namespace rrpc

namespace rrpc::rpc {
class TransportFactory;
}  // namespace rrpc::rpc

namespace rrpc::rdma {

// The libibverbs backend's device, port and GID (kVerbs).
struct VerbsDeviceOptions {
  std::string device;  // "" : the first device
  int port = 0;        // 0 : the first active port
  int gid_index = -1;  // -1: a RoCEv2 GID if the port has one, else index 0
  // InfiniBand partition: the P_Key (16 bits, e.g. 0x8001) whose entry of the port's P_Key table
  // every queue pair joins; -1: the table's first entry (index 0, the default partition on a
  // standard subnet). Matched on its low 15 bits, an entry of the same membership (the top bit)
  // preferred; a port without it is skipped, and none left fails the open (NotFound). RoCE
  // ports have only 0xFFFF. Both sides of a connection must be in the partition.
  int pkey = -1;
  // Call ibv_fork_init before opening: only for a process that fork()s while memory is
  // registered, on kernels before 5.13 (later ones need nothing). It makes every registration
  // madvise(DONTFORK) its pages: VMAs split toward vm.max_map_count, hugetlbfs ranges fail.
  bool fork_init = false;
};

// A port of a software device (SoftDeviceOptions::devices): its state and the IP addresses of
// its netdev ("127.0.0.2", "::1"; loopback addresses stand in for a NIC's), each of which adds a
// RoCE v1 and a RoCE v2 entry to its GID table, as on an mlx5 RoCE port.
struct SoftPortOptions {
  bool active = true;  // false: DOWN (the scan skips it)
  std::vector<std::string> addresses;
};
struct SoftNicOptions {
  std::string name;
  std::vector<SoftPortOptions> ports;
};

// The software backend (kSoft): RC queue pairs between processes of one host, as strict as a NIC.
struct SoftDeviceOptions {
  std::string name = "rrpc_soft0";
  // The devices the backend lists. Empty: one device (`name`) with one ACTIVE port holding only
  // its own GIDs. Otherwise the scan opens, as VerbsDeviceOptions' defaults do on hardware, an
  // ACTIVE port with a usable GID, preferring the one holding the opening connection's
  // bootstrap address (gid_choice.h, ChoosePort). An address's GIDs reach their device within
  // this process only (each address on one live device); the device's own GIDs reach it from
  // any process of the host.
  std::vector<SoftNicOptions> devices;
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
  // A modelled cost of each control-path verb (CQ, QP and SRQ create, memory registration,
  // each modify-QP: INIT, RTR, RTS), slept by the calling thread outside the device's lock. On
  // mlx5 these take tens to hundreds of microseconds each (docs/rdma.md, "Control-path verbs");
  // zero: free, as the software device otherwise is.
  MonoDelta control_verb_delay;
};

// One connection's queue pair and memory (private receive queue).
struct EndpointOptions {
  uint32_t buffer_size = 16 * 1024;  // each receive and send block
  uint32_t receive_buffers = 64;     // posted for the peer: its initial credits
  uint32_t send_buffers = 64;
  // Receive blocks beyond those posted: when a large message's block is lent to the calls reading
  // it (zero copy), one of these is posted in its place, so the peer's credits never wait for a
  // call to end. With none left, messages are copied out instead (RdmaTransport::Deliver).
  uint32_t spare_receive_buffers = 16;
  uint32_t max_inline = 236;  // asked for at QP creation; the device may grant less
  // SGEs per send asked for at QP creation (private receive queue): a message sent without
  // copying points at its header and at up to max_send_sge - 1 pieces of sidecars.
  uint32_t max_send_sge = 4;
  uint8_t rnr_retry = 0;
  // The local ACK timeout (IB encoding, 1..31): how long a send waits for its acknowledgement
  // before each of its 7 resends, 4.096 us x 2^ack_timeout; with the resends, 8 times that
  // before a dead path fails the connection (14: 67 ms, 0.54 s in all). On a large InfiniBand
  // fabric size it from the path's packet lifetime (the subnet manager's path record,
  // PacketLifeTime + 1, as `saquery -p` shows it); RoCE fabrics keep the default.
  uint8_t ack_timeout = 14;
  // The QP's path (docs/rdma.md, "Running on real hardware"): the GRH traffic class (RoCE v2:
  // DSCP << 2, e.g. 104 for DSCP 26; leave the two ECN bits 0: mlx5 sets ECT itself when ECN is
  // enabled on the port) and the service level (InfiniBand 0..15; RoCE 0..7, the priority the
  // NIC tags frames with: 8..15 are refused at connect, as mlx5 would send SL & 7). Lossless RoCE
  // classes need both set as the switches are configured. Each side sets its own direction.
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
};

// SRQ mode (docs/rdma.md, "SRQ mode"): what the connections of one reactor share.
struct SrqOptions {
  uint32_t buffer_size = 16 * 1024;   // each receive and send block
  uint64_t max_memory = 64ull << 20;  // receive blocks per reactor, at most (the cap)
  uint32_t chunk_blocks = 64;         // the pool grows by this many blocks at a time
  uint32_t reserve = 8;               // posted receives never granted
  uint32_t initial_credits = 8;       // granted to each peer at the bootstrap (>= floor)
  // Reclaim (docs/rdma.md): a peer that sent nothing for `reclaim_after` has its target lowered
  // to `floor_credits` and is asked to give back what it holds above it; zero: never.
  uint32_t floor_credits = 3;
  MonoDelta reclaim_after = MonoDelta::FromSeconds(10);
  uint32_t max_credits = 64;    // a peer's target, at most
  uint32_t send_buffers = 256;  // the reactor's shared send blocks
  // Chunks wanted while connections run (credit waiters, the limit event) are allocated and
  // registered on a thread of their own; the reactor only posts them. Set-up growth (the
  // bootstrap's initial grant) stays synchronous: a connection can't wait for it.
  bool grow_off_reactor = true;
};

// A connection over RDMA.
struct RdmaTransportOptions {
  size_t max_frame_size = 64 * 1024 * 1024;
  bool use_inline = true;  // post messages up to the inline cap with IBV_SEND_INLINE
  bool busy_poll = false;  // poll the CQ every loop iteration instead of sleeping on the channel
  const char* backend = "verbs";  // for /connections; set by the factory
  // Messages with at least this much payload are handed up by reference (zero copy) while spare
  // receive blocks last; smaller ones are copied out (cheaper than lending below ~4 KiB).
  uint32_t lend_min_bytes = 4096;
  // Send side: a piece (a sidecar, a frame head) at least this long whose Block is registered
  // goes by reference (SGEs pointing at it) instead of being copied into send blocks; 0: every
  // byte is copied. Private receive queue only. Below the default the signaled completion that
  // releases the block costs more than the copy (software backend; docs/rdma.md).
  uint32_t send_zero_copy_min_bytes = 256 * 1024;
  // A heap Block not registered yet is registered (for its lifetime) when a piece of it at least
  // this long is sent; smaller ones are copied. 0: never register (only receive blocks echoed
  // go without a copy).
  uint64_t register_min_bytes = 64 * 1024;
  // Which side's copy counters (util/copy_counter.h) this connection's copies count on; set by
  // the upgrade.
  CopySide copy_side = CopySide::kServer;
  // Dead-peer bound for a connection out of send credits (docs/reliability.md, "Dead peers over
  // RDMA"): with messages waiting for a credit and no grant received for this long, the peer is
  // declared dead and the connection fails (retriable NetworkError). A live peer grants within a
  // few of its reactor's iterations (the credit rules leave it owing us half its buffers), so
  // only a dead peer, a dead path or a reactor stuck this long trips it. Max: off.
  MonoDelta credit_starved_timeout = MonoDelta::FromSeconds(4);
};

enum class RdmaBackend { kSoft, kVerbs };

struct RdmaOptions {
  // false: this side never upgrades (a client doesn't offer; a server declines).
  bool enabled = true;
  // kVerbs: libibverbs, a real NIC. kSoft only when asked for (SoftRdmaOptions()).
  RdmaBackend backend = RdmaBackend::kVerbs;
  VerbsDeviceOptions verbs;
  SoftDeviceOptions soft;
  EndpointOptions endpoint;
  // SRQ mode (docs/rdma.md, "SRQ mode"): this side's receives come from one shared receive queue
  // per reactor. Not with busy_poll (the connection then uses a private receive queue).
  // srq.buffer_size is endpoint.buffer_size.
  bool use_srq = false;
  SrqOptions srq;
  RdmaTransportOptions transport;
  // The path probe (docs/rdma.md, "The path probe"), a client option (a server answers the
  // probes clients ask for): before following the server to RDMA, the client sends one message
  // of a path MTU over a throwaway queue pair and waits up to `probe_timeout` for its
  // acknowledgement (its reactor waits: one round trip on a working path); the server moves
  // only once the client confirms. When the probe fails that connection stays on TCP, and so do
  // connections to that server (fallback reason "path") for `dead_path_memory`. false:
  // connections upgrade without proof that the path carries packets, and a dead path fails
  // each of them once its QP's retries run out.
  bool probe_path = true;
  MonoDelta probe_timeout = MonoDelta::FromSeconds(1);
  MonoDelta dead_path_memory = MonoDelta::FromSeconds(600);
  // Connection setup's control-path verbs (docs/rdma.md, "Control-path verbs": making the
  // endpoint's queue pair, CQ and registrations and the path probe's, connecting them, and on
  // the client the probe's round trip; a heap Block's first registration for a send by
  // reference) run on
  // threads of the factory's own instead of the connection's reactor or writer, and the reactor
  // meanwhile serves its other connections. Up to `setup_threads` run at once (started as
  // needed), so a connection whose verb blocks (a RoCE RTR toward a peer whose MAC does not
  // resolve: up to ~1 s) holds up one of them, not every connection's setup; more threads cost
  // idle threads, and run more verbs at once on the NIC. At most `setup_queue` jobs wait for
  // them; one beyond it runs where it would with false (on the reactor; in the write).
  bool setup_off_reactor = true;
  size_t setup_threads = 4;
  size_t setup_queue = 1024;
  // Where the RDMA metrics go; nullptr: the registry of the messenger using the factory (its
  // /metrics; the latest messenger made, when several share the factory), or, for a factory not
  // used by a messenger with metrics, a registry of the factory's own (metric_registry()).
  MetricRegistry* metric_registry = nullptr;
};

// RdmaOptions on the software backend (same host only: tests, benches, development).
inline RdmaOptions SoftRdmaOptions() {
  RdmaOptions o;
  o.backend = RdmaBackend::kSoft;
  return o;
}

// A transport factory for MessengerOptions::transport_factory (an RdmaTransportFactory). The
// device is opened on the first connection; a side that cannot open it stays on TCP.
std::shared_ptr<rpc::TransportFactory> NewRdmaTransportFactory(RdmaOptions options);

// Whether `options` find a usable device on this host: OK, or why not (libibverbs missing, no
// device, no active port with a usable GID). Opens the device and closes it again; the software
// backend always has one. For a process to say at start that it will stay on TCP. Any thread.
Status ProbeRdmaDevice(const RdmaOptions& options);

}  // namespace rrpc::rdma
