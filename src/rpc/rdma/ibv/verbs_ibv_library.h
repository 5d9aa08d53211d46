// The libibverbs entry points the verbs backend calls, looked up with dlopen/dlsym once per
// process. The data-path calls (ibv_post_send, ibv_poll_cq, ...) are inline functions of
// <infiniband/verbs.h> that go through the device's own function table, so they need no symbol.
#pragma once

#include <infiniband/verbs.h>

namespace rrpc::rdma::ibv {

struct Library {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
  // Optional (rdma-core >= 31): the GID's type, to find a RoCEv2 GID.
  int (*query_gid_ex)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t, size_t);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_comp_channel* (*create_comp_channel)(ibv_context*);
  int (*destroy_comp_channel)(ibv_comp_channel*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ack_cq_events)(ibv_cq*, unsigned int);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  int (*destroy_qp)(ibv_qp*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*);
  int (*destroy_srq)(ibv_srq*);
  int (*modify_srq)(ibv_srq*, ibv_srq_attr*, int);
  int (*get_async_event)(ibv_context*, ibv_async_event*);
  // Optional: makes registered memory survive fork() in the parent (needed before kernel 5.13).
  int (*fork_init)(void);
  void (*ack_async_event)(ibv_async_event*);
  // Optional: a port's P_Key table entry, in network byte order (VerbsDeviceOptions::pkey).
  int (*query_pkey)(ibv_context*, uint8_t, int, __be16*);
};

// nullptr when libibverbs.so.1 (or one of the required symbols) is missing. Thread-safe.
const Library* Load();

}  // namespace rrpc::rdma::ibv
