// Fuzz target: a whole server connection fed arbitrary bytes. One messenger serves an echo
// service on loopback for the whole run; each input is written to a new TCP connection, whose
// write side is then shut, and the server must close it in bounded time. Checks:
//   - the server never crashes (reactor, negotiation, call parsing, routing, workers, responses);
//   - everything it sends back is a sequence of well-formed response frames;
//   - it closes the connection within 10 s of the client's end of input (no hang, no leak of the
//     connection);
//   - every 16 inputs (and after the first), a normal client still gets its echo answered.
// Run with build-support/fuzz.sh; ctest replays fuzz-corpus/server_connection-fuzz/.
#include <glog/logging.h>
#include <google/protobuf/stubs/logging.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "rpc/core/wire_codec.h"
#include "rpc/messenger.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_controller.h"
#include "rpc/rpc_header.pb.h"
#include "rpc/testing/rtest.rrpc.h"
#include "rpc/transport/frame_format.h"
#include "util/fuzz_check.h"
#include "util/monotime.h"
#include "util/sockaddr.h"

namespace rrpc::rpc {
namespace {

// Echoes data and sidecars; unlike the tests' service it never sleeps (a fuzzed sleep_ms would
// park the workers for hours) and fails on request.
class FuzzEchoService final : public rtest::EchoServiceIf {
 public:
  void Echo(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    if (req->has_fail_with()) {
      context->RespondFailure(Status::IllegalState(req->fail_with()));
      return;
    }
    resp->set_data(req->data());
    for (size_t i = 0; i < context->num_inbound_sidecars(); i++) {
      Slice s = context->inbound_sidecar(i);
      BlockRef block = Block::Allocate(s.size());
      memcpy(block->data(), s.data(), s.size());
      context->AddOutboundSidecar(BlockSlice{block, Slice(block->data(), s.size())});
    }
    context->RespondSuccess();
  }
  void Add(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    resp->set_sum(req->a() + req->b());
    context->RespondSuccess();
  }
};

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
    options.num_reactors = 1;
    options.num_workers = 2;
    options.max_message_size = 1 << 20;
    out->server = MessengerBuilder(options).Build().value();
    FUZZ_CHECK(out->server->RegisterService(std::make_unique<FuzzEchoService>()).ok());
    FUZZ_CHECK(out->server->Listen(Sockaddr::Loopback(0), &out->addr).ok());
    out->client = MessengerBuilder("fuzz-client").set_num_reactors(1).Build().value();
    return out;
  }();
  return s;
}

// Writes `data` to a new connection, shuts the write side and reads until the server closes.
// Returns what the server sent.
std::string Exchange(const Sockaddr& addr, const uint8_t* data, size_t size) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  FUZZ_CHECK(fd >= 0);
  int rc = ::connect(fd, addr.addr(), addr.addrlen());
  FUZZ_CHECK(rc == 0 || errno == EINPROGRESS);
  std::string received;
  size_t written = 0;
  bool write_shut = false;
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);
  while (true) {
    if (written == size && !write_shut) {
      ::shutdown(fd, SHUT_WR);
      write_shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (write_shut ? 0 : POLLOUT)), 0};
    const int64_t left_ms = (deadline - MonoTime::Now()).ToMilliseconds();
    if (left_ms <= 0) {
      fprintf(stderr, "server did not close the connection within 10 s\n");
      abort();
    }
    if (::poll(&p, 1, static_cast<int>(left_ms)) < 0 && errno != EINTR) abort();
    if (p.revents & POLLOUT) {
      const ssize_t n = ::send(fd, data + written, size - written, MSG_NOSIGNAL);
      if (n > 0) written += n;
      if (n < 0 && errno != EAGAIN) written = size;  // the server closed early: fine
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // closed
      if (n > 0) received.append(buf, n);
    }
  }
  ::close(fd);
  return received;
}

// The server only ever sends whole, well-formed response frames (the last one may be cut short
// by the close).
void CheckResponses(const std::string& bytes) {
  size_t pos = 0;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  while (bytes.size() - pos >= kFrameLengthSize) {
    const uint32_t length = DecodeBigEndian32(p + pos);
    FUZZ_CHECK(length > 0);
    if (bytes.size() - pos - kFrameLengthSize < length) break;
    ResponseHeader header;
    Slice body, tail;
    FUZZ_CHECK(ParseFrame(Slice(p + pos + kFrameLengthSize, length), &header, &body, &tail).ok());
    pos += kFrameLengthSize + length;
  }
}

void CheckStillServes(Server* s) {
  rtest::EchoServiceProxy proxy(s->client, s->addr);
  rtest::EchoRequestPB req;
  req.set_data("still there?");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status st = proxy.Echo(req, &resp, &ctl);
  if (!st.ok()) {
    fprintf(stderr, "server stopped serving: %s\n", st.ToString().c_str());
    abort();
  }
  FUZZ_CHECK(resp.data() == "still there?");
}

}  // namespace
}  // namespace rrpc::rpc

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Hostile input makes the server log every bad frame; a fuzz run wants none of it.
  FLAGS_minloglevel = 3;
  google::InitGoogleLogging("server_connection-fuzz");
  google::protobuf::SetLogHandler(nullptr);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int inputs = 0;
  rrpc::rpc::Server* s = rrpc::rpc::TheServer();
  rrpc::rpc::CheckResponses(rrpc::rpc::Exchange(s->addr, data, size));
  if (inputs++ % 16 == 0) rrpc::rpc::CheckStillServes(s);
  return 0;
}
