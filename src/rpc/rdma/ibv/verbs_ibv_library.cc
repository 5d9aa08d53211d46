#include "rpc/rdma/ibv/verbs_ibv_library.h"

#include <dlfcn.h>

namespace rrpc::rdma::ibv {
namespace {

template <typename F>
bool Find(void* handle, const char* name, F* fn, bool required = true) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  return *fn != nullptr || !required;
}

const Library* LoadOnce() {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return nullptr;
  static Library lib;
  bool ok =
      Find(h, "ibv_get_device_list", &lib.get_device_list) &&
      Find(h, "ibv_free_device_list", &lib.free_device_list) &&
      Find(h, "ibv_get_device_name", &lib.get_device_name) &&
      Find(h, "ibv_open_device", &lib.open_device) &&
      Find(h, "ibv_close_device", &lib.close_device) &&
      Find(h, "ibv_query_device", &lib.query_device) &&
      Find(h, "ibv_query_port", &lib.query_port) && Find(h, "ibv_query_gid", &lib.query_gid) &&
      Find(h, "_ibv_query_gid_ex", &lib.query_gid_ex, /*required=*/false) &&
      Find(h, "ibv_alloc_pd", &lib.alloc_pd) && Find(h, "ibv_dealloc_pd", &lib.dealloc_pd) &&
      Find(h, "ibv_reg_mr", &lib.reg_mr) && Find(h, "ibv_dereg_mr", &lib.dereg_mr) &&
      Find(h, "ibv_create_comp_channel", &lib.create_comp_channel) &&
      Find(h, "ibv_destroy_comp_channel", &lib.destroy_comp_channel) &&
      Find(h, "ibv_create_cq", &lib.create_cq) && Find(h, "ibv_destroy_cq", &lib.destroy_cq) &&
      Find(h, "ibv_get_cq_event", &lib.get_cq_event) &&
      Find(h, "ibv_ack_cq_events", &lib.ack_cq_events) &&
      Find(h, "ibv_create_qp", &lib.create_qp) && Find(h, "ibv_destroy_qp", &lib.destroy_qp) &&
      Find(h, "ibv_modify_qp", &lib.modify_qp) && Find(h, "ibv_create_srq", &lib.create_srq) &&
      Find(h, "ibv_destroy_srq", &lib.destroy_srq) && Find(h, "ibv_modify_srq", &lib.modify_srq) &&
      Find(h, "ibv_get_async_event", &lib.get_async_event) &&
      Find(h, "ibv_ack_async_event", &lib.ack_async_event) &&
      Find(h, "ibv_fork_init", &lib.fork_init, /*required=*/false) &&
      Find(h, "ibv_query_pkey", &lib.query_pkey, /*required=*/false);
  return ok ? &lib : nullptr;  // the handle stays open for the process
}

}  // namespace

const Library* Load() {
  static const Library* lib = LoadOnce();
  return lib;
}

}  // namespace rrpc::rdma::ibv
