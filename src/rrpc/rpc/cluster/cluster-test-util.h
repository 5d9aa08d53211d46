// What the cluster tests share: a resolver the test controls, and a few echo servers on
// 127.0.0.1, .2 and .3. gtest-free so that a benchmark could use it too.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rrpc/rpc/discovery/resolver.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/testing/test-echo-service.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

// Reports the sets the test gives it, on the test's thread.
class TestResolver final : public Resolver {
 public:
  explicit TestResolver(std::vector<Sockaddr> initial) : initial_(std::move(initial)) {}
  Status Start(ResolverListener listener) override {
    MutexLock l(mu_);
    listener_ = std::move(listener);
    listener_(initial_);
    return Status::OK();
  }
  void Stop() override {
    MutexLock l(mu_);
    listener_ = nullptr;
  }
  const std::string& target() const override { return target_; }
  void Update(const Result<std::vector<Sockaddr>>& update) {
    MutexLock l(mu_);
    if (listener_) listener_(update);
  }

 private:
  const std::vector<Sockaddr> initial_;
  const std::string target_ = "test://";
  Mutex mu_;
  ResolverListener listener_ RRPC_GUARDED_BY(mu_);
};

// An echo server on 127.0.0.<host>.
struct TestServer {
  std::shared_ptr<Messenger> messenger;
  TestEchoService* service = nullptr;
  Sockaddr addr;

  static Result<TestServer> Start(int host, MessengerOptions options = {}) {
    options.name = "server" + std::to_string(host);
    RRPC_ASSIGN_OR_RETURN(auto messenger, MessengerBuilder(options).Build());
    TestServer server;
    server.messenger = std::move(messenger);
    auto service = std::make_unique<TestEchoService>();
    server.service = service.get();
    RRPC_RETURN_NOT_OK(server.messenger->RegisterService(std::move(service)));
    RRPC_ASSIGN_OR_RETURN(Sockaddr want, Sockaddr::Parse("127.0.0." + std::to_string(host) + ":0"));
    RRPC_RETURN_NOT_OK(server.messenger->Listen(want, &server.addr));
    return server;
  }
};

}  // namespace rrpc::rpc
