# Install rules: `cmake --install build --prefix /opt/rrpc` puts into the prefix
#   include/rrpc/       the public headers (src/rrpc/rpc/*.h, src/rrpc/server/*.h) and the rrpc
#                       headers they include (some of util/), rrpc's own .proto files and their
#                       generated headers (rrpc/rpc/rrpc_options.proto...): nothing else at the
#                       top of include/
#   lib/                the static libraries, lib/cmake/rrpc/ (the CMake package: imported
#                       targets rrpc::rpc, rrpc::server, rrpc::rdma..., rrpc::protoc-gen-rrpc,
#                       rrpc_proto())
#                       and lib/pkgconfig/rrpc.pc
#   bin/                protoc-gen-rrpc and the tools (rrpc-cli, rpc-bench, kv-server, kv-cli,
#                       kv-bench)
# Included by the top CMakeLists.txt once every target exists. The subfolders of src/rrpc/rpc (core/,
# transport/, observe/) are internal: their headers are not installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(RRPC_CMAKE_PACKAGE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/rrpc")

# The libraries of the package, each one before the libraries it uses (the order of rrpc.pc's
# Libs). Exported as rrpc::<name without "rrpc_">: rrpc::rpc, rrpc::server...
# rrpc_rdma (rrpc::rdma, the RDMA transport: rrpc/rpc/rdma.h) comes before rrpc_rpc in the
# link order although it does not use it: it uses rrpc_transport, which follows both.
set(RRPC_EXPORTED_LIBRARIES rrpc_server rrpc_server_proto rrpc_web rrpc_cluster rrpc_discovery
  rrpc_discovery_proto rrpc_rdma rrpc_rpc rrpc_transport rrpc_security rrpc_observe
  rrpc_rpc_proto rrpc_metrics rrpc_util)
foreach(lib ${RRPC_EXPORTED_LIBRARIES})
  string(REGEX REPLACE "^rrpc_" "" export_name "${lib}")
  set_target_properties(${lib} PROPERTIES EXPORT_NAME "${export_name}")
endforeach()
install(TARGETS ${RRPC_EXPORTED_LIBRARIES} protoc-gen-rrpc EXPORT rrpcTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

set(tools)
foreach(tool rrpc-cli rpc-bench kv-server kv-cli kv-bench)
  if(TARGET ${tool})
    list(APPEND tools ${tool})
  endif()
endforeach()
install(TARGETS ${tools} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")

# The public headers are those directly in src/rrpc/rpc and src/rrpc/server, and the cluster
# channel's (the rest of rpc/cluster/ reaches into rpc/core/); the package installs
# them and every rrpc header they include, transitively (the util/ headers they use), each at its
# path below include/: nothing a public header does not need. Headers generated from .proto
# files are installed with their proto library (below). A changed #include re-runs the
# configuration, so the set follows the sources. public-headers-test checks the result.
function(rrpc_public_header_closure out)
  file(GLOB queue CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/rrpc/rpc/*.h"
    "${PROJECT_SOURCE_DIR}/src/rrpc/server/*.h")
  list(APPEND queue "${PROJECT_SOURCE_DIR}/src/rrpc/rpc/cluster/channel.h")
  set(closure)
  while(queue)
    list(POP_FRONT queue header)
    if(header IN_LIST closure OR NOT EXISTS "${header}")
      continue()
    endif()
    list(APPEND closure "${header}")
    set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
      "${header}")
    file(STRINGS "${header}" includes REGEX "^#include \"rrpc/")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
      list(APPEND queue "${PROJECT_SOURCE_DIR}/src/${included}")
    endforeach()
  endwhile()
  set(${out} ${closure} PARENT_SCOPE)
endfunction()
rrpc_public_header_closure(public_headers)
foreach(header ${public_headers})
  file(RELATIVE_PATH relative "${PROJECT_SOURCE_DIR}/src" "${header}")
  get_filename_component(dir "${relative}" DIRECTORY)
  install(FILES "${header}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/${dir}")
endforeach()
# A library made by rrpc_proto(): its .proto files (users import them) and generated headers,
# each at its import path below include/.
function(rrpc_install_proto_library target)
  get_target_property(root ${target} RRPC_PROTO_ROOT)
  get_target_property(out_dir ${target} RRPC_PROTO_OUT_DIR)
  get_target_property(stems ${target} RRPC_PROTO_STEMS)
  get_target_property(no_rrpc ${target} RRPC_PROTO_NO_RRPC)
  foreach(stem ${stems})
    set(files "${root}/${stem}.proto" "${out_dir}/${stem}.pb.h")
    if(NOT no_rrpc)
      list(APPEND files "${out_dir}/${stem}.rrpc.h")
    endif()
    get_filename_component(dir "${stem}" DIRECTORY)
    install(FILES ${files} DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/${dir}")
  endforeach()
endfunction()
rrpc_install_proto_library(rrpc_rpc_proto)
rrpc_install_proto_library(rrpc_server_proto)

# The CMake package.
install(EXPORT rrpcTargets NAMESPACE rrpc:: DESTINATION "${RRPC_CMAKE_PACKAGE_DIR}")
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/rrpcConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/rrpcConfig.cmake"
  INSTALL_DESTINATION "${RRPC_CMAKE_PACKAGE_DIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the API.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/rrpcConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/rrpcConfig.cmake" "${PROJECT_BINARY_DIR}/rrpcConfigVersion.cmake"
  "${CMAKE_CURRENT_LIST_DIR}/RrpcImportedDeps.cmake" "${CMAKE_CURRENT_LIST_DIR}/RrpcProtoLibrary.cmake"
  DESTINATION "${RRPC_CMAKE_PACKAGE_DIR}")

# rrpc.pc: relocatable (paths relative to the .pc file), since `cmake --install --prefix` picks
# the prefix after configuration.
file(RELATIVE_PATH RRPC_PC_PREFIX_FROM_PCFILEDIR "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig"
  "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" RRPC_PC_PREFIX_FROM_PCFILEDIR "${RRPC_PC_PREFIX_FROM_PCFILEDIR}")
list(TRANSFORM RRPC_EXPORTED_LIBRARIES PREPEND "-l" OUTPUT_VARIABLE RRPC_PC_LIBS)
list(JOIN RRPC_PC_LIBS " " RRPC_PC_LIBS)
# rrpc_rdma dlopen()s libibverbs: -ldl where the C library keeps dlopen apart.
set(RRPC_PC_DL_LIBS)
foreach(dl ${CMAKE_DL_LIBS})
  string(APPEND RRPC_PC_DL_LIBS " -l${dl}")
endforeach()
string(STRIP "${RRPC_PC_DL_LIBS}" RRPC_PC_DL_LIBS)
configure_file("${CMAKE_CURRENT_LIST_DIR}/rrpc.pc.in" "${PROJECT_BINARY_DIR}/rrpc.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/rrpc.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
