// KvServerProcess: one kv-server child process on 127.0.0.1, for the cluster tests
// (kv_cluster-test.cc) and kv-cluster-bench: started with a port of its own choosing (read back
// from its port file), signalled, and killed and reaped by the destructor if still running.
// Its output goes to <dir>/log. One thread uses an instance.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::kv {

class KvServerProcess {
 public:
  // `binary`: the kv-server to run; `dir`: its data (<dir>/db), port file and log.
  KvServerProcess(std::string binary, std::string dir, std::vector<std::string> extra_flags);
  ~KvServerProcess();
  KvServerProcess(const KvServerProcess&) = delete;
  KvServerProcess& operator=(const KvServerProcess&) = delete;

  // Starts it and waits (up to `timeout`) until it listens: an error naming its log when it
  // exits or does not write its port in time.
  Status Start(MonoDelta timeout = MonoDelta::FromSeconds(60));
  // Sends `signo` and waits for the exit: the exit code, or 128 + the signal that ended it; -1
  // when it is not running.
  int Signal(int signo);
  // SIGTERM (it withdraws and drains), then SIGKILL if it has not exited within `grace`: the
  // exit code as Signal's.
  int Stop(MonoDelta grace);

  const Sockaddr& addr() const { return addr_; }
  pid_t pid() const { return pid_; }

 private:
  const std::string binary_;
  const std::string dir_;
  const std::vector<std::string> extra_flags_;
  pid_t pid_ = -1;
  Sockaddr addr_;
};

}  // namespace rrpc::kv
