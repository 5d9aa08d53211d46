// overload-bench: how a server holds up when offered more calls than it can run. One process,
// server and client on loopback. The handler sleeps --handler_us (a storage call waiting on its
// disk: the workers, not the CPU, set the capacity, so the figure is about admission and not
// about what else the machine runs). --rounds rounds of two phases, each --seconds long, then a
// recovery phase:
//   peak:     a closed loop that keeps every worker busy: the most the server answers per second;
//   overload: an open loop offering --overload (3) times that round's peak rate, each call with a
//             --deadline_ms budget: goodput (answered within the deadline) per second, refused
//             as too busy, timed out; the round's ratio is goodput / peak;
//   recovery: an open loop at half the peak: what share is answered, from its first 100 ms on;
//             its p99 is the half-load p99 the overload p99 is compared with.
// Peak and overload alternate round by round, so a busy spell of the machine hits both alike.
// Prints one line per phase:
//   OVERLOAD phase=<p> offered_per_sec=<f> goodput_per_sec=<f> too_busy=<n> timed_out=<n>
//     other_errors=<n> p99_ms=<f> ...
// and a summary with the median, lowest and highest goodput_vs_peak of the rounds.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/echo_only_service.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/command_line.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "util/countdown_latch.h"

DEFINE_int32(workers, 2, "Server worker threads");
DEFINE_int32(queue_length, 32,
             "Server service queue length (32: a full queue drains in about a third of the "
             "default deadline at the default capacity)");
DEFINE_int32(handler_us, 1000, "Time each handler takes (sleeping), microseconds");
DEFINE_int32(deadline_ms, 100, "Each call's budget in the overload and recovery phases");
DEFINE_double(overload, 3.0, "Offered load in the overload phase, as a multiple of the peak");
DEFINE_double(seconds, 2.0, "Length of each phase");
DEFINE_int32(rounds, 5, "Peak + overload rounds, alternated so machine noise hits both alike");
DEFINE_bool(adaptive_limit, false,
            "Give the server's pool an adaptive concurrency limit (docs/isolation.md): calls "
            "beyond it are refused at once instead of queueing");
DEFINE_int32(target_queue_us, 2000, "The adaptive limit's target mean queueing time");

namespace rrpc::bench {
namespace {

class SleepyService final : public EchoOnlyService {
 public:
  void Echo(const BenchRequestPB* req, BenchResponsePB* resp, rpc::RpcContext* ctx) override {
    SleepFor(MonoDelta::FromMicroseconds(FLAGS_handler_us));
    resp->set_payload(req->payload());
    ctx->RespondSuccess();
  }
};

struct PhaseResult {
  int64_t sent = 0;
  int64_t ok = 0;  // answered within its deadline
  int64_t too_busy = 0;
  int64_t timed_out = 0;
  int64_t other = 0;
  std::vector<double> ok_latency_ms;
};

// Counts the outcome of every call of a phase. Callbacks run on client reactors.
class Outcomes {
 public:
  void Record(const rpc::RpcController& ctl, MonoTime sent, MonoTime deadline) {
    const MonoTime now = MonoTime::Now();
    MutexLock l(mu_);
    if (ctl.status().ok() && now <= deadline) {
      r_.ok++;
      r_.ok_latency_ms.push_back((now - sent).ToSeconds() * 1000);
    } else if (ctl.error_response() != nullptr &&
               ctl.error_response()->code() == rpc::ErrorStatusPB::ERROR_SERVER_TOO_BUSY) {
      r_.too_busy++;
    } else if (ctl.status().IsTimedOut() || (ctl.status().ok() && now > deadline)) {
      r_.timed_out++;
    } else {
      r_.other++;
    }
  }
  PhaseResult Take() {
    MutexLock l(mu_);
    return std::move(r_);
  }

 private:
  Mutex mu_;
  PhaseResult r_;
};

struct Call {
  BenchRequestPB req;
  BenchResponsePB resp;
  rpc::RpcController ctl;
  MonoTime sent;
  MonoTime deadline;
};

double P99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
}

void Print(const char* phase, double offered, double seconds, const PhaseResult& r) {
  printf(
      "OVERLOAD phase=%s offered_per_sec=%.0f goodput_per_sec=%.0f sent=%lld ok=%lld "
      "too_busy=%lld timed_out=%lld other_errors=%lld p99_ms=%.2f\n",
      phase, offered, r.ok / seconds, static_cast<long long>(r.sent), static_cast<long long>(r.ok),
      static_cast<long long>(r.too_busy), static_cast<long long>(r.timed_out),
      static_cast<long long>(r.other), P99(r.ok_latency_ms));
  fflush(stdout);
}

// Closed loop: `conc` calls always outstanding, each sent again by its own callback.
double RunPeak(const BenchServiceProxy& proxy, int conc, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ok{0};
  CountDownLatch done(conc);
  std::vector<std::unique_ptr<Call>> calls;
  std::function<void(Call*)> issue = [&](Call* c) {
    c->ctl.Reset();
    c->ctl.set_timeout(MonoDelta::FromSeconds(60));
    proxy.EchoAsync(c->req, &c->resp, &c->ctl, [&, c] {
      if (c->ctl.status().ok()) ok++;
      if (stop.load()) {
        done.CountDown();
      } else {
        issue(c);
      }
    });
  };
  const MonoTime start = MonoTime::Now();
  for (int i = 0; i < conc; i++) {
    calls.push_back(std::make_unique<Call>());
    calls.back()->req.set_payload("peak");
    issue(calls.back().get());
  }
  SleepFor(MonoDelta::FromSeconds(seconds));
  const int64_t answered = ok.load();
  const double elapsed = (MonoTime::Now() - start).ToSeconds();
  stop = true;
  done.Wait();
  return answered / elapsed;
}

// Open loop: one call every 1/rate seconds, whatever happened to the earlier ones.
PhaseResult RunOpen(const BenchServiceProxy& proxy, double rate, double seconds) {
  Outcomes outcomes;
  std::atomic<int64_t> in_flight{0};
  const MonoDelta budget = MonoDelta::FromMilliseconds(FLAGS_deadline_ms);
  const MonoTime start = MonoTime::Now();
  const int64_t total = static_cast<int64_t>(rate * seconds);
  for (int64_t i = 0; i < total; i++) {
    const MonoTime due = start + MonoDelta::FromSeconds(i / rate);
    const MonoTime now = MonoTime::Now();
    if (due > now) SleepFor(due - now);
    auto* c = new Call;
    c->req.set_payload("load");
    c->ctl.set_timeout(budget);
    c->sent = MonoTime::Now();
    c->deadline = c->ctl.deadline();
    in_flight++;
    proxy.EchoAsync(c->req, &c->resp, &c->ctl, [&outcomes, &in_flight, c] {
      outcomes.Record(c->ctl, c->sent, c->deadline);
      delete c;
      in_flight--;
    });
  }
  while (in_flight.load() > 0) SleepFor(MonoDelta::FromMilliseconds(5));
  PhaseResult r = outcomes.Take();
  r.sent = total;
  return r;
}

int Main() {
  rpc::MessengerOptions server_options;
  server_options.name = "overload-server";
  server_options.num_workers = FLAGS_workers;
  server_options.service_queue_length = FLAGS_queue_length;
  server_options.adaptive_limit.enabled = FLAGS_adaptive_limit;
  server_options.adaptive_limit.target_queue_time =
      MonoDelta::FromMicroseconds(FLAGS_target_queue_us);
  std::shared_ptr<rpc::Messenger> server = rpc::MessengerBuilder(server_options).Build().value();
  RRPC_CHECK_OK(server->RegisterService(std::make_unique<SleepyService>()));
  Sockaddr addr;
  RRPC_CHECK_OK(server->Listen(Sockaddr::Loopback(0), &addr));
  std::shared_ptr<rpc::Messenger> client = rpc::MessengerBuilder("overload-client").Build().value();
  BenchServiceProxy proxy(client, addr);

  const double seconds = FLAGS_seconds;
  std::vector<double> ratios;
  std::vector<double> overload_p99s;
  double peak = 0;
  int64_t refused = 0, offered_calls = 0;
  for (int round = 0; round < std::max(1, FLAGS_rounds); round++) {
    peak = RunPeak(proxy, FLAGS_workers * 2, seconds);
    printf(
        "OVERLOAD phase=peak round=%d goodput_per_sec=%.0f workers=%d handler_us=%d "
        "queue_length=%d\n",
        round, peak, FLAGS_workers, FLAGS_handler_us, FLAGS_queue_length);
    const double offered = peak * FLAGS_overload;
    const PhaseResult over = RunOpen(proxy, offered, seconds);
    Print("overload", offered, seconds, over);
    ratios.push_back(over.ok / seconds / peak);
    overload_p99s.push_back(P99(over.ok_latency_ms));
    refused += over.too_busy;
    offered_calls += over.sent;
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(overload_p99s.begin(), overload_p99s.end());
  // Recovery: the first 100 ms on their own, then the rest of the phase.
  const PhaseResult first = RunOpen(proxy, peak / 2, 0.1);
  Print("recovery_first_100ms", peak / 2, 0.1, first);
  const PhaseResult rest = RunOpen(proxy, peak / 2, seconds);
  Print("recovery", peak / 2, seconds, rest);
  printf(
      "OVERLOAD summary rounds=%zu goodput_vs_peak_median=%.3f min=%.3f max=%.3f "
      "refused_share=%.3f recovery_first_100ms_ok_share=%.3f recovery_ok_share=%.3f "
      "overload_p99_ms_median=%.2f half_load_p99_ms=%.2f p99_vs_half_load=%.2f "
      "adaptive_limit=%d\n",
      ratios.size(), ratios[ratios.size() / 2], ratios.front(), ratios.back(),
      offered_calls ? double(refused) / offered_calls : 0.0,
      first.sent ? double(first.ok) / first.sent : 0.0,
      (first.sent + rest.sent) ? double(first.ok + rest.ok) / (first.sent + rest.sent) : 0.0,
      overload_p99s[overload_p99s.size() / 2], P99(rest.ok_latency_ms),
      P99(rest.ok_latency_ms) > 0
          ? overload_p99s[overload_p99s.size() / 2] / P99(rest.ok_latency_ms)
          : 0.0,
      FLAGS_adaptive_limit ? 1 : 0);
  client->Shutdown();
  server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace rrpc::bench

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"overload-bench [--workers=N] [--handler_us=N] [--overload=X] [--seconds=S] "
       "[--adaptive_limit]",
       "Goodput and refusals when a server is offered several times its capacity, and how fast "
       "it recovers (docs/reliability.md).",
       {"bench/overload_bench_main.cc"}});
  google::InitGoogleLogging(argv[0]);
  return rrpc::bench::Main();
}
