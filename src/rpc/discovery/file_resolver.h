// The file:// resolver: a file of servers, one host:port a line ('#' comments, blank lines),
// watched with inotify on its directory (so an editor's write-to-temp-then-rename is seen) and
// read again on every change. A file that disappears, goes unreadable or holds a malformed line
// gives an error update; the receiver keeps its last good set.
//
// Thread safety: as Resolver. The listener runs inside Start (first set) and then on the
// resolver's own thread.
#pragma once

#include <memory>
#include <string>

#include "rrpc/rpc/discovery/resolver.h"

namespace rrpc::rpc {

// `target` is the whole target ("file:///etc/servers"), `path` what follows "file://" (must be an
// absolute path). InvalidArgument otherwise.
Result<std::unique_ptr<Resolver>> NewFileResolver(const std::string& target,
                                                  const std::string& path);

}  // namespace rrpc::rpc
