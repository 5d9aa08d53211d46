// The dashboard in a real browser: headless Chromium loads "/" from a Webserver started here,
// runs the page's JavaScript against a fake /metrics.json whose values change on every poll,
// and we check in the dumped DOM that the charts drew at least two updates. A second run saves
// a screenshot (dashboard.png next to this test binary in the build tree) for people to look at.
//
// Chromium runs with --virtual-time-budget, so the page's one-second polls are not waited for in
// real time; each run is bounded (killed by its process group id when it overruns).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rrpc/util/mutex.h"
#include "server/web/web_dashboard.h"
#include "server/web/webserver.h"

namespace rrpc {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";

// A /metrics.json stand-in: every request is one more second of a small simulated server, so
// successive polls see counters grow and percentiles move.
class FakeMetrics {
 public:
  std::string Next() {
    MutexLock l(mu_);
    step_++;
    const double s = static_cast<double>(step_);
    // Slow swings plus a little deterministic jitter, like real load.
    const double jitter = std::sin(s * 12.9898) * 0.5 + std::sin(s * 4.1414) * 0.5;
    echo_calls_ += std::llround(1500 + 450 * std::sin(s / 14.0) + 60 * jitter);
    put_calls_ += std::llround(420 + 140 * std::cos(s / 19.0) + 25 * jitter);
    get_calls_ += std::llround(950 + 300 * std::sin(s / 11.0 + 1) + 45 * jitter);
    scan_calls_ += std::llround(24 + 9 * std::sin(s / 7.0) + 3 * jitter);
    std::ostringstream o;
    o << "{\"timestamp_ms\":" << (base_ms_ + step_ * 1000) << ",\"entities\":[";
    o << "{\"type\":\"server\",\"id\":\"storage-server\",\"attributes\":{\"hostname\":"
         "\"storage-node-07\",\"version\":\"0.1.0\",\"pid\":\"4242\"},\"metrics\":["
      << Gauge("uptime_seconds", "seconds", "Seconds since the server started.", 3600 + s) << ","
      << Gauge("open_connections", "connections", "Open RPC connections.", 42 + step_ % 5) << "]},";
    o << "{\"type\":\"messenger\",\"id\":\"default\",\"attributes\":{\"reactors\":\"4\"},"
         "\"metrics\":["
      << Counter("bytes_received_total", "bytes", "Bytes read from sockets.",
                 (echo_calls_ + put_calls_) * 4200)
      << ","
      << Counter("connections_accepted_total", "connections", "Inbound connections.", 120 + step_)
      << "]},";
    o << "{\"type\":\"service\",\"id\":\"kv.StoreService\",\"attributes\":{},\"metrics\":["
      << Gauge("queue_length", "calls", "Calls waiting for a worker.", step_ % 7) << ","
      << Counter("queue_rejections_total", "calls", "Calls rejected by a full queue.", step_ / 3)
      << "," << Histogram("queue_time_us", "Time calls waited in the service queue.", 12, s)
      << "]},";
    o << Method("kv.StoreService.Get", get_calls_, 85, s, true) << ",";
    o << Method("kv.StoreService.Put", put_calls_, 240, s, true) << ",";
    o << Method("kv.StoreService.Scan", scan_calls_, 4200, s, false) << ",";
    o << Method("rtest.EchoService.Echo", echo_calls_, 32, s, false) << ",";
    o << "{\"type\":\"client\",\"id\":\"10.0.3.17:7050\",\"attributes\":{\"service\":"
         "\"replication\"},\"metrics\":["
      << Counter("calls_total", "requests", "Outbound calls.", get_calls_ / 4) << ","
      << Counter("timeouts_total", "requests", "Outbound calls that timed out.", step_ / 4) << "]}";
    o << "]}";
    return o.str();
  }

 private:
  static std::string Counter(const char* name, const char* unit, const char* help, int64_t v) {
    return Metric(name, "counter", unit, help) + ",\"value\":" + std::to_string(v) + "}";
  }
  static std::string Gauge(const char* name, const char* unit, const char* help, double v) {
    std::ostringstream o;
    o << Metric(name, "gauge", unit, help) << ",\"value\":" << v << "}";
    return o.str();
  }
  // Percentiles around `base` microseconds that drift with the step.
  static std::string Histogram(const char* name, const char* help, double base, double s) {
    const double wobble = 1 + 0.2 * std::sin(s / 9.0) + 0.04 * std::sin(s * 7.3);
    const double p50 = base * wobble;
    const double p99 = base * (3.2 + 0.7 * std::cos(s / 13.0) + 0.1 * std::sin(s * 3.7));
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(1);
    o << Metric(name, "histogram", "microseconds", help)
      << ",\"count\":" << static_cast<int64_t>(1000 * s) << ",\"sum\":" << 1000 * s * p50 * 1.1
      << ",\"min\":" << base * 0.3 << ",\"max\":" << p99 * 2.5 << ",\"mean\":" << p50 * 1.1
      << ",\"p50\":" << p50 << ",\"p75\":" << p50 * 1.4 << ",\"p95\":" << p99 * 0.7
      << ",\"p99\":" << p99 << ",\"p999\":" << p99 * 1.8 << "}";
    return o.str();
  }
  static std::string Metric(const char* name, const char* type, const char* unit,
                            const char* help) {
    return std::string("{\"name\":\"") + name + "\",\"type\":\"" + type + "\",\"unit\":\"" + unit +
           "\",\"help\":\"" + help + "\"";
  }
  static std::string Method(const char* id, int64_t calls, double base_us, double s,
                            bool with_total) {
    std::string o =
        std::string("{\"type\":\"method\",\"id\":\"") + id + "\",\"attributes\":{},\"metrics\":[" +
        Counter("calls_total", "requests", "Calls handled.", calls) + "," +
        Counter("errors_total", "requests", "Calls answered with an error.", calls / 500) + "," +
        Histogram("handler_time_us", "Time in the handler.", base_us, s);
    if (with_total) {
      o += "," + Histogram("total_time_us", "Arrival to response queued.", base_us * 1.3, s);
    }
    return o + "]}";
  }

  Mutex mu_;
  const int64_t base_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  int64_t step_ = 0;
  int64_t echo_calls_ = 0, put_calls_ = 0, get_calls_ = 0, scan_calls_ = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string BuildDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string exe(buf, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/'));
}

// Runs chromium headless with `args`, stdout to `out_path`, stderr to `err_path`. Returns true
// if it exited 0 within `timeout`; otherwise kills its whole process group (it was made the
// group leader, so only the processes this test started are hit).
bool RunChromium(const std::vector<std::string>& args, const std::string& out_path,
                 const std::string& err_path, std::chrono::seconds timeout) {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    setpgid(0, 0);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) dup2(out, 1);
    if (err >= 0) dup2(err, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(kChromium));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(kChromium, argv.data());
    _exit(127);
  }
  setpgid(pid, pid);  // Also here, so the group exists before any kill below.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      kill(-pid, SIGKILL);  // Leftover helpers (GPU, renderer) of this chromium only.
      return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "chromium overran " << timeout.count() << " s; killing process group " << pid;
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return false;
}

// The start tag around position `at` of `dom`: from its '<' to its '>'.
std::string TagAround(const std::string& dom, size_t at) {
  const size_t start = dom.rfind('<', at);
  const size_t end = dom.find('>', at);
  return start == std::string::npos ? "" : dom.substr(start, end - start);
}

// The integer value of attribute `attr` in `tag` (attr="123"), or -1.
int IntAttribute(const std::string& tag, const std::string& attr) {
  const std::string key = " " + attr + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return -1;
  const size_t begin = at + key.size();
  const size_t end = tag.find('"', begin);
  if (end == std::string::npos || end == begin) return -1;
  const std::string digits = tag.substr(begin, end - begin);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

// The integer in attribute `attr` of the first start tag containing `marker`, or -1.
int AttributeOfTag(const std::string& dom, const std::string& marker, const std::string& attr) {
  const size_t at = dom.find(marker);
  return at == std::string::npos ? -1 : IntAttribute(TagAround(dom, at), attr);
}

class WebBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kChromium, X_OK) != 0) GTEST_SKIP() << kChromium << " is not installed";
    web_ = std::make_unique<Webserver>(WebserverOptions{});
    RegisterDashboard(web_.get());
    web_->RegisterPage("/metrics.json", [this](const WebRequest&, WebResponse* resp) {
      resp->content_type = "application/json";
      resp->body = metrics_.Next();
    });
    ASSERT_TRUE(web_->Start().ok());
    char tmpl[] = "/tmp/web-browser-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
  }

  void TearDown() override {
    if (!tmp_.empty()) std::system(("rm -rf '" + tmp_ + "'").c_str());
  }

  // Flags for a throwaway, quiet, offline headless profile.
  std::vector<std::string> BaseArgs(const std::string& profile) {
    return {"--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--user-data-dir=" + tmp_ + "/" + profile};
  }

  FakeMetrics metrics_;
  std::unique_ptr<Webserver> web_;
  std::string tmp_;
};

TEST_F(WebBrowserTest, DashboardDrawsLiveChartsAndSavesScreenshot) {
  const std::string url = web_->url() + "/";

  // 1. The DOM after ~6 s of page time: charts must have drawn at least two updates.
  std::vector<std::string> args = BaseArgs("dom");
  args.insert(args.end(), {"--virtual-time-budget=6000", "--dump-dom", url});
  ASSERT_TRUE(RunChromium(args, tmp_ + "/dom.html", tmp_ + "/dom.log", std::chrono::seconds(120)))
      << ReadFile(tmp_ + "/dom.log");
  std::string dom = ReadFile(tmp_ + "/dom.html");
  ASSERT_NE(dom.find("id=\"total-chart\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_GE(AttributeOfTag(dom, "<body", "data-updates"), 3) << "snapshots processed";
  EXPECT_GE(AttributeOfTag(dom, "id=\"total-chart\"", "data-updates"), 2);
  // Every method card's charts, not just the first.
  int charts = 0;
  for (const std::string kind : {"class=\"chart rate-chart\"", "class=\"chart latency-chart\""}) {
    for (size_t at = dom.find(kind); at != std::string::npos; at = dom.find(kind, at + 1)) {
      charts++;
      const std::string tag = TagAround(dom, at);
      EXPECT_GE(IntAttribute(tag, "data-updates"), 2) << tag;
    }
  }
  EXPECT_EQ(charts, 8) << "4 methods x (throughput, latency)";
  EXPECT_NE(dom.find("data-state=\"live\""), std::string::npos) << "status shows live data";
  EXPECT_NE(dom.find("storage-node-07"), std::string::npos) << "server entity in the header";
  EXPECT_NE(dom.find("10.0.3.17:7050"), std::string::npos) << "client entity in the tables";
  EXPECT_NE(dom.find("timeouts_total"), std::string::npos);

  // 2. The screenshot, kept in the build tree.
  const std::string png = BuildDir() + "/dashboard.png";
  unlink(png.c_str());
  args = BaseArgs("shot");
  args.insert(args.end(), {"--virtual-time-budget=90000", "--window-size=1280,900",
                           "--screenshot=" + png, url});
  ASSERT_TRUE(RunChromium(args, tmp_ + "/shot.out", tmp_ + "/shot.log", std::chrono::seconds(120)))
      << ReadFile(tmp_ + "/shot.log");
  std::string image = ReadFile(png);
  ASSERT_GT(image.size(), 10000u) << "screenshot missing or blank: " << png;
  EXPECT_EQ(image.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  LOG(INFO) << "dashboard screenshot: " << png;
}

TEST_F(WebBrowserTest, DashboardShowsErrorStateWhenMetricsAreMissing) {
  // Without /metrics.json the page must say so instead of pretending to be live.
  web_->RegisterPage("/metrics.json", [](const WebRequest&, WebResponse* resp) {
    resp->status = 503;
    resp->body = "metrics unavailable";
  });
  std::vector<std::string> args = BaseArgs("err");
  args.insert(args.end(), {"--virtual-time-budget=3000", "--dump-dom", web_->url() + "/"});
  ASSERT_TRUE(RunChromium(args, tmp_ + "/dom.html", tmp_ + "/dom.log", std::chrono::seconds(120)))
      << ReadFile(tmp_ + "/dom.log");
  std::string dom = ReadFile(tmp_ + "/dom.html");
  EXPECT_NE(dom.find("data-state=\"error\""), std::string::npos) << dom.substr(0, 3000);
  EXPECT_NE(dom.find("HTTP 503"), std::string::npos);
  EXPECT_EQ(AttributeOfTag(dom, "<body", "data-updates"), 0);
}

}  // namespace
}  // namespace rrpc
