#include "rpc/rdma/rdma_flags.h"

#include <gflags/gflags.h>

#include <cstdio>

#include "rrpc/rpc/messenger_options.h"

DEFINE_bool(rdma, false,
            "Connections of this process upgrade to RDMA after negotiating, where the peer "
            "offers it too (servers built on ServerBase such as kv-server, and kv-cli, kv-bench, "
            "rrpc-cli); the --rdma_* flags configure it (docs/rdma.md). With the verbs backend "
            "and no device on the host the process says so at start and stays on TCP. "
            "rpc-bench takes --transport=rdma instead");
DEFINE_string(rdma_backend, "verbs",
              "RDMA backend: verbs (libibverbs, loaded at run time; a real RDMA NIC) or soft (the "
              "strict software NIC: same host only, for tests, benchmarks and development)");
DEFINE_string(rdma_device, "", "verbs backend: the RDMA device to use; empty: the first");
DEFINE_int32(rdma_port, 0, "verbs backend: the device port; 0: the first active one");
DEFINE_int32(rdma_gid_index, -1,
             "verbs backend: the GID index; -1: a RoCEv2 GID if the port has one, else 0");
DEFINE_int32(rdma_pkey, -1,
             "verbs backend, InfiniBand: the partition (P_Key, e.g. 0x8001) every queue pair "
             "joins; -1: the port's first P_Key table entry");
DEFINE_int32(rdma_ack_timeout, 14,
             "Local ACK timeout of the RDMA queue pairs (IB encoding 1..31: 4.096 us x 2^N "
             "before each of 7 resends; 14: 0.54 s to find a dead path); on a large InfiniBand "
             "fabric, the path's packet lifetime + 1");
DEFINE_bool(rdma_inline, true,
            "Post messages up to the device's inline cap inline (the NIC copies them from the "
            "work request instead of reading memory: about 1 us less per small message on "
            "ConnectX-6 as brpc measured); false to compare");
DEFINE_int32(rdma_max_inline, 236,
             "Inline cap asked for at QP creation (the device may grant less)");
DEFINE_int32(rdma_buffer_bytes, 16 * 1024,
             "Bytes of each RDMA receive and send buffer: the largest message; larger frames go "
             "as several");
DEFINE_int32(rdma_receive_buffers, 64,
             "Receive buffers posted per connection: the peer's credits. Memory per connection "
             "is about (receive + send buffers) x buffer bytes");
DEFINE_int32(rdma_send_buffers, 64, "Send buffers per connection (one kept for credit grants)");
DEFINE_int32(rdma_spare_receive_buffers, 16,
             "Receive buffers per connection beyond those posted: a large message's buffer is "
             "lent to its calls (zero copy) while a spare is posted in its place; with none "
             "left, messages are copied out. 0: always copy");
DEFINE_int32(rdma_send_zero_copy_min_bytes, 256 * 1024,
             "A sidecar (or frame head) at least this long whose Block is registered is sent by "
             "reference, without copying it into send blocks; 0: every byte is copied. Smaller "
             "ones are copied: the completion that releases the block costs more (measured on "
             "the software backend, docs/performance.md)");
DEFINE_int64(rdma_register_min_bytes, 64 * 1024,
             "A heap Block not yet registered with the RDMA device is registered (for its "
             "lifetime: a Block sent again costs nothing more) when at least this much of it is "
             "sent; smaller ones are copied. 0: never (only echoed receive blocks go by "
             "reference). docs/rdma.md, \"Zero copy on send\", says what it costs");
DEFINE_int32(rdma_rnr_retry, 0,
             "RNR retries before a send fails (7: forever). Credits keep receives posted, so 0 "
             "makes any accounting mistake fail loudly instead of stalling");
DEFINE_int32(rdma_traffic_class, 0,
             "Traffic class of the RDMA queue pairs' packets (the GRH's: on RoCE v2 DSCP << 2, "
             "e.g. 104 for DSCP 26; the ECN bits are the NIC's on mlx5); lossless RoCE classes "
             "need it set as the switches are");
DEFINE_int32(rdma_service_level, 0,
             "Service level of the RDMA queue pairs (InfiniBand 0..15; RoCE 0..7, the priority "
             "frames are tagged with: higher ones fail the connection's upgrade)");
DEFINE_bool(rdma_fork_init, false,
            "verbs backend: call ibv_fork_init before opening the device; only for a process "
            "that forks while RDMA memory is registered, on kernels before 5.13 (it splits the "
            "heap's mappings on every registration)");
DEFINE_bool(rdma_probe_path, true,
            "Before a client follows the server to RDMA, send one message over a throwaway queue "
            "pair and wait (up to 1 s, on the reactor) for its acknowledgement; when it fails the "
            "connection stays on TCP, and so do connections to that server for 10 minutes "
            "(fallback reason path). Costs one round trip per connection set-up (about 0.1 ms "
            "on the software backend); false: upgrade without proof that the path carries "
            "packets");
DEFINE_bool(rdma_busy_poll, false,
            "Poll the completion queue every reactor loop iteration instead of sleeping on the "
            "completion channel: lower latency, one core busy per reactor");
DEFINE_bool(rdma_use_srq, false,
            "Receive from one shared receive queue per reactor (one receive pool, one send and "
            "one receive CQ shared by its RDMA connections) instead of a private receive queue "
            "per connection: receive memory stops growing with idle connections. Negotiated per "
            "connection; not with --rdma_busy_poll");
DEFINE_int64(rdma_srq_max_memory, 64ll << 20,
             "SRQ mode: registered receive memory per reactor, at most; the pool grows in chunks "
             "up to it and credit grants wait beyond it");
DEFINE_int32(rdma_srq_initial_credits, 8,
             "SRQ mode: credits granted to each peer at connection set-up (>= 3)");
DEFINE_int32(rdma_srq_max_credits, 64,
             "SRQ mode: credits one peer may hold, at most, after asking for more");

DEFINE_bool(rdma_soft_pin_memory, false,
            "soft backend: registration faults the registered pages in, as a NIC's pinning does, "
            "so RSS counts registered memory as on hardware (memory figures: "
            "build-support/sparse-memory.sh sets it); off, untouched registered pages cost no RSS "
            "and registering is cheaper than on hardware");
DEFINE_bool(rdma_setup_off_reactor, true,
            "Connection setup's control-path verbs (QP, CQ and memory registration; both "
            "sides' connect and the client's path probe; a Block's first registration to send "
            "it by reference) run on a thread of the RDMA factory's own, not on the reactor or "
            "the writing thread (docs/rdma.md, \"Control-path verbs\")");
DEFINE_int32(rdma_setup_threads, 4,
             "With --rdma_setup_off_reactor: threads (per RDMA factory) that run connection "
             "setup's control-path verbs at once (>= 1); a setup stuck in a verb (a RoCE RTR "
             "whose peer's MAC does not resolve, up to ~1 s) holds one, the others go on; more "
             "cost idle threads and run more verbs at once on the NIC");
DEFINE_int32(rdma_soft_control_verb_delay_us, 0,
             "soft backend: a modelled cost of each control-path verb (QP/CQ/SRQ create, "
             "registration, each modify-QP), in microseconds; 0: free");
DEFINE_int32(rdma_srq_reclaim_after_ms, 10000,
             "SRQ mode: a peer that sent nothing for this long gets its credit target lowered to "
             "--rdma_srq_floor_credits and is asked to give back the credits above it; 0: never");
DEFINE_int32(rdma_srq_floor_credits, 3,
             "SRQ mode: credits an idle peer keeps after a reclaim (>= 3: a call and its "
             "fragments never wait for a grant that is not due)");
DEFINE_int32(rdma_credit_starved_timeout_ms, 4000,
             "A connection whose messages wait for send credits and that receives no grant for "
             "this long declares its peer dead (its calls fail retriable): finds a dead peer or "
             "path when no send can go to fail; lower is quicker, but a peer whose reactor stalls "
             "this long is cut too; 0: never");

namespace rrpc::rdma {

Result<RdmaOptions> RdmaOptionsFromFlags() {
  RdmaOptions o;
  if (FLAGS_rdma_backend == "soft") {
    o.backend = RdmaBackend::kSoft;
  } else if (FLAGS_rdma_backend == "verbs") {
    o.backend = RdmaBackend::kVerbs;
  } else {
    return Status::InvalidArgument("--rdma_backend must be soft or verbs, not " +
                                   FLAGS_rdma_backend);
  }
  if (FLAGS_rdma_receive_buffers < 4 || FLAGS_rdma_send_buffers < 2 ||
      FLAGS_rdma_buffer_bytes < 256 || FLAGS_rdma_spare_receive_buffers < 0 ||
      FLAGS_rdma_max_inline < 0 || FLAGS_rdma_rnr_retry < 0 || FLAGS_rdma_rnr_retry > 7 ||
      FLAGS_rdma_setup_threads < 1) {
    return Status::InvalidArgument(
        "RDMA flags: receive buffers >= 4, send buffers >= 2, buffer bytes >= 256, spare "
        "receive buffers >= 0, rnr_retry 0..7, setup threads >= 1");
  }
  o.soft.pin_registered_memory = FLAGS_rdma_soft_pin_memory;
  o.soft.control_verb_delay = MonoDelta::FromMicroseconds(FLAGS_rdma_soft_control_verb_delay_us);
  o.setup_off_reactor = FLAGS_rdma_setup_off_reactor;
  o.setup_threads = static_cast<size_t>(FLAGS_rdma_setup_threads);
  o.verbs.device = FLAGS_rdma_device;
  o.verbs.port = FLAGS_rdma_port;
  o.verbs.gid_index = FLAGS_rdma_gid_index;
  o.verbs.fork_init = FLAGS_rdma_fork_init;
  o.endpoint.buffer_size = static_cast<uint32_t>(FLAGS_rdma_buffer_bytes);
  o.endpoint.receive_buffers = static_cast<uint32_t>(FLAGS_rdma_receive_buffers);
  o.endpoint.send_buffers = static_cast<uint32_t>(FLAGS_rdma_send_buffers);
  o.endpoint.spare_receive_buffers = static_cast<uint32_t>(FLAGS_rdma_spare_receive_buffers);
  o.endpoint.max_inline = static_cast<uint32_t>(FLAGS_rdma_max_inline);
  o.endpoint.rnr_retry = static_cast<uint8_t>(FLAGS_rdma_rnr_retry);
  if (FLAGS_rdma_pkey < -1 || FLAGS_rdma_pkey > 0xFFFF || FLAGS_rdma_ack_timeout < 1 ||
      FLAGS_rdma_ack_timeout > 31) {
    return Status::InvalidArgument("RDMA flags: P_Key -1 or 0..0xffff, ACK timeout 1..31");
  }
  o.verbs.pkey = FLAGS_rdma_pkey;
  o.endpoint.ack_timeout = static_cast<uint8_t>(FLAGS_rdma_ack_timeout);
  if (FLAGS_rdma_traffic_class < 0 || FLAGS_rdma_traffic_class > 255 ||
      FLAGS_rdma_service_level < 0 || FLAGS_rdma_service_level > 15) {
    return Status::InvalidArgument("RDMA flags: traffic class 0..255, service level 0..15");
  }
  o.endpoint.traffic_class = static_cast<uint8_t>(FLAGS_rdma_traffic_class);
  o.probe_path = FLAGS_rdma_probe_path;
  o.endpoint.service_level = static_cast<uint8_t>(FLAGS_rdma_service_level);
  o.transport.use_inline = FLAGS_rdma_inline;
  if (FLAGS_rdma_send_zero_copy_min_bytes < 0 || FLAGS_rdma_register_min_bytes < 0) {
    return Status::InvalidArgument("RDMA zero-copy send thresholds must be >= 0");
  }
  o.transport.send_zero_copy_min_bytes = static_cast<uint32_t>(FLAGS_rdma_send_zero_copy_min_bytes);
  o.transport.register_min_bytes = static_cast<uint64_t>(FLAGS_rdma_register_min_bytes);
  o.transport.busy_poll = FLAGS_rdma_busy_poll;
  if (FLAGS_rdma_credit_starved_timeout_ms < 0) {
    return Status::InvalidArgument("--rdma_credit_starved_timeout_ms must be >= 0");
  }
  o.transport.credit_starved_timeout =
      FLAGS_rdma_credit_starved_timeout_ms > 0
          ? MonoDelta::FromMilliseconds(FLAGS_rdma_credit_starved_timeout_ms)
          : MonoDelta::Max();
  if (FLAGS_rdma_use_srq && FLAGS_rdma_busy_poll) {
    return Status::InvalidArgument("--rdma_use_srq does not work with --rdma_busy_poll");
  }
  if (FLAGS_rdma_srq_initial_credits < 3 ||
      FLAGS_rdma_srq_max_credits < FLAGS_rdma_srq_initial_credits ||
      FLAGS_rdma_srq_max_memory < 0 || FLAGS_rdma_srq_floor_credits < 3 ||
      FLAGS_rdma_srq_floor_credits > FLAGS_rdma_srq_initial_credits ||
      FLAGS_rdma_srq_reclaim_after_ms < 0) {
    return Status::InvalidArgument(
        "RDMA SRQ flags: 3 <= floor credits <= initial credits <= max credits, max memory >= 0, "
        "reclaim after >= 0");
  }
  o.use_srq = FLAGS_rdma_use_srq;
  o.srq.max_memory = static_cast<uint64_t>(FLAGS_rdma_srq_max_memory);
  o.srq.initial_credits = static_cast<uint32_t>(FLAGS_rdma_srq_initial_credits);
  o.srq.floor_credits = static_cast<uint32_t>(FLAGS_rdma_srq_floor_credits);
  o.srq.reclaim_after = MonoDelta::FromMilliseconds(FLAGS_rdma_srq_reclaim_after_ms);
  o.srq.max_credits = static_cast<uint32_t>(FLAGS_rdma_srq_max_credits);
  return o;
}

Result<std::optional<RdmaOptions>> RdmaOptionsIfEnabledFromFlags() {
  if (!FLAGS_rdma) return std::optional<RdmaOptions>();
  RRPC_ASSIGN_OR_RETURN(RdmaOptions o, RdmaOptionsFromFlags());
  return std::optional<RdmaOptions>(std::move(o));
}

Status UseRdmaFromFlags(const std::string& who, rpc::MessengerOptions* options) {
  RRPC_ASSIGN_OR_RETURN(std::optional<RdmaOptions> rdma, RdmaOptionsIfEnabledFromFlags());
  if (!rdma) return Status::OK();
  const Status usable = ProbeRdmaDevice(*rdma);
  if (!usable.ok()) {
    fprintf(stderr, "%s: --rdma: %s; staying on TCP\n", who.c_str(), usable.ToString().c_str());
    return Status::OK();
  }
  options->transport_factory = NewRdmaTransportFactory(*std::move(rdma));
  return Status::OK();
}

}  // namespace rrpc::rdma
