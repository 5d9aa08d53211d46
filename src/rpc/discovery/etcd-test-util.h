// Test fixture: an etcd of its own for a test, on loopback (free client and peer ports, a
// temporary data directory), started from the Debian etcd-server package's binary, waited for
// until it answers, stopped (by its pid) and its directory removed at the end; it is killed
// with the test process if that dies first. Stop/Kill and
// Restart (same ports, same data) let tests take etcd away and bring it back.
// Used by the discovery tests and the cluster channel's tests. One thread drives it.
//
//   EtcdTestServer etcd;
//   ASSERT_OK(etcd.Start());
//   NewResolver("etcd://" + etcd.endpoint() + "/kv");
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <glog/logging.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "rpc/discovery/etcd_client.h"
#include "rpc/discovery/resolver_util.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class EtcdTestServer {
 public:
  EtcdTestServer() = default;
  ~EtcdTestServer() {
    Stop();
    if (!data_dir_.empty()) {
      const std::string rm = "rm -rf '" + data_dir_ + "'";
      if (system(rm.c_str()) != 0) LOG(WARNING) << "could not remove " << data_dir_;
    }
  }
  EtcdTestServer(const EtcdTestServer&) = delete;
  EtcdTestServer& operator=(const EtcdTestServer&) = delete;

  // Starts etcd and waits (up to 60 s) until it answers a range request.
  Status Start() {
    if (data_dir_.empty()) {
      char tmpl[] = "/tmp/rrpc-etcd-test.XXXXXX";
      if (mkdtemp(tmpl) == nullptr) return Status::FromErrno("mkdtemp", errno);
      data_dir_ = tmpl;
    }
    Status s;
    for (int attempt = 0; attempt < 3; ++attempt) {  // a free port may be taken meanwhile
      if (client_port_ == 0 || attempt > 0) {
        client_port_ = FreePort();
        peer_port_ = FreePort();
      }
      s = Launch();
      if (s.ok()) return s;
      Stop();
    }
    return s;
  }

  // SIGTERM, then waits for it to exit. Safe when not running.
  void Stop() { Signal(SIGTERM); }
  // SIGKILL: etcd dies without closing anything politely.
  void Kill() { Signal(SIGKILL); }
  // Starts it again on the same ports with the same data.
  Status Restart() { return Launch(); }

  // "127.0.0.1:<client port>".
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  Sockaddr address() const { return Sockaddr::Loopback(client_port_); }
  pid_t pid() const { return pid_; }
  // A client for the test to put and delete keys with.
  EtcdClient Client() const { return EtcdClient({address()}, MonoDelta::FromSeconds(10)); }

 private:
  static uint16_t FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(0, bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
    socklen_t len = sizeof(addr);
    CHECK_EQ(0, getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len));
    close(fd);
    return ntohs(addr.sin_port);
  }

  Status Launch() {
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {"etcd",
                                     "--name=default",
                                     "--data-dir=" + data_dir_ + "/data",
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=default=" + peer,
                                     "--log-level=error"};
    const std::string log = data_dir_ + "/etcd.log";
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return Status::FromErrno("fork", errno);
    if (pid_ == 0) {
      // A test that dies without running destructors (a crash, a sanitizer's abort) takes its
      // etcd with it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("etcd", argv.data());
      _exit(127);
    }
    EtcdClient etcd({address()}, MonoDelta::FromSeconds(2));
    const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(60);
    WakeFd never;
    while (MonoTime::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::RuntimeError("etcd exited at start; its log: " + log);
      }
      std::vector<EtcdClient::KeyValue> kvs;
      int64_t revision = 0;
      if (etcd.RangePrefix("/", &kvs, &revision).ok()) return Status::OK();
      never.WaitFor(MonoDelta::FromMilliseconds(50));
    }
    return Status::TimedOut("etcd did not answer within 60 s; its log: " + log);
  }

  void Signal(int signo) {
    if (pid_ <= 0) return;
    kill(pid_, signo);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string data_dir_;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace rrpc::rpc
