#include "kv/kv_server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <utility>

extern char** environ;

namespace rrpc::kv {

KvServerProcess::KvServerProcess(std::string binary, std::string dir,
                                 std::vector<std::string> extra_flags)
    : binary_(std::move(binary)), dir_(std::move(dir)), extra_flags_(std::move(extra_flags)) {}

KvServerProcess::~KvServerProcess() { Signal(SIGKILL); }

Status KvServerProcess::Start(MonoDelta timeout) {
  const std::string port_file = dir_ + "/port";
  std::filesystem::remove(port_file);
  std::vector<std::string> args = {binary_,
                                   "--rpc_bind=127.0.0.1:0",
                                   "--webserver_bind=",
                                   "--data_dir=" + dir_ + "/db",
                                   "--port_file=" + port_file,
                                   "--shutdown_timeout_ms=30000"};
  args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = dir_ + "/log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    return Status::FromErrno("posix_spawn " + binary_, rc);
  }
  const MonoTime deadline = MonoTime::Now() + timeout;
  uint16_t port = 0;
  while (port == 0) {
    std::ifstream in(port_file);
    unsigned p = 0;
    if (in >> p) {
      port = static_cast<uint16_t>(p);
      break;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::RuntimeError("kv-server exited at start; its log: " + log);
    }
    if (MonoTime::Now() > deadline) {
      return Status::TimedOut("kv-server did not write its port; its log: " + log);
    }
    SleepFor(MonoDelta::FromMilliseconds(2));
  }
  addr_ = Sockaddr::Loopback(port);
  return Status::OK();
}

int KvServerProcess::Signal(int signo) {
  if (pid_ <= 0) return -1;
  kill(pid_, signo);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int KvServerProcess::Stop(MonoDelta grace) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const MonoTime deadline = MonoTime::Now() + grace;
  int status = 0;
  while (MonoTime::Now() < deadline) {
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (done < 0 && errno != EINTR) break;
    SleepFor(MonoDelta::FromMilliseconds(10));
  }
  return Signal(SIGKILL);
}

}  // namespace rrpc::kv
