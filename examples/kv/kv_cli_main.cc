// kv-cli: a command-line client of kv-server.
//
//   kv-cli --server=127.0.0.1:7050 put KEY VALUE
//   kv-cli --server=127.0.0.1:7050 get KEY
//   kv-cli --server=127.0.0.1:7050 delete KEY
//   kv-cli --server=127.0.0.1:7050 scan [START [END [LIMIT]]]   # prints rows as they arrive
//   kv-cli --server=127.0.0.1:7050 load FILE                    # KEY<TAB>VALUE lines; - : stdin
//   kv-cli --server=127.0.0.1:7050 copy TARGET [START [END]]    # server-to-server, as streams
//   kv-cli --server=etcd://127.0.0.1:2379/kv get KEY      # any cluster target (docs/cluster.md)
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
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
    "[LIMIT]]] | load FILE | copy TARGET [START [END]]";

int Usage() {
  fprintf(stderr, "Usage: %s\n", kSynopsis);
  return 2;
}

int Fail(const rrpc::Status& s) {
  fprintf(stderr, "kv-cli: %s\n", s.ToString().c_str());
  return 1;
}

// Streams the KEY<TAB>VALUE lines of `path` ("-": stdin) into the server's Load.
rrpc::Status LoadFile(rrpc::kv::KvClient* client, const std::string& path,
                      rrpc::MonoTime deadline) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) return rrpc::Status::NotFound("cannot open " + path);
    in = &file;
  }
  int64_t line_no = 0;
  rrpc::Status bad;
  std::string line;
  auto next = [&](std::string* key, std::string* value) {
    if (!std::getline(*in, line)) return false;
    line_no++;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) {
      bad = rrpc::Status::InvalidArgument(path + ":" + std::to_string(line_no) +
                                          ": no tab between key and value");
      return false;
    }
    key->assign(line, 0, tab);
    value->assign(line, tab + 1, std::string::npos);
    return true;
  };
  rrpc::kv::LoadResponsePB loaded;
  rrpc::Status s = client->Load(next, &loaded, deadline);
  if (!s.ok()) return s;
  if (!bad.ok()) {
    return bad.CloneAndPrepend("stopped after " + std::to_string(loaded.pairs()) + " pairs loaded");
  }
  printf("loaded %llu pairs, %llu bytes\n", static_cast<unsigned long long>(loaded.pairs()),
         static_cast<unsigned long long>(loaded.bytes()));
  return s;
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
    const uint64_t limit = args.size() > 2 ? strtoull(args[2].c_str(), nullptr, 10) : 0;
    s = client.ScanStream(
        args.size() > 0 ? args[0] : "", args.size() > 1 ? args[1] : "", limit,
        [](std::string_view k, std::string_view v) {
          printf("%.*s\t%.*s\n", static_cast<int>(k.size()), k.data(), static_cast<int>(v.size()),
                 v.data());
          return true;
        },
        deadline);
  } else if (cmd == "load" && args.size() == 1) {
    s = LoadFile(&client, args[0], deadline);
  } else if (cmd == "copy" && args.size() >= 1 && args.size() <= 3) {
    rrpc::kv::CopyRangeResponsePB copied;
    s = client.CopyRange(args.size() > 1 ? args[1] : "", args.size() > 2 ? args[2] : "", args[0],
                         &copied, deadline);
    if (s.ok()) {
      printf("copied %llu pairs, %llu bytes\n", static_cast<unsigned long long>(copied.pairs()),
             static_cast<unsigned long long>(copied.bytes()));
    }
  } else {
    return Usage();
  }
  (*messenger)->Shutdown();
  return s.ok() ? 0 : Fail(s);
}
