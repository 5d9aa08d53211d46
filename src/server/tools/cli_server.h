// Where rrpc-cli's calls go: one server's address, or the servers of a cluster target (list://,
// file://, dns:///, etcd://; docs/cluster.md) through a channel. Made once per command on the
// CLI's one thread; the proxies it makes are used on that thread.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "rrpc/rpc/channel_if.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/proxy.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::server {

struct CliServer {
  std::shared_ptr<rpc::Messenger> messenger;
  Sockaddr addr;                            // when `channel` is null
  std::shared_ptr<rpc::ChannelIf> channel;  // a target's channel, or null

  // A proxy of `service` at the server (or through the channel). Generated proxies are made the
  // same way: `channel ? FooProxy(channel) : FooProxy(messenger, addr)`.
  rpc::Proxy NewProxy(const std::string& service) const {
    return channel ? rpc::Proxy(channel, service) : rpc::Proxy(messenger, addr, service);
  }
  template <typename GeneratedProxy>
  GeneratedProxy New() const {
    return channel ? GeneratedProxy(channel) : GeneratedProxy(messenger, addr);
  }
  // "host:port", or the target.
  std::string name() const { return channel ? channel->target() : addr.ToString(); }
};

}  // namespace rrpc::server
