// The commands of rrpc-cli, the generic command-line client of rrpc servers (like grpcurl for
// gRPC). rrpc_cli_main.cc only parses flags and calls RunCli(); tests may call it in process too.
// Not thread-safe: one call of RunCli() at a time per process is the intended use.
//
//   rrpc-cli call HOST:PORT SERVICE.METHOD ['TEXT-FORMAT REQUEST']
//   rrpc-cli list HOST:PORT
//   rrpc-cli status HOST:PORT
//   rrpc-cli metrics HOST:PORT            (or --webserver=HOST:PORT for the web UI's /metrics)
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/security_options.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::server {

// Exit codes: scripts tell "the call failed" (network, timeout, the server's error) from "the
// command was wrong" (usage, unknown service or method, bad request text, bad .proto file).
constexpr int kCliExitOk = 0;
constexpr int kCliExitCallFailed = 1;
constexpr int kCliExitBadInput = 2;

struct CliOptions {
  // Per RPC (each descriptor fetch and the call itself).
  MonoDelta timeout = MonoDelta::FromSeconds(10);
  // When set, descriptors come from these .proto files (resolved against proto_paths, as
  // protoc's --proto_path) instead of the server's reflection service.
  std::vector<std::string> proto_files;
  std::vector<std::string> proto_paths;
  // HOST:PORT of the server's web UI, for `metrics`.
  std::string webserver;
  // The service `status` and `metrics` call (ServerBase's status service).
  std::string status_service = "rrpc.server.ServerStatusService";
  // TLS and authentication toward the server (the --rpc_* security flags).
  rpc::SecurityOptions security;
  // The messenger's transport: nullptr TCP; an RDMA factory with --rdma (rrpc/rpc/rdma_flags.h).
  std::shared_ptr<rpc::TransportFactory> transport_factory;
  // `call`: the trace context the call carries, as a W3C traceparent; empty: a new sampled trace.
  // Either way the call's trace id is printed on the error stream ("trace_id: ...").
  std::string traceparent;
};

// The exit code a failure maps to.
int CliExitCode(const Status& status);

// Runs the command in `args` (without the program name): the result on `out`, "error: ..." on
// `err`. Returns the process exit code.
int RunCli(const std::vector<std::string>& args, const CliOptions& options, std::ostream& out,
           std::ostream& err);

// The usage text (commands, exit codes).
std::string CliUsage();

}  // namespace rrpc::server
