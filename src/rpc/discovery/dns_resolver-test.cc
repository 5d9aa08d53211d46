#include "rpc/discovery/dns_resolver.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rpc/discovery/resolver-test-util.h"
#include "rpc/discovery/resolver_util.h"
#include "rrpc/util/mutex.h"
#include "util/countdown_latch.h"

namespace rrpc::rpc {
namespace {

// A DNS server on 127.0.0.1:<free port>, UDP only, answering A, AAAA and SRV questions from
// tables the test sets; any other name is NXDOMAIN. Enough of RFC 1035 for c-ares' queries.
class TinyDnsServer {
 public:
  struct Srv {
    std::string target;
    uint16_t port;
  };

  TinyDnsServer() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(0, bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
    socklen_t len = sizeof(addr);
    CHECK_EQ(0, getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len));
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TinyDnsServer() {
    wake_.Notify();
    thread_.join();
    close(fd_);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void SetAddrs(const std::string& name, std::vector<std::string> ips, uint32_t ttl = 1) {
    MutexLock l(mu_);
    addrs_[name] = std::move(ips);
    ttl_ = ttl;
  }
  void SetSrv(const std::string& name, std::vector<Srv> srv) {
    MutexLock l(mu_);
    srv_[name] = std::move(srv);
  }
  void Remove(const std::string& name) {
    MutexLock l(mu_);
    addrs_.erase(name);
  }
  // While set, questions are read and held, not answered (a server that does not respond).
  // Clearing it answers the questions held.
  void SetSilent(bool silent) {
    std::vector<Held> held;
    {
      MutexLock l(mu_);
      silent_ = silent;
      if (!silent) held.swap(held_);
    }
    for (const Held& h : held) {
      const std::string reply = Answer(h.question);
      if (reply.empty()) continue;
      sendto(fd_, reply.data(), reply.size(), 0, reinterpret_cast<const sockaddr*>(&h.from),
             sizeof(h.from));
    }
  }
  // Questions read so far, answered or not.
  int questions() const { return questions_.load(); }

 private:
  static void Put16(std::string* out, uint16_t v) {
    out->push_back(static_cast<char>(v >> 8));
    out->push_back(static_cast<char>(v & 0xff));
  }
  static void Put32(std::string* out, uint32_t v) {
    Put16(out, v >> 16);
    Put16(out, v & 0xffff);
  }
  static void PutName(std::string* out, const std::string& name) {
    size_t pos = 0;
    while (pos < name.size()) {
      size_t dot = name.find('.', pos);
      if (dot == std::string::npos) dot = name.size();
      out->push_back(static_cast<char>(dot - pos));
      out->append(name, pos, dot - pos);
      pos = dot + 1;
    }
    out->push_back('\0');
  }

  void Serve() {
    for (;;) {
      pollfd fds[2] = {{wake_.fd(), POLLIN, 0}, {fd_, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[0].revents != 0) return;
      char buf[512];
      sockaddr_in from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n =
          recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 12) continue;
      questions_++;
      {
        MutexLock l(mu_);
        if (silent_) {
          held_.push_back({std::string(buf, n), from});
          continue;
        }
      }
      std::string reply = Answer(std::string(buf, n));
      if (reply.empty()) continue;
      sendto(fd_, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), from_len);
    }
  }

  // The reply to one query, or "" to stay silent.
  std::string Answer(const std::string& q) {
    std::string name;
    size_t pos = 12;
    while (pos < q.size() && q[pos] != 0) {
      const size_t len = static_cast<unsigned char>(q[pos]);
      if (!name.empty()) name += '.';
      name.append(q, pos + 1, len);
      pos += len + 1;
    }
    pos += 1;
    if (pos + 4 > q.size()) return "";
    const uint16_t qtype =
        (static_cast<unsigned char>(q[pos]) << 8) | static_cast<unsigned char>(q[pos + 1]);
    const std::string question = q.substr(12, pos + 4 - 12);
    std::vector<std::string> rdatas;
    bool known = false;
    uint32_t ttl = 1;
    {
      MutexLock l(mu_);
      if (silent_) return "";
      ttl = ttl_;
      auto a = addrs_.find(name);
      auto s = srv_.find(name);
      known = a != addrs_.end() || s != srv_.end();
      if (a != addrs_.end()) {
        for (const std::string& ip : a->second) {
          const bool v6 = ip.find(':') != std::string::npos;
          if ((qtype == 1 && !v6) || (qtype == 28 && v6)) {
            char raw[16];
            CHECK_EQ(1, inet_pton(v6 ? AF_INET6 : AF_INET, ip.c_str(), raw));
            rdatas.emplace_back(raw, v6 ? 16 : 4);
          }
        }
      }
      if (s != srv_.end() && qtype == 33) {
        for (const Srv& srv : s->second) {
          std::string rdata;
          Put16(&rdata, 0);  // priority
          Put16(&rdata, 0);  // weight
          Put16(&rdata, srv.port);
          PutName(&rdata, srv.target);
          rdatas.push_back(rdata);
        }
      }
    }
    std::string r = q.substr(0, 2);      // id
    Put16(&r, known ? 0x8180 : 0x8183);  // response, RD, RA; NOERROR or NXDOMAIN
    Put16(&r, 1);
    Put16(&r, rdatas.size());
    Put16(&r, 0);
    Put16(&r, 0);
    r += question;
    for (const std::string& rdata : rdatas) {
      Put16(&r, 0xc00c);  // the question's name
      Put16(&r, qtype);
      Put16(&r, 1);  // IN
      Put32(&r, ttl);
      Put16(&r, rdata.size());
      r += rdata;
    }
    return r;
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  WakeFd wake_;
  std::thread thread_;
  Mutex mu_;
  std::map<std::string, std::vector<std::string>> addrs_ RRPC_GUARDED_BY(mu_);
  std::map<std::string, std::vector<Srv>> srv_ RRPC_GUARDED_BY(mu_);
  uint32_t ttl_ RRPC_GUARDED_BY(mu_) = 1;
  bool silent_ RRPC_GUARDED_BY(mu_) = false;
  struct Held {
    std::string question;
    sockaddr_in from;
  };
  std::vector<Held> held_ RRPC_GUARDED_BY(mu_);
  std::atomic<int> questions_{0};
};

class DnsResolverTest : public ::testing::Test {
 protected:
  void Start(const std::string& target) {
    auto r = NewResolver(target);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    resolver_ = std::move(*r);
    ASSERT_TRUE(resolver_->Start(recorder_.Listener()).ok());
  }
  void TearDown() override {
    if (resolver_) resolver_->Stop();
  }

  TinyDnsServer dns_;
  UpdateRecorder recorder_;
  std::unique_ptr<Resolver> resolver_;
};

TEST_F(DnsResolverTest, ResolvesAAndAaaaRecordsWithThePort) {
  dns_.SetAddrs("db.rrpc.test", {"127.0.0.1", "127.0.0.2", "::1"});
  Start("dns://" + dns_.address() + "/db.rrpc.test:7001");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.2:7001", "[::1]:7001"}));
}

TEST_F(DnsResolverTest, ResolvesAgainAfterTheTtlAndSeesChanges) {
  dns_.SetAddrs("db.rrpc.test", {"127.0.0.1"}, /*ttl=*/1);
  Start("dns://" + dns_.address() + "/db.rrpc.test:7001");
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  dns_.SetAddrs("db.rrpc.test", {"127.0.0.1", "127.0.0.3"}, 1);
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.3:7001"}));
}

TEST_F(DnsResolverTest, UnknownNameOrSilentServerReportsAnErrorThenRecovers) {
  dns_.SetAddrs("db.rrpc.test", {"127.0.0.1"}, 1);
  Start("dns://" + dns_.address() + "/db.rrpc.test:7001");
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  dns_.Remove("db.rrpc.test");
  EXPECT_TRUE(recorder_.WaitFor(
      [](const Result<std::vector<Sockaddr>>& u) { return !u.ok() && u.status().IsNotFound(); }));
  dns_.SetAddrs("db.rrpc.test", {"127.0.0.2"}, 1);
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.2:7001"}));
  dns_.SetSilent(true);
  EXPECT_TRUE(recorder_.WaitFor(
      [](const Result<std::vector<Sockaddr>>& u) { return !u.ok() && u.status().IsTimedOut(); }));
  dns_.SetSilent(false);
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.2:7001"}));
}

TEST_F(DnsResolverTest, SrvRecordsGiveEachTargetsAddressesWithItsPort) {
  dns_.SetAddrs("a.rrpc.test", {"127.0.0.1"});
  dns_.SetAddrs("b.rrpc.test", {"127.0.0.2"});
  dns_.SetSrv("_kv._tcp.rrpc.test", {{"a.rrpc.test", 7001}, {"b.rrpc.test", 7002}});
  Start("dns+srv://" + dns_.address() + "/_kv._tcp.rrpc.test");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.2:7002"}));
}

TEST_F(DnsResolverTest, StopReturnsWhileAQueryIsUnanswered) {
  dns_.SetSilent(true);
  // A query timeout far beyond the bound below: a Stop() that waited for c-ares' timeouts and
  // retries to run out could not return within it, however slow the machine.
  DnsResolverOptions options;
  options.query_timeout = MonoDelta::FromSeconds(600);
  const std::string target = "dns://" + dns_.address() + "/db.rrpc.test:7001";
  auto r = NewDnsResolver(target, target.substr(6), /*srv=*/false, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  resolver_ = std::move(*r);
  ASSERT_TRUE(resolver_->Start(recorder_.Listener()).ok());
  // The query is out and unanswered when Stop() is called.
  const MonoTime give_up = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (dns_.questions() == 0 && MonoTime::Now() < give_up)
    SleepFor(MonoDelta::FromMilliseconds(1));
  ASSERT_GT(dns_.questions(), 0);
  CountDownLatch stopped(1);
  std::thread stopper([&] {
    resolver_->Stop();
    stopped.CountDown();
  });
  const bool returned = stopped.WaitFor(MonoDelta::FromSeconds(30));
  if (!returned) dns_.SetSilent(false);  // answers the query, so a stuck Stop() ends to report
  stopper.join();
  EXPECT_TRUE(returned) << "Stop() waited for an unanswered query";
  EXPECT_EQ(0u, recorder_.pending()) << "an update after an unanswered query and Stop()";
  resolver_.reset();
}

TEST(DnsResolverTargetTest, MalformedTargetsAreRefusedWithTheReason) {
  for (const char* bad :
       {"dns://", "dns://name:7001", "dns:///name", "dns:///name:x", "dns:///:7001",
        "dns://bad-server/name:7001", "dns+srv:///", "dns+srv:///_kv._tcp.name:7001"}) {
    auto r = NewResolver(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace rrpc::rpc
