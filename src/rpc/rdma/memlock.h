// Locked memory and RDMA: registering memory pins its pages, and a process may pin no more than
// its RLIMIT_MEMLOCK (`ulimit -l`; systemd's LimitMEMLOCK=). The default (often 64 KiB or 8 MiB)
// holds a few connections at most, and the failure it causes (ENOMEM or EPERM from
// ibv_reg_mr) names neither. These helpers say it plainly: a warning when the device opens, and
// the error a refused registration returns. Thread-safe (plain functions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rrpc/util/status.h"

namespace rrpc::rdma {

constexpr uint64_t kUnlimitedMemlock = UINT64_MAX;

// The process's RLIMIT_MEMLOCK soft limit in bytes (kUnlimitedMemlock: no limit).
uint64_t LockedMemoryLimit();

// A warning for the log when `limit` holds fewer than `min_units` units (`unit`: "connection",
// or "reactor" in SRQ mode) that pin `per_unit` bytes each; empty when it holds them (or is
// unlimited).
std::string MemlockWarning(uint64_t limit, uint64_t per_unit, uint64_t min_units,
                           const std::string& unit);

// What a registration of `length` bytes refused with errno `err` returns: ENOMEM and EPERM
// (what the locked-memory limit causes) name the limit and how to raise it; ENOMEM under no
// limit (kUnlimitedMemlock) names the host's or the device's memory instead.
Status RegistrationError(int err, size_t length, uint64_t limit);

}  // namespace rrpc::rdma
