// The RDMA flags' adapter; declared in the public rrpc/rpc/rdma_flags.h.
#pragma once

#include "rpc/rdma/rdma_factory.h"
#include "rrpc/rpc/rdma_flags.h"
