# Finds the Debian-packaged dependencies (installed by thirdparty/install-deps.sh).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(GTest REQUIRED)
find_package(PkgConfig REQUIRED)

# libev ships neither a CMake config nor a pkg-config file on Debian.
find_path(LIBEV_INCLUDE_DIR ev.h REQUIRED)
find_library(LIBEV_LIBRARY ev REQUIRED)
add_library(libev::libev UNKNOWN IMPORTED)
set_target_properties(libev::libev PROPERTIES
  IMPORTED_LOCATION "${LIBEV_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${LIBEV_INCLUDE_DIR}")

find_path(GLOG_INCLUDE_DIR glog/logging.h REQUIRED)
find_library(GLOG_LIBRARY glog REQUIRED)
find_path(GFLAGS_INCLUDE_DIR gflags/gflags.h REQUIRED)
find_library(GFLAGS_LIBRARY gflags REQUIRED)
add_library(gflags::gflags UNKNOWN IMPORTED)
set_target_properties(gflags::gflags PROPERTIES
  IMPORTED_LOCATION "${GFLAGS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${GFLAGS_INCLUDE_DIR}")
add_library(glog::glog UNKNOWN IMPORTED)
set_target_properties(glog::glog PROPERTIES
  IMPORTED_LOCATION "${GLOG_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${GLOG_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES gflags::gflags)

# libprotoc, for the protoc plugin.
find_library(PROTOC_LIBRARY protoc REQUIRED)

# rdma-core's verbs library: the hardware backend of the RDMA transport.
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
find_library(IBVERBS_LIBRARY ibverbs)

# civetweb, the embedded HTTP server of the metrics web UI.
find_path(CIVETWEB_INCLUDE_DIR civetweb.h)
find_library(CIVETWEB_LIBRARY civetweb)
