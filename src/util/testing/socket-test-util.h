// Test support: a TCP connection on loopback made of two Sockets, for tests of what runs on a
// real socket (util/socket, the transports).
#pragma once

#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "util/socket.h"

namespace rrpc {

// `*client`: connected to `*server`, in blocking mode. `*server`: the accepted end, as accept()
// returns it. The listener is closed when this returns.
inline Status ConnectLoopbackPair(Socket* client, Socket* server) {
  RRPC_ASSIGN_OR_RETURN(Socket listener, Socket::CreateTcp(AF_INET));
  RRPC_RETURN_NOT_OK(listener.Bind(Sockaddr::Loopback(0)));
  RRPC_RETURN_NOT_OK(listener.Listen(4));
  RRPC_ASSIGN_OR_RETURN(Sockaddr addr, listener.GetSocketAddress());
  RRPC_ASSIGN_OR_RETURN(*client, Socket::CreateTcp(AF_INET));
  RRPC_RETURN_NOT_OK(client->SetNonBlocking(false));
  RRPC_RETURN_NOT_OK(client->ConnectNonBlocking(addr));
  Sockaddr peer;
  return listener.Accept(server, &peer);
}

}  // namespace rrpc
