// kv-cli: a command-line client of kv-server.
//
//   kv-cli --server=127.0.0.1:7050 put KEY VALUE
//   kv-cli --server=127.0.0.1:7050 get KEY
//   kv-cli --server=127.0.0.1:7050 delete KEY
//   kv-cli --server=127.0.0.1:7050 scan [START [END [LIMIT]]]
//   kv-cli --server=etcd://127.0.0.1:2379/kv get KEY      # any cluster target (docs/cluster.md)
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kv/kv_client.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/messenger_flags.h"
#include "rrpc/rpc/rdma_flags.h"
#include "rrpc/util/command_line.h"

DEFINE_string(server, "127.0.0.1:7050",
              "host:port of the kv-server, or a cluster target: list://H:P,H:P, file:///PATH, "
              "dns:///NAME:PORT or etcd://H:P/PREFIX (each key's calls go to one server of it).");
DEFINE_int32(timeout_ms, 10000, "Deadline of the command, retries included.");

namespace {

constexpr char kSynopsis[] =
    "kv-cli [--server=HOST:PORT|TARGET] put KEY VALUE | get KEY | delete KEY | scan [START [END "
    "[LIMIT]]]";

int Usage() {
  fprintf(stderr, "Usage: %s\n", kSynopsis);
  return 2;
}

int Fail(const rrpc::Status& s) {
  fprintf(stderr, "kv-cli: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {kSynopsis,
       "A command-line client of kv-server: one command per run; prints what "
       "get and scan find.",
       {"kv/kv_cli_main.cc", "rpc/security_flags.cc", "rpc/rdma/rdma_flags.cc"}});
  google::InitGoogleLogging(argv[0]);
  if (argc < 2) return Usage();
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);

  rrpc::rpc::MessengerBuilder builder("kv-cli");
  builder.set_num_reactors(1);
  builder.mutable_options()->security = rrpc::rpc::SecurityOptionsFromFlags();
  if (rrpc::Status s = rrpc::rdma::UseRdmaFromFlags("kv-cli", builder.mutable_options()); !s.ok()) {
    return Fail(s);
  }
  auto messenger = builder.Build();
  if (!messenger.ok()) return Fail(messenger.status());
  auto connected = rrpc::kv::KvClient::Connect(*messenger, FLAGS_server);
  if (!connected.ok()) return Fail(connected.status());
  rrpc::kv::KvClient& client = **connected;
  const rrpc::MonoTime deadline =
      rrpc::MonoTime::Now() + rrpc::MonoDelta::FromMilliseconds(FLAGS_timeout_ms);

  rrpc::Status s;
  if (cmd == "put" && args.size() == 2) {
    s = client.Put(args[0], args[1], deadline);
  } else if (cmd == "get" && args.size() == 1) {
    std::string value;
    s = client.Get(args[0], &value, deadline);
    if (s.ok()) printf("%s\n", value.c_str());
  } else if (cmd == "delete" && args.size() == 1) {
    s = client.Delete(args[0], deadline);
  } else if (cmd == "scan" && args.size() <= 3) {
    std::vector<std::pair<std::string, std::string>> pairs;
    bool has_more = false;
    const uint32_t limit = args.size() > 2 ? static_cast<uint32_t>(atoi(args[2].c_str())) : 0;
    s = client.Scan(args.size() > 0 ? args[0] : "", args.size() > 1 ? args[1] : "", limit, &pairs,
                    &has_more, deadline);
    if (s.ok()) {
      for (const auto& [k, v] : pairs) printf("%s\t%s\n", k.c_str(), v.c_str());
      if (has_more) printf("... (more)\n");
    }
  } else {
    return Usage();
  }
  (*messenger)->Shutdown();
  return s.ok() ? 0 : Fail(s);
}
