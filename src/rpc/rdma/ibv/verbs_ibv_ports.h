// How rrpc reads a libibverbs device's ports (verbs_ibv.cc opens the device with them): the
// port's GID table with types, and what a connection needs to know of an ACTIVE port.
// Thread-safe, as libibverbs is.
#pragma once

#include <string>
#include <vector>

#include "rpc/rdma/ibv/verbs_ibv_library.h"
#include "rpc/rdma/verbs.h"
#include "rrpc/rpc/rdma.h"

namespace rrpc::rdma::ibv {

// The port's non-empty GID entries with their types: ibv_query_gid_ex where the library has it
// (rdma-core 31+; ENODATA: an empty slot), else ibv_query_gid and the kernel's sysfs
// gid_attrs/types (an Ethernet entry without a type counts as RoCE v1).
std::vector<GidEntry> GidTableOf(const Library* lib, ibv_context* ctx, const std::string& device,
                                 int port, const ibv_port_attr& attr);

// The entry of `port`'s P_Key table (ibv_query_pkey, `pattr.pkey_tbl_len` entries) that
// `pkey` names (VerbsDeviceOptions::pkey): its low 15 bits equal, the same membership bit
// preferred; sets `value` to the entry. NotFound naming the P_Key when the port has none;
// NotSupported without ibv_query_pkey.
Result<uint16_t> PkeyIndexOf(const Library* lib, ibv_context* ctx, const std::string& device,
                             int port, const ibv_port_attr& pattr, uint16_t pkey, uint16_t* value);

// `port` (ACTIVE, described by `pattr`) with the GID chosen (gid_choice.h), or the one
// options.gid_index names, and the P_Key entry options.pkey names (index 0 without it);
// NotFound when there is none.
Result<PortInfo> PortInfoOf(const Library* lib, ibv_context* ctx, const std::string& name, int port,
                            const ibv_port_attr& pattr, const VerbsDeviceOptions& options);

}  // namespace rrpc::rdma::ibv
