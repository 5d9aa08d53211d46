#include "rpc/rdma/soft/soft_ports.h"

#include <map>
#include <mutex>

#include "rpc/rdma/bootstrap/gid_choice.h"

namespace rrpc::rdma::soft {
namespace {

std::mutex routes_mu;
std::map<Gid, Gid>& Routes() {  // address GID -> own GID of its device
  static auto* routes = new std::map<Gid, Gid>();
  return *routes;
}

}  // namespace

Status AppendAddressGids(const std::vector<std::string>& addresses, std::vector<GidEntry>* table) {
  int index = table->empty() ? 0 : table->back().index + 1;
  for (const std::string& a : addresses) {
    const bool v6 = a.find(':') != std::string::npos;
    Result<Sockaddr> parsed = Sockaddr::Parse(v6 ? "[" + a + "]:0" : a + ":0");
    Gid gid{};
    if (!parsed.ok() || !GidOfAddress(*parsed, &gid)) {
      return Status::InvalidArgument("soft device: not an IP address: " + a);
    }
    table->push_back({index++, gid, GidType::kRoceV1});
    table->push_back({index++, gid, GidType::kRoceV2});
  }
  return Status::OK();
}

Result<SoftPortChoice> ChooseSoftPort(const SoftDeviceOptions& options, const Sockaddr& local) {
  if (options.devices.empty()) return SoftPortChoice{options.name, 1, {}};
  std::vector<PortCandidate> candidates;
  std::vector<const SoftPortOptions*> ports;
  for (const SoftNicOptions& nic : options.devices) {
    for (size_t p = 0; p < nic.ports.size(); ++p) {
      PortCandidate c;
      c.device = nic.name;
      c.port = static_cast<int>(p) + 1;
      c.active = nic.ports[p].active;
      // The device's own GID stands in (any non-zero entry): a port without addresses is usable.
      c.table.push_back({0, Gid{1}, GidType::kRoceV2});
      RRPC_RETURN_NOT_OK(AppendAddressGids(nic.ports[p].addresses, &c.table));
      candidates.push_back(std::move(c));
      ports.push_back(&nic.ports[p]);
    }
  }
  RRPC_ASSIGN_OR_RETURN(size_t i, ChoosePort(candidates, local));
  return SoftPortChoice{candidates[i].device, candidates[i].port, ports[i]->addresses};
}

Status ClaimAddressGids(const std::vector<GidEntry>& table, const Gid& own) {
  std::lock_guard<std::mutex> lock(routes_mu);
  for (const GidEntry& e : table) {
    if (e.gid == own || GidIsLinkLocal(e.gid)) continue;
    auto it = Routes().find(e.gid);
    if (it != Routes().end() && it->second != own) {
      return Status::AlreadyPresent(
          "soft device: another device of this process holds GID of "
          "the same address");
    }
  }
  for (const GidEntry& e : table) {
    if (e.gid != own && !GidIsLinkLocal(e.gid)) Routes()[e.gid] = own;
  }
  return Status::OK();
}

void ReleaseAddressGids(const Gid& own) {
  std::lock_guard<std::mutex> lock(routes_mu);
  for (auto it = Routes().begin(); it != Routes().end();) {
    it = it->second == own ? Routes().erase(it) : std::next(it);
  }
}

bool RouteOfAddressGid(const Gid& gid, Gid* own) {
  std::lock_guard<std::mutex> lock(routes_mu);
  auto it = Routes().find(gid);
  if (it == Routes().end()) return false;
  *own = it->second;
  return true;
}

}  // namespace rrpc::rdma::soft
