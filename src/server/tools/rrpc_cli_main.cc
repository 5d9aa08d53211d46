// rrpc-cli: the generic command-line client of rrpc servers (see server/tools/cli_commands.h, or
// run `rrpc-cli --help`). Flags are parsed here and nowhere else.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "rrpc/rpc/messenger_flags.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/rdma_flags.h"
#include "rrpc/util/command_line.h"
#include "server/tools/cli_commands.h"

DEFINE_int32(timeout_ms, 10000,
             "Milliseconds each RPC (a descriptor fetch, the call) may take before the CLI gives "
             "up; a loaded server may need more.");
DEFINE_string(proto, "",
              "Comma-separated .proto files to take descriptors from instead of the server's "
              "reflection service (for servers that do not register it).");
DEFINE_string(proto_path, "",
              "Colon-separated directories the --proto files and their imports are found in, as "
              "protoc's --proto_path (default: the current directory).");
DEFINE_string(webserver, "",
              "HOST:PORT of the server's web UI: `metrics` then reads its /metrics page.");
DEFINE_string(traceparent, "",
              "W3C traceparent the `call` carries (00-TRACEID-SPANID-FLAGS), e.g. from a gateway; "
              "empty: a new sampled trace. The trace id is printed on stderr either way.");
DEFINE_string(status_service, "rrpc.server.ServerStatusService",
              "The service `status` (GetStatus) and `metrics` (GetMetrics) call.");

namespace {

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

}  // namespace

int main(int argc, char* argv[]) {
  // Only warnings and errors, on stderr: stdout carries the response alone.
  gflags::SetCommandLineOptionWithMode("logtostderr", "true", gflags::SET_FLAGS_DEFAULT);
  gflags::SetCommandLineOptionWithMode("minloglevel", "1", gflags::SET_FLAGS_DEFAULT);
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"rrpc-cli [flags] call|list|status|metrics HOST:PORT ...",
       rrpc::server::CliUsage(),
       {"server/tools/rrpc_cli_main.cc", "rpc/security_flags.cc", "rpc/rdma/rdma_flags.cc"}});
  google::InitGoogleLogging(argv[0]);

  rrpc::server::CliOptions options;
  if (FLAGS_timeout_ms <= 0) {
    std::cerr << "error: --timeout_ms must be positive\n";
    return rrpc::server::kCliExitBadInput;
  }
  options.timeout = rrpc::MonoDelta::FromMilliseconds(FLAGS_timeout_ms);
  options.proto_files = Split(FLAGS_proto, ',');
  options.proto_paths = Split(FLAGS_proto_path, ':');
  options.webserver = FLAGS_webserver;
  options.status_service = FLAGS_status_service;
  options.traceparent = FLAGS_traceparent;
  options.security = rrpc::rpc::SecurityOptionsFromFlags();
  rrpc::rpc::MessengerOptions rdma;  // only its transport factory is used
  if (rrpc::Status s = rrpc::rdma::UseRdmaFromFlags("rrpc-cli", &rdma); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return rrpc::server::kCliExitBadInput;
  }
  options.transport_factory = rdma.transport_factory;
  std::vector<std::string> args(argv + 1, argv + argc);
  return rrpc::server::RunCli(args, options, std::cout, std::cerr);
}
