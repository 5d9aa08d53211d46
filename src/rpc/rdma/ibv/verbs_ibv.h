// The libibverbs backend of the verbs interface (verbs.h). libibverbs.so.1 is loaded with dlopen
// at run time, so every rrpc binary runs on a machine without it (OpenVerbsDevice then says
// NotFound and the transport falls back to TCP). The device, port and GID come from
// VerbsDeviceOptions; the defaults scan every device and port for the first ACTIVE one with a
// usable GID, chosen as gid_choice.h says (verbs_ibv_ports.h reads the ports). The inline cap is
// what the device grants at QP creation: asked for, read back, and asked smaller where a device
// refuses. Thread-safe, as libibverbs is.
#pragma once

#include <memory>
#include <string>

#include "rpc/rdma/verbs.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rdma {

namespace ibv {
struct Library;
}  // namespace ibv

// Whether libibverbs.so.1 could be loaded (cached after the first call). Thread-safe.
bool VerbsLibraryAvailable();

// NotFound when the library or a device (or an active port) is missing. `local`: the bootstrap
// address of the connection that opens the device (unset: none); among the ACTIVE ports, one
// holding that address, else one on its netdev, is preferred (gid_choice.h, ChoosePort).
Result<std::unique_ptr<Context>> OpenVerbsDevice(const VerbsDeviceOptions& options = {},
                                                 const Sockaddr& local = Sockaddr());
// The same through the entry points `lib` (OpenVerbsDevice above passes ibv::Load(), the
// dlopen'ed libibverbs; verbs_ibv_fake-test.cc a table of fakes that records what the backend
// asks for). `lib`, and every ibv_ object it hands out, outlive the context and what it made.
Result<std::unique_ptr<Context>> OpenVerbsDeviceWith(const ibv::Library& lib,
                                                     const VerbsDeviceOptions& options,
                                                     const Sockaddr& local = Sockaddr());

// For people, not programs (rdma_check.h): every device and port libibverbs sees, with state,
// link layer, active MTU and the GID table (non-zero entries, with their types where the library
// tells them). Says plainly when the library or any device is missing.
std::string DescribeVerbsDevices();

}  // namespace rrpc::rdma
