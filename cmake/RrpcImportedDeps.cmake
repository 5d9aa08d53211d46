# Imported targets for the libraries rrpc links that it finds by hand: libev (no CMake or
# pkg-config file on Debian), glog, gflags, civetweb, c-ares, lz4 and zstd. Shared by rrpc's own build
# (Dependencies.cmake) and the installed package (rrpcConfig.cmake), so a project using the
# package links exactly the libraries rrpc was built with. A target the including project
# already has (say, glog::glog from glog's own package) is kept.

# _rrpc_import_library(TARGET VAR HEADER LIBRARY [LINKED_TARGET...]): the imported TARGET for
# LIBRARY, with the directory holding HEADER; found once, cached as VAR_LIBRARY and
# VAR_INCLUDE_DIR.
function(_rrpc_import_library target var header library)
  if(TARGET ${target})
    return()
  endif()
  find_path(${var}_INCLUDE_DIR ${header} REQUIRED)
  find_library(${var}_LIBRARY ${library} REQUIRED)
  add_library(${target} UNKNOWN IMPORTED)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${${var}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${${var}_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${ARGN}")
endfunction()

_rrpc_import_library(libev::libev LIBEV ev.h ev)
_rrpc_import_library(gflags::gflags GFLAGS gflags/gflags.h gflags)
_rrpc_import_library(glog::glog GLOG glog/logging.h glog gflags::gflags)
# The embedded HTTP server of the web UI (rrpc::web, hence rrpc::server).
_rrpc_import_library(civetweb::civetweb CIVETWEB civetweb.h civetweb)
# The DNS resolver of the dns:// targets (rrpc::discovery).
_rrpc_import_library(c-ares::cares CARES ares.h cares)
# The compression codecs of message bodies (rrpc::rpc; docs/compression.md).
_rrpc_import_library(lz4::lz4 LZ4 lz4.h lz4)
_rrpc_import_library(zstd::zstd ZSTD zstd.h zstd)
