// RDMA metrics land on the messenger's registry (its /metrics) without any wiring: upgrades and
// fallbacks by reason, bytes, zero-copy messages, inline and posted sends, SRQ gauges per reactor,
// read back from the Prometheus text as a scraper sees them.
#include <gtest/gtest.h>

#include <string>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/prometheus_writer.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

RdmaOptions Rdma() {
  RdmaOptions o = rdma::SoftRdmaOptions();  // no metric_registry: the messenger's is used
  o.endpoint.buffer_size = 16 * 1024;
  o.endpoint.receive_buffers = 8;
  o.endpoint.send_buffers = 8;
  o.endpoint.rnr_retry = 0;
  return o;
}

// The value of the sample `name{entity="<entity>",id="<id>"}` in `m`'s Prometheus text; -1 when
// absent.
double Sample(const std::shared_ptr<Messenger>& m, const std::string& name,
              const std::string& entity, const std::string& id) {
  const std::string text = FormatPrometheus(m->metric_registry()->TakeSnapshot());
  const std::string key = name + "{entity=\"" + entity + "\",id=\"" + id + "\"} ";
  size_t at = text.find(key);
  if (at == std::string::npos || (at > 0 && text[at - 1] != '\n')) return -1;
  return std::stod(text.substr(at + key.size()));
}

class RdmaMetricsTest : public RpcTestBase {
 protected:
  void Start(RdmaOptions server, RdmaOptions client) {
    MessengerOptions so, co;
    co.bulk_connection_bytes = 0;
    so.transport_factory = std::make_shared<RdmaTransportFactory>(server);
    co.transport_factory = std::make_shared<RdmaTransportFactory>(client);
    StartServer(so);
    StartClient(co);
  }
  Status Echo(size_t sidecar_bytes) {
    rtest::EchoRequestPB req;
    req.set_data("metrics");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    const std::string sidecar(sidecar_bytes, 's');
    if (sidecar_bytes > 0) ctl.AddOutboundSidecar(Slice(sidecar));
    return Proxy().Echo(req, &resp, &ctl);
  }
};

TEST_F(RdmaMetricsTest, ConnectionMetricsAreOnTheServersRegistry) {
  Start(Rdma(), Rdma());
  ASSERT_TRUE(Echo(0).ok());
  ASSERT_TRUE(Echo(10000).ok());  // one receive block: by reference
  ASSERT_TRUE(Echo(100000).ok());
  EXPECT_EQ(Sample(server_, "rrpc_rdma_upgrades_total", "rdma", "connections"), 1);
  EXPECT_EQ(Sample(client_, "rrpc_rdma_upgrades_total", "rdma", "connections"), 1);
  EXPECT_GT(Sample(server_, "rrpc_rdma_received_bytes_total", "rdma", "receives"), 110000);
  EXPECT_GT(Sample(server_, "rrpc_rdma_sent_bytes_total", "rdma", "sends"), 110000);
  EXPECT_GE(Sample(server_, "rrpc_rdma_zero_copy_messages_total", "rdma", "receives"), 1);
  EXPECT_EQ(Sample(server_, "rrpc_rdma_copied_no_spare_total", "rdma", "receives"), 0);
  EXPECT_GE(Sample(server_, "rrpc_rdma_credit_waits_total", "rdma", "connections"), 0);
  EXPECT_EQ(Sample(server_, "rrpc_rdma_credit_slow_grants_total", "rdma", "connections"), 0);
  // Small responses went inline, the large ones from registered memory.
  EXPECT_GE(Sample(server_, "rrpc_rdma_inline_send_bytes_count", "rdma", "sends"), 1);
  EXPECT_GE(Sample(server_, "rrpc_rdma_posted_send_bytes_count", "rdma", "sends"), 1);
  EXPECT_EQ(Sample(server_, "rrpc_rdma_fallbacks_total", "rdma_fallback", "disabled"), 0);
}

// One factory used by one client messenger after another: the first one's registry goes with it,
// and what the factory counts into must not (the second messenger's registry gets the metrics).
TEST_F(RdmaMetricsTest, AFactoryOutlivesTheMessengerWhoseRegistryItUsed) {
  MessengerOptions so, co;
  co.bulk_connection_bytes = 0;
  so.transport_factory = std::make_shared<RdmaTransportFactory>(Rdma());
  co.transport_factory = std::make_shared<RdmaTransportFactory>(Rdma());
  StartServer(so);
  StartClient(co);
  ASSERT_TRUE(Echo(10000).ok());
  client_->Shutdown();
  client_.reset();  // its registry is gone
  StartClient(co);
  ASSERT_TRUE(Echo(10000).ok());
  ASSERT_TRUE(Echo(0).ok());
  EXPECT_EQ(Sample(client_, "rrpc_rdma_upgrades_total", "rdma", "connections"), 1);
  EXPECT_GT(Sample(client_, "rrpc_rdma_sent_bytes_total", "rdma", "sends"), 10000);
}

TEST_F(RdmaMetricsTest, FallbacksAreCountedByReason) {
  RdmaOptions off = Rdma();
  off.enabled = false;
  Start(off, Rdma());
  ASSERT_TRUE(Echo(0).ok());
  EXPECT_EQ(Sample(client_, "rrpc_rdma_fallbacks_total", "rdma_fallback", "disabled"), 1);
  EXPECT_EQ(Sample(client_, "rrpc_rdma_upgrades_total", "rdma", "connections"), 0);
}

TEST_F(RdmaMetricsTest, SrqGaugesPerReactor) {
  RdmaOptions srq = Rdma();
  srq.use_srq = true;
  Start(srq, Rdma());
  ASSERT_TRUE(Echo(20000).ok());
  EXPECT_EQ(Sample(server_, "rrpc_rdma_srq_connections", "rdma_srq", "reactor-0"), 1);
  EXPECT_GT(Sample(server_, "rrpc_rdma_srq_posted_receives", "rdma_srq", "reactor-0"), 0);
  EXPECT_GT(Sample(server_, "rrpc_rdma_srq_pool_bytes", "rdma_srq", "reactor-0"), 0);
}

}  // namespace
}  // namespace rrpc::rpc
