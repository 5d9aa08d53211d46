#include "bench/bench_usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "util/thread.h"

namespace rrpc::bench {

namespace {

// The whole of a small /proc file; empty when it cannot be read (e.g. the thread just exited).
std::string ReadSmallFile(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// The number after "<key>:" in a /proc status file; false when the key is missing.
bool FindStatusValue(const std::string& text, const char* key, uint64_t* value) {
  // The keys we read never start the file (its first line is "Name:").
  const std::string needle = std::string("\n") + key + ":";
  size_t pos = text.find(needle);
  if (pos == std::string::npos) return false;
  pos += needle.size();
  *value = strtoull(text.c_str() + pos, nullptr, 10);
  return true;
}

// utime and stime (fields 14 and 15) of a /proc/<pid>/task/<tid>/stat line. The command name in
// field 2 may hold spaces and parentheses, so count fields from the last ')'.
bool ParseStatTimes(const std::string& stat, uint64_t* utime, uint64_t* stime) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  const char* p = stat.c_str() + close + 1;
  // Field 3 is the first after ')'; utime is field 14.
  for (int field = 3; field < 14; field++) {
    while (*p == ' ') p++;
    while (*p != ' ' && *p != '\0') p++;
    if (*p == '\0') return false;
  }
  char* end = nullptr;
  *utime = strtoull(p, &end, 10);
  *stime = strtoull(end, nullptr, 10);
  return true;
}

double TimevalSeconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

void AddThreadCost(const ThreadSample& end, const ThreadSample* start, double tick_s,
                   CostTotals* totals) {
  const ThreadSample zero;
  const ThreadSample& s = start != nullptr ? *start : zero;
  totals->user_s += static_cast<double>(end.utime_ticks - s.utime_ticks) * tick_s;
  totals->sys_s += static_cast<double>(end.stime_ticks - s.stime_ticks) * tick_s;
  totals->voluntary_cs += end.voluntary_cs - s.voluntary_cs;
  totals->involuntary_cs += end.involuntary_cs - s.involuntary_cs;
}

}  // namespace

ThreadRole RoleOfThreadName(const std::string& name) {
  if (name.compare(0, 6, "server") == 0) return ThreadRole::kServer;
  if (name.compare(0, 6, "client") == 0) return ThreadRole::kClient;
  return ThreadRole::kOther;
}

UsageSnapshot TakeUsageSnapshot() {
  UsageSnapshot snap;
  snap.time = MonoTime::Now();
  snap.copies = ReadCopyTotals();
  getrusage(RUSAGE_SELF, &snap.process);

  std::unordered_map<pid_t, std::string> names;
  for (const ThreadInfo& info : ThreadRegistry::Get()->List()) names[info.tid] = info.name;

  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return snap;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    ThreadSample sample;
    sample.tid = static_cast<pid_t>(atoi(entry->d_name));
    const std::string base = std::string("/proc/self/task/") + entry->d_name;
    if (!ParseStatTimes(ReadSmallFile(base + "/stat"), &sample.utime_ticks, &sample.stime_ticks)) {
      continue;  // exited while we looked
    }
    const std::string status = ReadSmallFile(base + "/status");
    FindStatusValue(status, "voluntary_ctxt_switches", &sample.voluntary_cs);
    FindStatusValue(status, "nonvoluntary_ctxt_switches", &sample.involuntary_cs);
    auto it = names.find(sample.tid);
    if (it != names.end()) {
      sample.name = it->second;
    } else {
      sample.name = ReadSmallFile(base + "/comm");
      while (!sample.name.empty() && sample.name.back() == '\n') sample.name.pop_back();
    }
    sample.role = RoleOfThreadName(sample.name);
    snap.threads.push_back(std::move(sample));
  }
  closedir(dir);
  return snap;
}

UsageDelta SubtractUsage(const UsageSnapshot& start, const UsageSnapshot& end) {
  UsageDelta d;
  d.elapsed_s = (end.time - start.time).ToSeconds();
  d.process.user_s = TimevalSeconds(end.process.ru_utime) - TimevalSeconds(start.process.ru_utime);
  d.process.sys_s = TimevalSeconds(end.process.ru_stime) - TimevalSeconds(start.process.ru_stime);
  d.process.voluntary_cs = end.process.ru_nvcsw - start.process.ru_nvcsw;
  d.process.involuntary_cs = end.process.ru_nivcsw - start.process.ru_nivcsw;

  const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::unordered_map<pid_t, const ThreadSample*> before;
  for (const ThreadSample& t : start.threads) before[t.tid] = &t;
  for (const ThreadSample& t : end.threads) {
    auto it = before.find(t.tid);
    const ThreadSample* s = it == before.end() ? nullptr : it->second;
    if (it != before.end()) before.erase(it);
    CostTotals* totals = t.role == ThreadRole::kServer   ? &d.server
                         : t.role == ThreadRole::kClient ? &d.client
                                                         : &d.other;
    AddThreadCost(t, s, tick_s, totals);
  }
  d.threads_lost = static_cast<int>(before.size());
  for (const auto& [tid, sample] : before) {
    if (!d.lost_names.empty()) d.lost_names += ", ";
    d.lost_names += sample->name;
  }
  return d;
}

int64_t ReadProcessStatusKb(const char* field) {
  uint64_t kb = 0;
  if (!FindStatusValue(ReadSmallFile("/proc/self/status"), field, &kb)) return -1;
  return static_cast<int64_t>(kb);
}

Status EnsureFileLimit(uint64_t needed) {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return Status::FromErrno("getrlimit(NOFILE)", errno);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur >= needed) return Status::OK();
  if (lim.rlim_cur == RLIM_INFINITY) return Status::OK();
  rlimit want = lim;
  want.rlim_cur = needed;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < needed) want.rlim_max = needed;
  if (setrlimit(RLIMIT_NOFILE, &want) != 0) {
    const int err = errno;
    return Status::IllegalState("cannot raise the open file limit to " + std::to_string(needed) +
                                    " (soft " + std::to_string(lim.rlim_cur) + ", hard " +
                                    std::to_string(lim.rlim_max) +
                                    "): lower --connections or raise the hard limit (ulimit -Hn)",
                                strerror(err));
  }
  return Status::OK();
}

}  // namespace rrpc::bench
