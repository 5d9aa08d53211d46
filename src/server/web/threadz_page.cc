// /threadz: rrpc's threads (category, name, tid; util/thread.h) and then every other thread of
// the process, with their state and CPU time from /proc/self/task/<tid>/stat. Runs on the web
// server's threads.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/web/web_page_areas.h"
#include "server/web/web_page_format.h"
#include "util/thread.h"

namespace rrpc::web_page {

namespace {

struct ThreadRow {
  std::string category;  // "" for a thread rrpc did not start
  std::string name;
  pid_t tid = 0;
  char state = '?';
  double user_cpu_s = -1;  // -1: unknown (the thread exited meanwhile)
  double system_cpu_s = -1;
};

// Reads /proc/self/task/<tid>/stat: the OS name, state and CPU times. False if it is gone.
bool ReadTaskStat(pid_t tid, std::string* comm, char* state, double* user_s, double* system_s) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  FILE* f = fopen(path.c_str(), "re");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "tid (comm) S ppid ...": comm may hold spaces and parentheses, so parse around the last ')'.
  const std::string_view line(buf, n);
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return false;
  }
  *comm = std::string(line.substr(open + 1, close - open - 1));
  // After ") ": field 3 (state) onwards; utime and stime are fields 14 and 15.
  std::vector<std::string_view> fields;
  size_t pos = close + 1;
  while (pos < line.size() && fields.size() < 13) {
    while (pos < line.size() && line[pos] == ' ') pos++;
    const size_t end = std::min(line.find(' ', pos), line.size());
    if (end > pos) fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  if (fields.size() < 13) return false;
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  *state = fields[0].empty() ? '?' : fields[0][0];
  *user_s =
      static_cast<double>(std::strtoull(std::string(fields[11]).c_str(), nullptr, 10)) / ticks;
  *system_s =
      static_cast<double>(std::strtoull(std::string(fields[12]).c_str(), nullptr, 10)) / ticks;
  return true;
}

std::vector<pid_t> ListTaskIds() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

// rrpc's threads first (as the registry sorts them), then the process's other threads by tid.
std::vector<ThreadRow> CollectThreads() {
  std::vector<ThreadRow> rows;
  std::set<pid_t> listed;
  for (const ThreadInfo& t : ThreadRegistry::Get()->List()) {
    ThreadRow row;
    row.category = t.category;
    row.name = t.name;
    row.tid = t.tid;
    std::string comm;
    ReadTaskStat(t.tid, &comm, &row.state, &row.user_cpu_s, &row.system_cpu_s);
    listed.insert(t.tid);
    rows.push_back(std::move(row));
  }
  for (pid_t tid : ListTaskIds()) {
    if (listed.count(tid) > 0) continue;
    ThreadRow row;
    row.tid = tid;
    if (!ReadTaskStat(tid, &row.name, &row.state, &row.user_cpu_s, &row.system_cpu_s)) continue;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string ThreadzJson() {
  const std::vector<ThreadRow> rows = CollectThreads();
  std::string out;
  JsonObject root(&out);
  root.Int("pid", getpid());
  AppendJsonArray(
      rows,
      [](const ThreadRow& t, JsonObject* o) {
        o->Str("category", t.category)
            .Str("name", t.name)
            .Int("tid", t.tid)
            .Bool("registered", !t.category.empty())
            .Str("state", std::string(1, t.state));
        if (t.user_cpu_s >= 0) {
          o->Double("user_cpu_s", t.user_cpu_s).Double("system_cpu_s", t.system_cpu_s);
        }
      },
      root.Member("threads"));
  root.Close();
  return out;
}

std::string FormatCpuSeconds(double s) { return s < 0 ? "—" : FormatDouble("%.2f s", s); }

std::string ThreadzHtml(const PageEnv& env) {
  const std::vector<ThreadRow> rows = CollectThreads();
  size_t registered = 0;
  for (const ThreadRow& t : rows) registered += t.category.empty() ? 0 : 1;
  std::string content;
  const std::vector<Column> columns = {{"Category", false}, {"Name", false},
                                       {"TID", true},       {"State", false},
                                       {"User CPU", true},  {"System CPU", true}};
  BeginTable("Threads", std::to_string(rows.size()) + " (" + std::to_string(registered) + " rrpc)",
             "state: R running, S sleeping, D disk wait", columns, &content);
  for (const ThreadRow& t : rows) {
    content += "<tr>";
    Cell(t.category.empty() ? "muted" : "", t.category.empty() ? "other" : t.category, &content);
    Cell("mono", t.name, &content);
    Cell("num", std::to_string(t.tid), &content);
    Cell("mono", std::string(1, t.state), &content);
    Cell("num", FormatCpuSeconds(t.user_cpu_s), &content);
    Cell("num", FormatCpuSeconds(t.system_cpu_s), &content);
    content += "</tr>\n";
  }
  if (rows.empty()) EmptyRow(columns.size(), "No threads.", &content);
  EndTable(&content);
  return RenderPage(env,
                    {"Threads", "/threadz",
                     "rrpc's threads, then the process's others; CPU time from /proc since each "
                     "started"},
                    content);
}

}  // namespace

void RegisterThreadzPage(Webserver* web, std::shared_ptr<const PageEnv> env) {
  RegisterHtmlOrJsonPage(
      web, "/threadz", [env] { return ThreadzHtml(*env); }, [] { return ThreadzJson(); });
}

}  // namespace rrpc::web_page
