// Network namespaces for tests: "hosts" a test makes itself (iproute2), joined by veth pairs, each
// side with its own address, and a link it can cut (`link set down`: packets vanish, no FIN or
// RST). A socket belongs to the namespace of the thread that made it, and a thread's namespace is
// inherited by the threads it starts: RunIn() makes a messenger (its reactor threads, its
// listeners) inside one namespace from the test's thread. Used by multihost-test and the cluster
// channel's dropped-server test. Test thread only; needs root (Unavailable() says why not).
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace rrpc::rpc {

class NetNamespaces {
 public:
  // Runs a shell command; true on exit status 0. Output goes to the test log (stderr).
  static bool Sh(const std::string& cmd) { return std::system((cmd + " >&2").c_str()) == 0; }

  // Why namespaces cannot be made here ("" when they can): no root, no `ip`.
  static std::string Unavailable() {
    if (geteuid() != 0) return "needs root to create network namespaces";
    if (std::system("command -v ip >/dev/null") != 0) return "needs iproute2's `ip`";
    return "";
  }

  // `tag` keeps this process's names apart from other test processes' (with its pid).
  explicit NetNamespaces(const std::string& tag)
      : prefix_("rrpc-" + tag + std::to_string(getpid() % 100000)) {}
  ~NetNamespaces() {
    for (const std::string& ns : made_) Sh("ip netns del " + ns + " 2>/dev/null");
  }
  NetNamespaces(const NetNamespaces&) = delete;
  NetNamespaces& operator=(const NetNamespaces&) = delete;

  // Makes namespace `prefix + suffix` (loopback up); its name, or "" when `ip netns add` fails
  // (a container without CAP_SYS_ADMIN: the caller skips, saying so).
  std::string Add(const std::string& suffix) {
    const std::string ns = prefix_ + suffix;
    if (!Sh("ip netns add " + ns)) return "";
    made_.push_back(ns);
    if (!Sh("ip -n " + ns + " link set lo up")) return "";
    return ns;
  }

  // A veth pair between `ns_a` (address `ip_a`) and `ns_b` (`ip_b`), both /24 and up; its ends
  // are named `name` + "a" and `name` + "b" (at most 14 characters in all).
  static bool Link(const std::string& name, const std::string& ns_a, const std::string& ip_a,
                   const std::string& ns_b, const std::string& ip_b) {
    const std::string a = name + "a", b = name + "b";
    return Sh("ip link add " + a + " netns " + ns_a + " type veth peer name " + b + " netns " +
              ns_b) &&
           Sh("ip -n " + ns_a + " addr add " + ip_a + "/24 dev " + a) &&
           Sh("ip -n " + ns_b + " addr add " + ip_b + "/24 dev " + b) &&
           Sh("ip -n " + ns_a + " link set " + a + " up") &&
           Sh("ip -n " + ns_b + " link set " + b + " up");
  }

  // Sets interface `dev` of `ns` up or down.
  static bool SetLink(const std::string& ns, const std::string& dev, bool up) {
    return Sh("ip -n " + ns + " link set " + dev + (up ? " up" : " down"));
  }

  // Runs `fn` on this thread inside `ns`, then comes back: sockets and threads `fn` makes stay
  // in `ns`. False when the namespace could not be entered or left.
  static bool RunIn(const std::string& ns, const std::function<void()>& fn) {
    const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int there = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    bool ok = home >= 0 && there >= 0 && setns(there, CLONE_NEWNET) == 0;
    if (ok) {
      fn();
      ok = setns(home, CLONE_NEWNET) == 0;
    }
    if (home >= 0) close(home);
    if (there >= 0) close(there);
    return ok;
  }

 private:
  const std::string prefix_;
  std::vector<std::string> made_;
};

}  // namespace rrpc::rpc
