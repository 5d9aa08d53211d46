# Install rules: `cmake --install build --prefix /opt/rrpc` puts into the prefix
#   include/rrpc/       the repository's include/rrpc/ (the public headers and rrpc's own .proto
#                       files) and the headers generated from those .proto files: nothing else
#                       at the top of include/
#   lib/                the static libraries, lib/cmake/rrpc/ (the CMake package: imported
#                       targets rrpc::rrpc (all of them), rrpc::rpc, rrpc::cluster,
#                       rrpc::server, rrpc::rdma..., rrpc::protoc-gen-rrpc, rrpc_proto())
#                       and lib/pkgconfig/rrpc.pc
#   bin/                protoc-gen-rrpc and the tools (rrpc-cli, rpc-bench, kv-server, kv-cli,
#                       kv-bench)
# Included by the top CMakeLists.txt once every target exists. Nothing below src/ is installed.
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
# rrpc::rrpc: every library an application needs (the runtime, channels and discovery,
# ServerBase and the web UI, the RDMA transport) behind one name; link it unless the binary's
# size matters more than one line of CMake.
add_library(rrpc_all INTERFACE)
target_link_libraries(rrpc_all INTERFACE rrpc_server rrpc_cluster rrpc_discovery rrpc_rdma rrpc_rpc)
set_target_properties(rrpc_all PROPERTIES EXPORT_NAME rrpc)
add_library(rrpc::rrpc ALIAS rrpc_all)
install(TARGETS ${RRPC_EXPORTED_LIBRARIES} rrpc_all protoc-gen-rrpc EXPORT rrpcTargets
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

# The public API is the folder include/rrpc/, installed as it is: headers and rrpc's own .proto
# files. A public header includes only public headers (public-headers-test checks the installed
# set). The headers generated from those .proto files are installed with their proto library
# (below).
install(DIRECTORY "${RRPC_PUBLIC_INCLUDE_DIR}/rrpc" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
# A library made by rrpc_proto() from public .proto files: their generated headers, each at its
# import path below include/ (the .proto files themselves come with include/rrpc/).
function(rrpc_install_proto_library target)
  get_target_property(out_dir ${target} RRPC_PROTO_OUT_DIR)
  get_target_property(stems ${target} RRPC_PROTO_STEMS)
  get_target_property(no_rrpc ${target} RRPC_PROTO_NO_RRPC)
  foreach(stem ${stems})
    set(files "${out_dir}/${stem}.pb.h")
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
