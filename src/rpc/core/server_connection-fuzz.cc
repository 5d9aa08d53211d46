// Fuzz target: a whole server connection fed arbitrary bytes. One messenger serves an echo
// service on loopback for the whole run; each input is written to a new TCP connection, whose
// write side is then shut, and the server must close it in bounded time. Checks:
//   - the server never crashes (reactor, negotiation, call parsing, routing, workers, responses);
//   - everything it sends back is a sequence of well-formed response frames;
//   - it closes the connection within 10 s of the client's end of input (no hang, no leak of the
//     connection);
//   - every 16 inputs (and after the first), a normal client still gets its echo answered.
// A failed check prints why, with the server's last log lines (rpc/testing/fuzzed-server.h).
// Run with build-support/fuzz.sh; ctest replays fuzz-corpus/server_connection-fuzz/.
#include <google/protobuf/stubs/logging.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>

#include "rpc/testing/fuzzed-server.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/util/sockaddr.h"
#include "util/fuzz_check.h"

namespace rrpc::rpc {
namespace {

// What the process logged last (LLVMFuzzerInitialize installs it).
const fuzzing::ServerLogTail* s_tail = nullptr;

struct Server {
  std::shared_ptr<Messenger> server;
  std::shared_ptr<Messenger> client;
  Sockaddr addr;
};

Server* TheServer() {
  static Server* s = [] {
    auto* out = new Server;  // lives for the process: libFuzzer exits without teardown
    MessengerOptions options;
    options.name = "fuzz-server";
    out->server = fuzzing::StartEchoServer(options, &out->addr);
    out->client = MessengerBuilder("fuzz-client").set_num_reactors(1).Build().value();
    return out;
  }();
  return s;
}

}  // namespace
}  // namespace rrpc::rpc

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Hostile input makes the server log every bad frame: kept in memory, printed only when a check
  // fails.
  rrpc::rpc::s_tail = rrpc::rpc::fuzzing::ServerLogTail::Install("server_connection-fuzz");
  google::protobuf::SetLogHandler(nullptr);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int inputs = 0;
  rrpc::rpc::Server* s = rrpc::rpc::TheServer();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string answer = rrpc::rpc::fuzzing::ExchangeRaw(s->addr, input, rrpc::rpc::s_tail);
  rrpc::rpc::fuzzing::CheckResponseFrames(answer);
  if (inputs++ % 16 == 0) {
    rrpc::rpc::fuzzing::CheckStillServes(s->client, s->addr, rrpc::rpc::s_tail);
  }
  return 0;
}
