# The body of rrpc_proto(), shared by rrpc's own build (RrpcProtobuf.cmake) and by projects using
# the installed package (rrpcConfig.cmake). The two differ only in where the plugin, the RPC
# library and rrpc's own .proto files (rrpc/rpc/rrpc_options.proto) come from; each passes its own.
#
# _rrpc_proto_library(TARGET PLUGIN <executable target> RPC_LIBRARY <library target>
#                     [NO_RRPC] [PROTO_ROOT <dir>] [OUT_DIR <dir>] [IMPORT_DIRS <dir>...]
#                     <proto>...)
# compiles the .proto files into the static library TARGET: protoc's C++ messages and, unless
# NO_RRPC, rrpc's service bases and proxies (.rrpc.h/.rrpc.cc), linking RPC_LIBRARY. A file's path
# below PROTO_ROOT (default: the current source dir) is its import path and the path of its
# generated files below OUT_DIR (default: the current binary dir), which TARGET puts on its
# include path: PROTO_ROOT/store/kv.proto gives #include "store/kv.rrpc.h". IMPORT_DIRS are more
# roots for the files they import.
function(_rrpc_proto_library target)
  cmake_parse_arguments(ARG "NO_RRPC" "PLUGIN;RPC_LIBRARY;PROTO_ROOT;OUT_DIR" "IMPORT_DIRS" ${ARGN})
  if(NOT ARG_PROTO_ROOT)
    set(ARG_PROTO_ROOT "${CMAKE_CURRENT_SOURCE_DIR}")
  endif()
  if(NOT ARG_OUT_DIR)
    set(ARG_OUT_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  get_filename_component(root "${ARG_PROTO_ROOT}" ABSOLUTE)
  get_filename_component(out_dir "${ARG_OUT_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  set(proto_path "--proto_path=${root}")
  foreach(dir ${ARG_IMPORT_DIRS})
    list(APPEND proto_path "--proto_path=${dir}")
  endforeach()
  list(REMOVE_DUPLICATES proto_path)
  set(plugin_args)
  if(NOT ARG_NO_RRPC)
    set(plugin_args "--plugin=protoc-gen-rrpc=$<TARGET_FILE:${ARG_PLUGIN}>" "--rrpc_out=${out_dir}")
  endif()

  set(srcs)
  set(stems)
  foreach(proto ${ARG_UNPARSED_ARGUMENTS})
    get_filename_component(abs "${proto}" ABSOLUTE)
    file(RELATIVE_PATH rel "${root}" "${abs}")
    if(rel MATCHES "^\\.\\./")
      message(FATAL_ERROR "rrpc_proto(${target}): ${proto} is not below PROTO_ROOT ${root}")
    endif()
    string(REGEX REPLACE "\\.proto$" "" stem "${rel}")
    set(outputs "${out_dir}/${stem}.pb.cc" "${out_dir}/${stem}.pb.h")
    set(plugin_deps)
    if(NOT ARG_NO_RRPC)
      list(APPEND outputs "${out_dir}/${stem}.rrpc.cc" "${out_dir}/${stem}.rrpc.h")
      set(plugin_deps ${ARG_PLUGIN})
    endif()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND protobuf::protoc ${proto_path} --cpp_out=${out_dir} ${plugin_args} "${abs}"
      DEPENDS "${abs}" protobuf::protoc ${plugin_deps}
      COMMENT "protoc ${rel}"
      VERBATIM)
    list(APPEND srcs ${outputs})
    list(APPEND stems "${stem}")
  endforeach()

  add_library(${target} STATIC ${srcs})
  target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${out_dir}>")
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf)
  if(NOT ARG_NO_RRPC)
    target_link_libraries(${target} PUBLIC ${ARG_RPC_LIBRARY})
  endif()
  # What rrpc's install rules need to install a proto library's .proto and generated headers.
  set_target_properties(${target} PROPERTIES
    RRPC_PROTO_ROOT "${root}" RRPC_PROTO_OUT_DIR "${out_dir}" RRPC_PROTO_STEMS "${stems}"
    RRPC_PROTO_NO_RRPC "${ARG_NO_RRPC}")
endfunction()
