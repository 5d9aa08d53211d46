# rrpc_proto(TARGET [NO_RRPC] FILES...) for rrpc's own .proto files: compiles them into a static
# library TARGET with protoc's C++ output and, where the file declares services, rrpc's service
# bases and proxies (protoc-gen-rrpc, built in src/rrpc/rpc/codegen). Import paths and generated files
# are relative to src/, so src/rrpc/rpc/rpc_header.proto gives `#include "rrpc/rpc/rpc_header.pb.h"`.
#
# NO_RRPC: plain messages, no rrpc plugin (the RPC core's own protos). The body is shared with the
# installed package's rrpc_proto() (RrpcProtoLibrary.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/RrpcProtoLibrary.cmake)

function(rrpc_proto target)
  _rrpc_proto_library(${target} PLUGIN protoc-gen-rrpc RPC_LIBRARY rrpc_rpc
    PROTO_ROOT "${PROJECT_SOURCE_DIR}/src" OUT_DIR "${PROJECT_BINARY_DIR}/src" ${ARGN})
  target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>")
endfunction()
