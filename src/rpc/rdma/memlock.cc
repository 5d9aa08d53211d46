#include "rpc/rdma/memlock.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace rrpc::rdma {
namespace {

std::string Bytes(uint64_t n) {
  if (n == kUnlimitedMemlock) return "unlimited";
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= 1024) return std::to_string((n + 1023) / 1024) + " KiB";
  return std::to_string(n) + " B";
}

constexpr const char* kHowToRaise =
    "raise it: `ulimit -l unlimited` in the shell that starts the process, LimitMEMLOCK=infinity "
    "in its systemd unit, or memlock in /etc/security/limits.conf";

}  // namespace

uint64_t LockedMemoryLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kUnlimitedMemlock;
  return static_cast<uint64_t>(r.rlim_cur);
}

std::string MemlockWarning(uint64_t limit, uint64_t per_unit, uint64_t min_units,
                           const std::string& unit) {
  if (limit == kUnlimitedMemlock || per_unit == 0) return "";
  const uint64_t room = limit / per_unit;
  if (room >= min_units) return "";
  return "RDMA: the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is " + Bytes(limit) +
         ", room for " + std::to_string(room) + " " + unit + "(s) pinning " + Bytes(per_unit) +
         " each; beyond that registration fails and connections stay on TCP (reason "
         "resources): " +
         kHowToRaise;
}

Status RegistrationError(int err, size_t length, uint64_t limit) {
  if (err == ENOMEM && limit == kUnlimitedMemlock) {
    // Not the limit: the host's memory, or the device's translation tables, ran out.
    return Status::IOError("RDMA memory registration of " + Bytes(length) +
                           " refused (ENOMEM) with no locked-memory limit: the host's memory or "
                           "the RDMA device's memory-translation resources ran out");
  }
  if (err == ENOMEM || err == EPERM) {
    return Status::IOError("RDMA memory registration of " + Bytes(length) + " refused (" +
                           strerror(err) +
                           "): pinned memory is over the locked-memory limit (RLIMIT_MEMLOCK, "
                           "ulimit -l) of " +
                           Bytes(limit) + "; " + kHowToRaise);
  }
  return Status::FromErrno("RDMA memory registration (ibv_reg_mr)", err);
}

}  // namespace rrpc::rdma
