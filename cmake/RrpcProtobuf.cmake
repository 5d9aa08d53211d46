# rrpc_proto(TARGET FILES...): compiles .proto files into a static library TARGET with protoc's
# C++ output and, where the file declares services, rrpc's service bases and proxies
# (protoc-gen-rrpc, built in src/rpc). Generated files land beside their source path under the
# build tree, so `#include "rpc/rpc_header.pb.h"` works for src/rpc/rpc_header.proto.
#
# Options: NO_RRPC (plain messages, no rrpc plugin; used for the RPC core's own protos).
function(rrpc_proto target)
  cmake_parse_arguments(ARG "NO_RRPC" "" "" ${ARGN})
  set(srcs)
  set(hdrs)
  foreach(proto ${ARG_UNPARSED_ARGUMENTS})
    get_filename_component(abs "${proto}" ABSOLUTE)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}/src" "${abs}")
    string(REGEX REPLACE "\\.proto$" "" stem "${rel}")
    set(out_dir "${PROJECT_BINARY_DIR}/src")
    set(outputs "${out_dir}/${stem}.pb.cc" "${out_dir}/${stem}.pb.h")
    set(plugin_args)
    set(plugin_deps)
    if(NOT ARG_NO_RRPC)
      list(APPEND outputs "${out_dir}/${stem}.rrpc.cc" "${out_dir}/${stem}.rrpc.h")
      set(plugin_args "--plugin=protoc-gen-rrpc=$<TARGET_FILE:protoc-gen-rrpc>" "--rrpc_out=${out_dir}")
      set(plugin_deps protoc-gen-rrpc)
    endif()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND protobuf::protoc
        --proto_path=${PROJECT_SOURCE_DIR}/src
        --cpp_out=${out_dir}
        ${plugin_args}
        "${abs}"
      DEPENDS "${abs}" protobuf::protoc ${plugin_deps}
      COMMENT "protoc ${rel}"
      VERBATIM)
    list(APPEND srcs ${outputs})
  endforeach()
  add_library(${target} STATIC ${srcs})
  target_include_directories(${target} PUBLIC "${PROJECT_BINARY_DIR}/src" "${PROJECT_SOURCE_DIR}/src")
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf)
  if(NOT ARG_NO_RRPC)
    target_link_libraries(${target} PUBLIC rrpc_rpc)
  endif()
endfunction()
