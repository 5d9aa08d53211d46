// cluster-bench --scenario=drop: issue 25's scenario 5 timed. Three in-process echo servers, each
// in a network namespace of its own joined to the clients' namespace by a veth pair
// (rpc/testing/netns-test-util.h); after --steady_seconds one server's veth goes down, so its
// packets vanish (no FIN, no RST). Figures: p99 of the steady window and of the --after_seconds
// after the cut, the end of the first 100 ms slot back at >= 60% of the steady rate, calls
// failed, extra attempts; with the channel's attempt timeout (--drop_attempt_timeout_ms, 0: off,
// leaving dead-peer detection to move the calls). Needs root: says "skipped" otherwise.
#include "bench/cluster_bench_drop.h"

#include <gflags/gflags.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/cluster_bench_load.h"
#include "bench/echo_only_service.h"
#include "rpc/testing/netns-test-util.h"
#include "rrpc/rpc/rpc_context.h"

DEFINE_int32(drop_attempt_timeout_ms, 1000,
             "drop: the channel's per-attempt timeout in ms (0: none; dead-peer detection, about "
             "4.5 s by default, then moves the calls of the silent server)");

namespace rrpc::bench {
namespace {

class EchoService final : public EchoOnlyService {
 public:
  void Echo(const BenchRequestPB* req, BenchResponsePB* resp, rpc::RpcContext* ctx) override {
    resp->set_payload(req->payload());
    ctx->RespondSuccess();
  }
};

struct NsServer {
  std::string ns;
  std::string dev;
  std::shared_ptr<rpc::Messenger> messenger;
  Sockaddr addr;
};

}  // namespace

int RunDrop(int clients_n, int concurrency, double steady_seconds, double after_seconds) {
  using rpc::NetNamespaces;
  std::string skipped = NetNamespaces::Unavailable();
  NetNamespaces namespaces("cb");
  const std::string client_ns = skipped.empty() ? namespaces.Add("c") : "";
  if (skipped.empty() && client_ns.empty()) skipped = "ip netns add failed";
  if (!skipped.empty()) {
    printf("CLUSTER scenario=drop skipped=\"%s\"\n", skipped.c_str());
    return 0;
  }
  const std::string id = std::to_string(getpid() % 100000);
  std::vector<NsServer> servers(3);
  std::string target = "list://";
  for (int i = 0; i < 3; i++) {
    const std::string net =
        "10." + std::to_string(90 + i) + "." + std::to_string(getpid() % 250 + 1) + ".";
    NsServer& s = servers[i];
    s.ns = namespaces.Add("s" + std::to_string(i));
    const std::string veth = "rcb" + id + std::to_string(i);
    if (s.ns.empty() || !NetNamespaces::Link(veth, s.ns, net + "1", client_ns, net + "2")) {
      fprintf(stderr, "cluster-bench: cannot make the namespaces and links\n");
      return 1;
    }
    s.dev = veth + "a";
    Status started;
    NetNamespaces::RunIn(s.ns, [&] {
      rpc::MessengerOptions mo;
      mo.name = "server" + std::to_string(i);
      mo.service_queue_length = 1024;
      auto built = rpc::MessengerBuilder(mo).Build();
      if (!built.ok()) {
        started = built.status();
        return;
      }
      s.messenger = *built;
      started = s.messenger->RegisterService(std::make_unique<EchoService>());
      if (started.ok()) {
        started = s.messenger->Listen(Sockaddr::Parse(net + "1:0").value(), &s.addr);
      }
    });
    if (!started.ok()) {
      fprintf(stderr, "cluster-bench: server %d: %s\n", i, started.ToString().c_str());
      return 1;
    }
    target += (i > 0 ? "," : "") + s.addr.ToString();
  }
  const double total = steady_seconds + after_seconds;
  Recorder recorder(static_cast<size_t>(total * 400'000));
  rpc::ChannelOptions options;
  options.attempt_timeout = MonoDelta::FromMilliseconds(FLAGS_drop_attempt_timeout_ms);
  std::unique_ptr<Clients> clients;
  NetNamespaces::RunIn(client_ns, [&] {
    clients = std::make_unique<Clients>(clients_n, target, options, concurrency, &recorder);
  });
  clients->Start();
  SleepFor(MonoDelta::FromSeconds(steady_seconds));
  const double cut_at = recorder.Elapsed();
  NetNamespaces::SetLink(servers[1].ns, servers[1].dev, /*up=*/false);
  SleepFor(MonoDelta::FromSeconds(after_seconds));
  const double end = recorder.Elapsed();
  clients->Stop();

  const LossFigures f = FiguresOfLoss(recorder, cut_at, end, after_seconds);
  const int64_t failed = clients->Sum(&Load::failed);
  printf(
      "CLUSTER scenario=drop clients=%d concurrency=%d attempt_timeout_ms=%d calls=%ld "
      "failed=%ld steady_per_sec=%.0f steady_p50_ms=%.2f steady_p99_ms=%.2f "
      "after_cut_p99_ms=%.2f after_cut_p999_ms=%.2f after_cut_max_ms=%.2f "
      "lowest_100ms_share=%.2f back_to_60pct_s=%.1f extra_attempts=%ld\n",
      clients_n, concurrency, FLAGS_drop_attempt_timeout_ms, clients->Sum(&Load::calls), failed,
      f.steady_per_sec, Ms(f.steady.ValueAtPercentile(50)), Ms(f.steady.ValueAtPercentile(99)),
      Ms(f.after.ValueAtPercentile(99)), Ms(f.after.ValueAtPercentile(99.9)), Ms(f.after.max()),
      f.lowest_share, f.back_to_60pct_s, clients->Sum(&Load::extra_attempts));
  printf("CLUSTER scenario=drop per_second_after_cut=");
  PrintCounts(f.per_second_after);
  clients.reset();
  for (auto& s : servers) s.messenger->Shutdown();
  return failed == 0 ? 0 : 1;
}

}  // namespace rrpc::bench
