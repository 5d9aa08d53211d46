// The ports of a libibverbs device as rrpc reads them (verbs_ibv_ports.h), and the description
// rdma-check prints (verbs_ibv.h, DescribeVerbsDevices).
#include "rpc/rdma/ibv/verbs_ibv_ports.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "rpc/rdma/bootstrap/gid_choice.h"
#include "rpc/rdma/ibv/verbs_ibv.h"

namespace rrpc::rdma {
namespace ibv {
namespace {

uint32_t MtuBytes(ibv_mtu mtu) { return 128u << static_cast<int>(mtu); }

// A GID's type from the kernel (sysfs, Linux 4.4+): "IB/RoCE v1" or "RoCE v2". An Ethernet
// entry the kernel says nothing of is RoCE v1 (all an older kernel made).
GidType SysfsGidType(const std::string& device, int port, int index) {
  std::ifstream f("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port) +
                  "/gid_attrs/types/" + std::to_string(index));
  std::string line;
  if (std::getline(f, line) && line.rfind("RoCE v2", 0) == 0) return GidType::kRoceV2;
  return GidType::kRoceV1;
}

}  // namespace

std::vector<GidEntry> GidTableOf(const Library* lib, ibv_context* ctx, const std::string& device,
                                 int port, const ibv_port_attr& attr) {
  const bool eth = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  std::vector<GidEntry> table;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    GidEntry e;
    e.index = i;
    bool typed = false;
    if (lib->query_gid_ex != nullptr) {
      ibv_gid_entry entry{};
      const int rc = lib->query_gid_ex(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(i),
                                       &entry, 0, sizeof(entry));
      if (rc == ENODATA) continue;
      if (rc == 0) {
        memcpy(e.gid.data(), entry.gid.raw, 16);
        e.type = entry.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::kRoceV2
                 : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoceV1
                                                          : GidType::kIb;
        e.ndev_ifindex = entry.ndev_ifindex;  // 0: no netdev
        typed = true;
      }
    }
    if (!typed) {
      ibv_gid gid;
      if (lib->query_gid(ctx, static_cast<uint8_t>(port), i, &gid) != 0) continue;
      memcpy(e.gid.data(), gid.raw, 16);
      e.type = eth ? SysfsGidType(device, port, i) : GidType::kIb;
    }
    if (!GidIsZero(e.gid)) table.push_back(e);
  }
  return table;
}

Result<uint16_t> PkeyIndexOf(const Library* lib, ibv_context* ctx, const std::string& device,
                             int port, const ibv_port_attr& pattr, uint16_t pkey, uint16_t* value) {
  char asked[8];
  snprintf(asked, sizeof(asked), "0x%04x", pkey);
  if (lib->query_pkey == nullptr) {
    return Status::NotSupported(std::string("P_Key ") + asked +
                                " asked for, but libibverbs has no ibv_query_pkey");
  }
  int found = -1;
  for (int i = 0; i < pattr.pkey_tbl_len; ++i) {
    __be16 raw = 0;
    if (lib->query_pkey(ctx, static_cast<uint8_t>(port), i, &raw) != 0) continue;
    const uint16_t entry = ntohs(raw);
    if ((entry & 0x7FFF) == 0 || (entry & 0x7FFF) != (pkey & 0x7FFF)) continue;  // 0: empty
    if (found < 0 || entry == pkey) {
      found = i;
      *value = entry;
    }
    if (entry == pkey) break;
  }
  if (found < 0) {
    return Status::NotFound(std::string("P_Key ") + asked + " is not in the P_Key table of " +
                            device + " port " + std::to_string(port));
  }
  return static_cast<uint16_t>(found);
}

Result<PortInfo> PortInfoOf(const Library* lib, ibv_context* ctx, const std::string& name, int port,
                            const ibv_port_attr& pattr, const VerbsDeviceOptions& options) {
  PortInfo info;
  info.port = port;
  info.lid = pattr.lid;
  info.active_mtu = MtuBytes(pattr.active_mtu);
  info.max_msg_size = pattr.max_msg_sz;
  info.ethernet = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
  info.num_comp_vectors = std::max(1, ctx->num_comp_vectors);
  info.gid_table = GidTableOf(lib, ctx, name, port, pattr);
  GidEntry chosen;
  if (options.gid_index >= 0) {
    auto it = std::find_if(info.gid_table.begin(), info.gid_table.end(),
                           [&](const GidEntry& e) { return e.index == options.gid_index; });
    if (it == info.gid_table.end()) {
      return Status::NotFound("no GID at index " + std::to_string(options.gid_index));
    }
    chosen = *it;
    info.gid_pinned = true;
  } else {
    RRPC_ASSIGN_OR_RETURN(chosen, ChooseGid(info.gid_table, Sockaddr()));
  }
  info.gid = chosen.gid;
  info.gid_index = chosen.index;
  info.gid_type = chosen.type;
  if (options.pkey >= 0) {
    RRPC_ASSIGN_OR_RETURN(
        info.pkey_index,
        PkeyIndexOf(lib, ctx, name, port, pattr, static_cast<uint16_t>(options.pkey), &info.pkey));
  }
  return info;
}

namespace {

const char* PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

std::string GidText(const uint8_t* raw) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, raw, text, sizeof(text));
  return text;
}

void DescribePort(const Library* lib, ibv_context* ctx, int port, std::string* out) {
  ibv_port_attr pattr{};
  if (lib->query_port(ctx, static_cast<uint8_t>(port), &pattr) != 0) {
    *out += "  port " + std::to_string(port) + ": query failed\n";
    return;
  }
  const bool eth = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
  *out += "  port " + std::to_string(port) + ": " + PortStateName(pattr.state) + ", " +
          (eth ? "Ethernet (RoCE)" : "InfiniBand") + ", active MTU " +
          std::to_string(MtuBytes(pattr.active_mtu)) + ", LID " + std::to_string(pattr.lid) + "\n";
  for (const GidEntry& e : GidTableOf(lib, ctx, lib->get_device_name(ctx->device), port, pattr)) {
    const bool link_local = GidIsLinkLocal(e.gid);
    *out += "    gid " + std::to_string(e.index) + ": " + GidText(e.gid.data()) + "  " +
            GidTypeName(e.type) + (link_local && eth ? "  (link-local: does not route)" : "") +
            "\n";
  }
}

}  // namespace
}  // namespace ibv

std::string DescribeVerbsDevices() {
  const ibv::Library* lib = ibv::Load();
  if (lib == nullptr) {
    return "libibverbs.so.1 not found: no RDMA here (install rdma-core / libibverbs1); "
           "connections stay on TCP (fallback reason no_device)\n";
  }
  int n = 0;
  ibv_device** list = lib->get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) lib->free_device_list(list);
    return "libibverbs loaded, but there is no RDMA device on this machine: connections stay "
           "on TCP (fallback reason no_device); --rdma_backend=soft runs the software backend\n";
  }
  std::string out = std::to_string(n) + " RDMA device(s)\n";
  for (int d = 0; d < n; ++d) {
    const std::string name = lib->get_device_name(list[d]);
    ibv_context* ctx = lib->open_device(list[d]);
    if (ctx == nullptr) {
      out += name + ": cannot open (" + strerror(errno) + ")\n";
      continue;
    }
    ibv_device_attr dattr{};
    if (lib->query_device(ctx, &dattr) != 0) {
      out += name + ": query failed\n";
    } else {
      out += name + ": " + std::to_string(dattr.phys_port_cnt) + " port(s), max_qp_wr " +
             std::to_string(dattr.max_qp_wr) + ", max_srq_wr " + std::to_string(dattr.max_srq_wr) +
             ", completion vectors " + std::to_string(ctx->num_comp_vectors) + "\n";
      for (int p = 1; p <= dattr.phys_port_cnt; ++p) ibv::DescribePort(lib, ctx, p, &out);
    }
    lib->close_device(ctx);
  }
  lib->free_device_list(list);
  return out;
}

}  // namespace rrpc::rdma
