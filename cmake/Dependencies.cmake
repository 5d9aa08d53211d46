# Finds the Debian-packaged dependencies (installed by thirdparty/install-deps.sh).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(GTest REQUIRED)
find_package(PkgConfig REQUIRED)

# libev::libev, glog::glog, gflags::gflags, civetweb::civetweb, c-ares::cares (shared with the
# installed package).
include(${CMAKE_CURRENT_LIST_DIR}/RrpcImportedDeps.cmake)

# libprotoc, for the protoc plugin.
find_library(PROTOC_LIBRARY protoc REQUIRED)

# rdma-core's verbs library: the hardware backend of the RDMA transport.
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
find_library(IBVERBS_LIBRARY ibverbs)
