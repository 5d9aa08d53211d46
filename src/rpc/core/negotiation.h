// The negotiation messages of a connection: what the client offers and what the server accepts
// (docs/wire-format.md). Pure functions; the state machine that sends and awaits them lives in
// Connection, on the reactor.
#pragma once

#include "rpc/rpc_header.pb.h"
#include "util/block.h"
#include "util/status.h"

namespace rrpc::rpc {

// The client's first bytes: preamble then a framed NegotiatePB request.
BlockSlice BuildClientHello(const std::string& client_name);
// Checks the 6 preamble bytes; InvalidArgument naming what is wrong.
Status CheckPreamble(const uint8_t* preamble);
// The server's framed answer to the client's NegotiatePB; an ErrorStatusPB when `error` is set.
BlockSlice BuildServerReply(const NegotiatePB& request, const Status& error,
                            ErrorStatusPB::RpcErrorCodePB code);
// Server: parses the client's negotiation frame.
Status ParseClientNegotiation(Slice frame, NegotiatePB* request);
// Client: parses the server's reply; the server's error as a status.
Status ParseServerReply(Slice frame, NegotiatePB* reply);

}  // namespace rrpc::rpc
