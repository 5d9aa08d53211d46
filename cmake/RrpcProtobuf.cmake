# rrpc_proto(TARGET [NO_RRPC] FILES...) for rrpc's own .proto files: compiles them into a static
# library TARGET with protoc's C++ output and, where the file declares services, rrpc's service
# bases and proxies (protoc-gen-rrpc, built in src/rpc/codegen). A file's import path, and the
# path of its generated files below the build's generated/ folder, is its path below the root that
# holds it: include/ for the public ones (include/rrpc/rpc/rpc_header.proto gives
# `#include "rrpc/rpc/rpc_header.pb.h"`), src/ for internal ones (src/rpc/testing/rtest.proto
# gives "rpc/testing/rtest.rrpc.h"), the repository root otherwise (bench/bench.proto). Every
# file may import the public ones (rrpc/rpc/rrpc_options.proto). PROTO_ROOT and OUT_DIR name
# other folders (examples/).
#
# NO_RRPC: plain messages, no rrpc plugin (the RPC core's own protos). The body is shared with the
# installed package's rrpc_proto() (RrpcProtoLibrary.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/RrpcProtoLibrary.cmake)

function(rrpc_proto target)
  cmake_parse_arguments(ARG "" "PROTO_ROOT;OUT_DIR" "" ${ARGN})
  set(root "${PROJECT_SOURCE_DIR}")
  set(out_dir "${RRPC_GENERATED_DIR}")
  foreach(arg ${ARG_UNPARSED_ARGUMENTS})
    if(arg MATCHES "\\.proto$")
      get_filename_component(first "${arg}" ABSOLUTE)
      foreach(candidate "${RRPC_PUBLIC_INCLUDE_DIR}" "${PROJECT_SOURCE_DIR}/src")
        if(first MATCHES "^${candidate}/")
          set(root "${candidate}")
        endif()
      endforeach()
      break()
    endif()
  endforeach()
  if(ARG_PROTO_ROOT)
    set(root "${ARG_PROTO_ROOT}")
  endif()
  if(ARG_OUT_DIR)
    set(out_dir "${ARG_OUT_DIR}")
  endif()
  _rrpc_proto_library(${target} PLUGIN protoc-gen-rrpc RPC_LIBRARY rrpc_rpc
    PROTO_ROOT "${root}" OUT_DIR "${out_dir}" ${ARG_UNPARSED_ARGUMENTS}
    IMPORT_DIRS "${RRPC_PUBLIC_INCLUDE_DIR}")
  target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${RRPC_PUBLIC_INCLUDE_DIR}>"
    "$<BUILD_INTERFACE:${root}>")
endfunction()
