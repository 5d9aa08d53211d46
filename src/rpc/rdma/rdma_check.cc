#include "rpc/rdma/rdma_check.h"

#include <cstring>

#include "rpc/rdma/memlock.h"
#include "rpc/rdma/rdma_endpoint.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

std::string LimitText(uint64_t limit) {
  return limit == kUnlimitedMemlock ? "unlimited" : std::to_string(limit / 1024) + " KiB";
}

// One message from an endpoint to another on the same device, each connected to the other.
Status Loopback(Context* ctx, MonoDelta* took) {
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<ProtectionDomain> pd, ctx->AllocPd());
  EndpointOptions o;
  o.buffer_size = 4096;
  o.receive_buffers = 4;
  o.send_buffers = 4;
  o.spare_receive_buffers = 0;
  o.rnr_retry = 7;
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<RdmaEndpoint> a, RdmaEndpoint::Create(ctx, pd.get(), o));
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<RdmaEndpoint> b, RdmaEndpoint::Create(ctx, pd.get(), o));
  RRPC_RETURN_NOT_OK(a->Connect(b->address(), ctx->port().active_mtu));
  RRPC_RETURN_NOT_OK(b->Connect(a->address(), ctx->port().active_mtu));
  uint32_t index = 0;
  a->send_pool()->Take(&index);
  memcpy(a->send_pool()->block(index), "rdma-check", 10);
  Sge sge = a->send_pool()->sge(index, 10);
  SendWr wr;
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const MonoTime start = MonoTime::Now();
  RRPC_RETURN_NOT_OK(a->qp()->PostSend(wr));
  const MonoTime deadline = start + MonoDelta::FromSeconds(5);
  while (MonoTime::Now() < deadline) {
    WorkCompletion wc[8];
    RRPC_ASSIGN_OR_RETURN(int n, b->cq()->Poll(wc, 8));
    for (int i = 0; i < n; ++i) {
      if (wc[i].opcode != WcOpcode::kRecv) continue;
      if (wc[i].status != WcStatus::kSuccess) {
        return Status::NetworkError("the message arrived with an error",
                                    WcStatusName(wc[i].status));
      }
      *took = MonoTime::Now() - start;
      return Status::OK();
    }
    RRPC_ASSIGN_OR_RETURN(n, a->cq()->Poll(wc, 8));
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) {
        return Status::NetworkError("the send failed", WcStatusName(wc[i].status));
      }
    }
  }
  return Status::TimedOut("no message within 5 s (a path that drops packets?)");
}

}  // namespace

RdmaCheckResult RunRdmaCheck(const RdmaOptions& options) {
  RdmaCheckResult r;
  const bool soft = options.backend == RdmaBackend::kSoft;
  r.report +=
      std::string("backend: ") + (soft ? "soft (the software backend, no NIC)" : "verbs") + "\n";
  if (!soft) r.report += DescribeVerbsDevices();
  const uint64_t limit = LockedMemoryLimit();
  const EndpointOptions& e = options.endpoint;
  const uint64_t per_connection =
      uint64_t{e.receive_buffers + e.spare_receive_buffers + e.send_buffers} * e.buffer_size;
  r.report +=
      "locked-memory limit (ulimit -l): " + LimitText(limit) +
      "; pinned per connection (private receive queue): " + std::to_string(per_connection / 1024) +
      " KiB\n";
  const std::string warning = MemlockWarningFor(options, limit);
  if (!warning.empty()) r.report += "warning: " + warning + "\n";
  std::unique_ptr<Context> ctx;
  if (soft) {
    Result<std::unique_ptr<SoftDevice>> dev = OpenSoftDevice(options.soft);
    if (!dev.ok()) {
      r.report += "loopback: cannot open the software device: " + dev.status().ToString() + "\n";
      return r;
    }
    ctx = std::move(dev).value();
  } else {
    Result<std::unique_ptr<Context>> dev = OpenVerbsDevice(options.verbs);
    if (!dev.ok()) {
      r.report += "loopback: not run, no usable device: " + dev.status().ToString() + "\n";
      return r;
    }
    ctx = std::move(dev).value();
  }
  const PortInfo& port = ctx->port();
  r.report += "using " + ctx->device_name() + " port " + std::to_string(port.port) + " gid index " +
              std::to_string(port.gid_index) + " (" + GidTypeName(port.gid_type) + "), MTU " +
              std::to_string(port.active_mtu) + "\n";
  MonoDelta took;
  Status s = Loopback(ctx.get(), &took);
  if (!s.ok()) {
    r.report += "loopback round trip: FAILED: " + s.ToString() + "\n";
    return r;
  }
  r.ok = true;
  r.report += "loopback round trip: ok (" + std::to_string(took.ToMicroseconds()) + " us)\n";
  return r;
}

}  // namespace rrpc::rdma
