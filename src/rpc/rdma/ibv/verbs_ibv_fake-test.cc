// The libibverbs backend (verbs_ibv.cc) against a fake table of libibverbs entry points
// (OpenVerbsDeviceWith): what it asks of the library, field by field, runs in CI without a
// device. The fake keeps every modify_qp's attributes and mask, every posted work request, and
// hands back the completions, completion events and async events a test queues, so a wrong
// mask, a wrong ah_attr/grh field or a missed acknowledgement fails here. Data-path calls
// (ibv_post_send, ibv_poll_cq, ...) are inline in <infiniband/verbs.h> and go through the
// context's ops, which the fake fills in too.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rpc/rdma/ibv/verbs_ibv.h"
#include "rpc/rdma/ibv/verbs_ibv_library.h"

namespace rrpc::rdma {
namespace {

// What the fake device is and what it saw. One per test (FakeVerbsTest sets `g`).
struct FakeState {
  // The device.
  bool ethernet = true;
  uint32_t max_inline = 1024;  // create_qp refuses a larger inline cap (EINVAL)
  int devices = 1;
  // The port as query_port and query_gid_ex read it now (tests change it, then queue its event).
  ibv_port_state port_state = IBV_PORT_ACTIVE;
  uint16_t lid = 7;                         // InfiniBand (RoCE: 0)
  std::vector<uint16_t> pkeys = {0xFFFF};   // the P_Key table (host order; 0: an empty slot)
  const char* address = "::ffff:10.0.0.1";  // RoCE: the address entries 2 (v1) and 3 (v2)
  // Failures to inject: the errno the next call of each fails with (0: succeeds).
  int fail_create_cq = 0;
  int fail_reg_mr = 0;
  int fail_modify_to = -1;  // an ibv_qp_state: modify_qp to it fails (EINVAL)
  int post_send_rc = 0;

  // What the backend did.
  struct Modify {
    uint32_t qp_num;
    ibv_qp_attr attr;
    int mask;
  };
  std::vector<Modify> modifies;
  std::vector<uint32_t> create_qp_inline_asked;
  std::vector<ibv_send_wr> sends;  // sg_list not kept
  std::vector<ibv_sge> send_sges;
  int recvs = 0, srq_recvs = 0;
  std::vector<std::pair<int, uint32_t>> modify_srq;  // (mask, srq_limit)
  int fork_inits = 0, closes = 0, req_notifies = 0;
  unsigned cq_events_acked = 0;
  unsigned cq_events_acked_at_destroy = 0;
  int async_acked = 0;
  int destroyed_qps = 0, destroyed_cqs = 0, destroyed_srqs = 0, deregistered = 0;

  // What the test queues for the backend to read.
  std::deque<ibv_cq*> cq_events;
  // Made and not destroyed, newest last.
  std::vector<ibv_cq*> cqs;
  std::vector<ibv_qp*> qps;
  std::vector<ibv_srq*> srqs;
  std::map<ibv_cq*, std::deque<ibv_wc>> completions;
  std::deque<ibv_async_event> async_events;

  // The library's objects.
  ibv_device device{};
  ibv_device* list[2] = {&device, nullptr};
  ibv_context ctx{};
  uint32_t next_qp_num = 0x100;
};
FakeState* g = nullptr;

template <typename T>
void Remove(std::vector<T*>* v, T* p) {
  v->erase(std::remove(v->begin(), v->end(), p), v->end());
}

ibv_gid GidOf(const char* text) {
  ibv_gid gid{};
  inet_pton(AF_INET6, text, gid.raw);
  return gid;
}

Gid AsGid(const char* text) {
  const ibv_gid raw = GidOf(text);
  Gid gid;
  memcpy(gid.data(), raw.raw, gid.size());
  return gid;
}

// ---- The context's data-path ops.
int PollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  auto& q = g->completions[cq];
  int got = 0;
  while (got < n && !q.empty()) {
    wc[got++] = q.front();
    q.pop_front();
  }
  return got;
}
int ReqNotifyCq(ibv_cq*, int) {
  ++g->req_notifies;
  return 0;
}
int PostSend(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (g->post_send_rc != 0) {
    *bad = wr;
    return g->post_send_rc;
  }
  g->sends.push_back(*wr);
  for (int i = 0; i < wr->num_sge; ++i) g->send_sges.push_back(wr->sg_list[i]);
  return 0;
}
int PostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) {
  ++g->recvs;
  return 0;
}
int PostSrqRecv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**) {
  ++g->srq_recvs;
  return 0;
}

// ---- The dlsym'ed entry points.
ibv_device** GetDeviceList(int* n) {
  *n = g->devices;
  return g->list;
}
void FreeDeviceList(ibv_device**) {}
const char* GetDeviceName(ibv_device*) { return "fake_mlx5_0"; }
ibv_context* OpenDevice(ibv_device* d) {
  g->ctx.device = d;
  g->ctx.async_fd = eventfd(0, 0);
  g->ctx.num_comp_vectors = 2;
  g->ctx.ops.poll_cq = PollCq;
  g->ctx.ops.req_notify_cq = ReqNotifyCq;
  g->ctx.ops.post_send = PostSend;
  g->ctx.ops.post_recv = PostRecv;
  g->ctx.ops.post_srq_recv = PostSrqRecv;
  return &g->ctx;
}
int CloseDevice(ibv_context* c) {
  close(c->async_fd);
  ++g->closes;
  return 0;
}
int QueryDevice(ibv_context*, ibv_device_attr* a) {
  *a = ibv_device_attr{};
  a->phys_port_cnt = 1;
  return 0;
}
int QueryPort(ibv_context*, uint8_t, ibv_port_attr* a) {
  *a = ibv_port_attr{};
  a->state = g->port_state;
  a->link_layer = g->ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  a->active_mtu = IBV_MTU_1024;
  a->gid_tbl_len = 8;
  a->lid = g->ethernet ? 0 : g->lid;
  a->max_msg_sz = 1u << 30;
  a->pkey_tbl_len = static_cast<uint16_t>(g->pkeys.size());
  return 0;
}
int QueryPkey(ibv_context*, uint8_t, int index, __be16* pkey) {
  if (index < 0 || static_cast<size_t>(index) >= g->pkeys.size()) return EINVAL;
  *pkey = htons(g->pkeys[static_cast<size_t>(index)]);
  return 0;
}
// An mlx5 RoCE table: link-local v1, v2, then 10.0.0.1 as v1, v2. InfiniBand: one IB GID.
int QueryGidEx(ibv_context*, uint32_t, uint32_t index, ibv_gid_entry* e, uint32_t, size_t) {
  *e = ibv_gid_entry{};
  e->gid_index = index;
  e->port_num = 1;
  if (!g->ethernet) {
    if (index != 0) return ENODATA;
    e->gid = GidOf("fe80::7");
    e->gid_type = IBV_GID_TYPE_IB;
    return 0;
  }
  if (index > 3) return ENODATA;
  e->gid = GidOf(index < 2 ? "fe80::1" : g->address);
  e->gid_type = index % 2 == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  e->ndev_ifindex = 2;
  return 0;
}
int QueryGid(ibv_context*, uint8_t, int, ibv_gid*) { return EINVAL; }  // query_gid_ex is used
ibv_pd* AllocPd(ibv_context* c) {
  auto* pd = new ibv_pd{};
  pd->context = c;
  return pd;
}
int DeallocPd(ibv_pd* pd) {
  delete pd;
  return 0;
}
ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t len, int) {
  if (g->fail_reg_mr != 0) {
    errno = std::exchange(g->fail_reg_mr, 0);
    return nullptr;
  }
  auto* mr = new ibv_mr{};
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = len;
  mr->lkey = 0x11;
  mr->rkey = 0x22;
  return mr;
}
int DeregMr(ibv_mr* mr) {
  ++g->deregistered;
  delete mr;
  return 0;
}
ibv_comp_channel* CreateCompChannel(ibv_context* c) {
  auto* ch = new ibv_comp_channel{};
  ch->context = c;
  ch->fd = eventfd(0, 0);
  return ch;
}
int DestroyCompChannel(ibv_comp_channel* ch) {
  close(ch->fd);
  delete ch;
  return 0;
}
ibv_cq* CreateCq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* ch, int) {
  if (g->fail_create_cq != 0) {
    errno = std::exchange(g->fail_create_cq, 0);
    return nullptr;
  }
  auto* cq = new ibv_cq{};
  cq->context = c;
  cq->channel = ch;
  cq->cq_context = cq_context;
  cq->cqe = cqe;
  g->cqs.push_back(cq);
  return cq;
}
int DestroyCq(ibv_cq* cq) {
  ++g->destroyed_cqs;
  g->cq_events_acked_at_destroy = g->cq_events_acked;
  g->completions.erase(cq);
  Remove(&g->cqs, cq);
  delete cq;
  return 0;
}
int GetCqEvent(ibv_comp_channel*, ibv_cq** cq, void** context) {
  if (g->cq_events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *cq = g->cq_events.front();
  g->cq_events.pop_front();
  *context = (*cq)->cq_context;
  return 0;
}
void AckCqEvents(ibv_cq*, unsigned n) { g->cq_events_acked += n; }
ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* init) {
  g->create_qp_inline_asked.push_back(init->cap.max_inline_data);
  if (init->cap.max_inline_data > g->max_inline) {
    errno = EINVAL;
    return nullptr;
  }
  // As mlx5: depths rounded up to powers of two, the inline cap granted as asked.
  auto pow2 = [](uint32_t v) {
    uint32_t p = 1;
    while (p < v) p <<= 1;
    return p;
  };
  init->cap.max_send_wr = pow2(init->cap.max_send_wr);
  init->cap.max_recv_wr = init->srq != nullptr ? 0 : pow2(init->cap.max_recv_wr);
  auto* qp = new ibv_qp{};
  qp->context = pd->context;
  qp->pd = pd;
  qp->qp_context = init->qp_context;
  qp->send_cq = init->send_cq;
  qp->recv_cq = init->recv_cq;
  qp->srq = init->srq;
  qp->qp_num = g->next_qp_num++;
  qp->state = IBV_QPS_RESET;
  qp->qp_type = init->qp_type;
  g->qps.push_back(qp);
  return qp;
}
int DestroyQp(ibv_qp* qp) {
  ++g->destroyed_qps;
  Remove(&g->qps, qp);
  delete qp;
  return 0;
}
int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  g->modifies.push_back({qp->qp_num, *attr, mask});
  if ((mask & IBV_QP_STATE) && attr->qp_state == g->fail_modify_to) return EINVAL;
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;  // as libibverbs keeps it
  return 0;
}
ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* init) {
  auto* srq = new ibv_srq{};
  srq->context = pd->context;
  srq->pd = pd;
  srq->srq_context = init->srq_context;
  g->srqs.push_back(srq);
  return srq;
}
int DestroySrq(ibv_srq* srq) {
  ++g->destroyed_srqs;
  Remove(&g->srqs, srq);
  delete srq;
  return 0;
}
int ModifySrq(ibv_srq*, ibv_srq_attr* attr, int mask) {
  g->modify_srq.emplace_back(mask, attr->srq_limit);
  return 0;
}
int GetAsyncEvent(ibv_context*, ibv_async_event* ev) {
  if (g->async_events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *ev = g->async_events.front();
  g->async_events.pop_front();
  return 0;
}
void AckAsyncEvent(ibv_async_event*) { ++g->async_acked; }
int ForkInit() {
  ++g->fork_inits;
  return 0;
}

const ibv::Library kFake = {
    GetDeviceList, FreeDeviceList,    GetDeviceName,      OpenDevice,    CloseDevice, QueryDevice,
    QueryPort,     QueryGid,          QueryGidEx,         AllocPd,       DeallocPd,   RegMr,
    DeregMr,       CreateCompChannel, DestroyCompChannel, CreateCq,      DestroyCq,   GetCqEvent,
    AckCqEvents,   CreateQp,          DestroyQp,          ModifyQp,      CreateSrq,   DestroySrq,
    ModifySrq,     GetAsyncEvent,     ForkInit,           AckAsyncEvent, QueryPkey,
};

class FakeVerbsTest : public testing::Test {
 protected:
  void SetUp() override { g = &state_; }
  void TearDown() override {
    qp_.reset();
    cq_.reset();
    channel_.reset();
    pd_.reset();
    ctx_.reset();
    g = nullptr;
  }
  void Open(VerbsDeviceOptions options = {}) {
    Result<std::unique_ptr<Context>> opened = OpenVerbsDeviceWith(kFake, options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    ctx_ = std::move(opened).value();
  }
  // A QP on fresh CQs (and a PD): kept until the test ends.
  QueuePair* NewQp(uint32_t inline_asked = 236, SharedReceiveQueue* srq = nullptr) {
    pd_ = ctx_->AllocPd().value();
    channel_ = ctx_->CreateChannel().value();
    cq_ = ctx_->CreateCq(64, channel_.get()).value();
    QpInitAttr a;
    a.send_cq = a.recv_cq = cq_.get();
    a.srq = srq;
    a.caps.max_send_wr = 20;
    a.caps.max_recv_wr = 10;
    a.caps.max_inline_data = inline_asked;
    a.context = &qp_context_;
    qp_ = pd_->CreateQp(a).value();
    return qp_.get();
  }
  QpConnectParams Params() const {
    QpConnectParams p;
    p.remote.qp_num = 0x777;
    p.remote.lid = 9;
    p.remote.gid = ctx_->port().gid;
    p.remote.gid[15] = 2;      // the peer: 10.0.0.2
    p.remote.psn = 0x1abcdef;  // 25 bits: the QP takes the low 24
    p.local_psn = 0x2123456;
    p.path_mtu = 4096;
    p.rnr_retry = 7;
    p.retry_cnt = 6;
    p.min_rnr_timer = 12;
    p.timeout = 14;
    p.gid_index = ctx_->port().gid_index;
    p.port = 1;
    p.traffic_class = 104;
    p.flow_label = 0xabcde;
    p.service_level = 3;
    return p;
  }

  FakeState state_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<ProtectionDomain> pd_;
  std::unique_ptr<CompletionChannel> channel_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
  int qp_context_ = 0;
};

TEST_F(FakeVerbsTest, OpensTheRoceV2GidOfTheActivePortWithoutForkInit) {
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ("fake_mlx5_0", ctx_->device_name());
  EXPECT_EQ(1, ctx_->port().port);
  EXPECT_EQ(3, ctx_->port().gid_index);  // v2 of 10.0.0.1, not link-local, not v1
  EXPECT_EQ(GidType::kRoceV2, ctx_->port().gid_type);
  EXPECT_TRUE(ctx_->port().ethernet);
  EXPECT_EQ(1024u, ctx_->port().active_mtu);
  EXPECT_EQ(2, ctx_->port().num_comp_vectors);
  EXPECT_EQ(4u, ctx_->port().gid_table.size());
  // Finding 6 of issue 37: ibv_fork_init only when asked.
  EXPECT_EQ(0, state_.fork_inits);
}

TEST_F(FakeVerbsTest, ForkInitOnlyWhenAsked) {
  VerbsDeviceOptions o;
  o.fork_init = true;
  ASSERT_NO_FATAL_FAILURE(Open(o));
  EXPECT_EQ(1, state_.fork_inits);
}

TEST_F(FakeVerbsTest, NoDeviceIsNotFound) {
  state_.devices = 0;
  Result<std::unique_ptr<Context>> opened = OpenVerbsDeviceWith(kFake, {});
  EXPECT_TRUE(opened.status().IsNotFound()) << opened.status().ToString();
  VerbsDeviceOptions o;
  o.device = "mlx5_9";
  state_.devices = 1;
  opened = OpenVerbsDeviceWith(kFake, o);
  EXPECT_TRUE(opened.status().IsNotFound()) << opened.status().ToString();
  EXPECT_EQ(0, state_.closes);  // the named device is never opened
}

TEST_F(FakeVerbsTest, ToInitSetsPortPkeyAndAccessWithTheirMask) {
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  ASSERT_EQ(1u, state_.modifies.size());
  const auto& m = state_.modifies[0];
  EXPECT_EQ(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, m.mask);
  EXPECT_EQ(IBV_QPS_INIT, m.attr.qp_state);
  EXPECT_EQ(1, m.attr.port_num);
  EXPECT_EQ(0, m.attr.pkey_index);
  EXPECT_EQ(static_cast<unsigned>(IBV_ACCESS_LOCAL_WRITE), m.attr.qp_access_flags);
  EXPECT_EQ(QpState::kInit, qp->state());
}

// Finding 8 of issue 37: an InfiniBand partition asked for by its P_Key is joined by its index
// in the port's table (before: index 0 always); the membership bit asked for is preferred.
TEST_F(FakeVerbsTest, APkeyIsJoinedByItsTableIndex) {
  state_.ethernet = false;
  state_.pkeys = {0xFFFF, 0x0001, 0x0000, 0x8001, 0x0002};
  VerbsDeviceOptions o;
  o.pkey = 0x8001;
  ASSERT_NO_FATAL_FAILURE(Open(o));
  EXPECT_EQ(3, ctx_->port().pkey_index);  // the full member, not the limited 0x0001 first
  EXPECT_EQ(0x8001, ctx_->port().pkey);
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, ctx_->port().pkey_index).ok());
  ASSERT_EQ(1u, state_.modifies.size());
  EXPECT_EQ(3, state_.modifies[0].attr.pkey_index);
  EXPECT_NE(0, state_.modifies[0].mask & IBV_QP_PKEY_INDEX);
  qp_.reset();
  ctx_.reset();
  o.pkey = 0x8002;  // only a limited entry: taken, as the port has it
  ASSERT_NO_FATAL_FAILURE(Open(o));
  EXPECT_EQ(4, ctx_->port().pkey_index);
  EXPECT_EQ(0x0002, ctx_->port().pkey);
  ctx_.reset();
  ASSERT_NO_FATAL_FAILURE(Open());  // none asked for: the first entry, as before
  EXPECT_EQ(0, ctx_->port().pkey_index);
}

TEST_F(FakeVerbsTest, AnAbsentPkeyFailsTheOpenNamingIt) {
  state_.ethernet = false;
  state_.pkeys = {0xFFFF, 0x8001};
  VerbsDeviceOptions o;
  o.pkey = 0x8005;
  Result<std::unique_ptr<Context>> opened = OpenVerbsDeviceWith(kFake, o);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(std::string::npos, opened.status().ToString().find("P_Key 0x8005"))
      << opened.status().ToString();
  EXPECT_EQ(1, state_.closes);  // the device opened to look is closed again
}

// Finding 8 of issue 37: the local ACK timeout is the connection's (EndpointOptions::
// ack_timeout), not a constant; 0, a NIC's "forever", is refused before any modify.
TEST_F(FakeVerbsTest, TheAckTimeoutReachesRts) {
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  QpConnectParams p = Params();
  p.timeout = 18;
  ASSERT_TRUE(qp->Connect(p).ok());
  ASSERT_EQ(3u, state_.modifies.size());
  EXPECT_EQ(IBV_QPS_RTS, state_.modifies[2].attr.qp_state);
  EXPECT_EQ(18, state_.modifies[2].attr.timeout);
  EXPECT_NE(0, state_.modifies[2].mask & IBV_QP_TIMEOUT);
  qp_.reset();
  qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  p.timeout = 0;
  Status s = qp->Connect(p);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(4u, state_.modifies.size());  // the INIT only
}

TEST_F(FakeVerbsTest, ConnectOnRoceSetsRtrAndRtsAttributesWithTheirMasks) {
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  const QpConnectParams p = Params();
  ASSERT_TRUE(qp->Connect(p).ok());
  ASSERT_EQ(3u, state_.modifies.size());
  const ibv_qp_attr& rtr = state_.modifies[1].attr;
  EXPECT_EQ(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
            state_.modifies[1].mask);
  EXPECT_EQ(IBV_QPS_RTR, rtr.qp_state);
  EXPECT_EQ(IBV_MTU_4096, rtr.path_mtu);
  EXPECT_EQ(0x777u, rtr.dest_qp_num);
  EXPECT_EQ(0xabcdefu, rtr.rq_psn);
  EXPECT_EQ(1, rtr.max_dest_rd_atomic);
  EXPECT_EQ(12, rtr.min_rnr_timer);
  EXPECT_EQ(1, rtr.ah_attr.port_num);
  EXPECT_EQ(3, rtr.ah_attr.sl);
  EXPECT_EQ(1, rtr.ah_attr.is_global);
  EXPECT_EQ(0, memcmp(rtr.ah_attr.grh.dgid.raw, p.remote.gid.data(), 16));
  EXPECT_EQ(3, rtr.ah_attr.grh.sgid_index);
  EXPECT_EQ(64, rtr.ah_attr.grh.hop_limit);
  EXPECT_EQ(104, rtr.ah_attr.grh.traffic_class);
  EXPECT_EQ(0xabcdeu, rtr.ah_attr.grh.flow_label);  // the connection's: its probe's path
  const ibv_qp_attr& rts = state_.modifies[2].attr;
  EXPECT_EQ(IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC,
            state_.modifies[2].mask);
  EXPECT_EQ(IBV_QPS_RTS, rts.qp_state);
  EXPECT_EQ(14, rts.timeout);
  EXPECT_EQ(6, rts.retry_cnt);
  EXPECT_EQ(7, rts.rnr_retry);
  EXPECT_EQ(0x123456u, rts.sq_psn);
  EXPECT_EQ(1, rts.max_rd_atomic);
  EXPECT_EQ(QpState::kRts, qp->state());
}

TEST_F(FakeVerbsTest, ConnectWithinAnInfinibandSubnetRoutesByLid) {
  state_.ethernet = false;
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(7, ctx_->port().lid);
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  QpConnectParams p = Params();
  p.global = false;
  p.service_level = 12;  // InfiniBand has 16
  ASSERT_TRUE(qp->Connect(p).ok());
  const ibv_qp_attr& rtr = state_.modifies[1].attr;
  EXPECT_EQ(9, rtr.ah_attr.dlid);
  EXPECT_EQ(0, rtr.ah_attr.is_global);
  EXPECT_EQ(12, rtr.ah_attr.sl);
}

// Finding 3 of issue 37: the GRH's flow label has 20 bits; a larger one is refused before any
// modify.
TEST_F(FakeVerbsTest, AFlowLabelAboveTwentyBitsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  QpConnectParams p = Params();
  p.flow_label = 0x100000;
  const size_t modifies = state_.modifies.size();
  EXPECT_TRUE(qp->Connect(p).IsInvalidArgument());
  EXPECT_EQ(modifies, state_.modifies.size());
}

// Finding 5 of issue 37: mlx5 sends SL & 7 on RoCE; 8..15 are refused before any modify.
TEST_F(FakeVerbsTest, AServiceLevelAboveSevenIsRefusedOnRoce) {
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  QpConnectParams p = Params();
  p.service_level = 8;
  Status s = qp->Connect(p);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(1u, state_.modifies.size());  // INIT only
}

TEST_F(FakeVerbsTest, AFailedModifyIsAnErrorNamingTheTransition) {
  state_.fail_modify_to = IBV_QPS_RTS;
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  Status s = qp->Connect(Params());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("RTS")) << s.ToString();
  EXPECT_EQ(QpState::kRtr, qp->state());
  ASSERT_TRUE(qp->ToError().ok());
  EXPECT_EQ(IBV_QP_STATE, state_.modifies.back().mask);
  EXPECT_EQ(IBV_QPS_ERR, state_.modifies.back().attr.qp_state);
  EXPECT_EQ(QpState::kError, qp->state());
}

TEST_F(FakeVerbsTest, AnInlineCapTheDeviceRefusesIsAskedSmallerAndReadBack) {
  state_.max_inline = 64;
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp(236);
  EXPECT_EQ((std::vector<uint32_t>{236, 118, 59}), state_.create_qp_inline_asked);
  EXPECT_EQ(59u, qp->caps().max_inline_data);
  EXPECT_EQ(32u, qp->caps().max_send_wr);  // the device's rounding, read back
  EXPECT_EQ(16u, qp->caps().max_recv_wr);
}

TEST_F(FakeVerbsTest, PostSendBuildsTheWorkRequestAndReportsARefusal) {
  ASSERT_NO_FATAL_FAILURE(Open());
  QueuePair* qp = NewQp();
  std::vector<uint8_t> buf(64);
  auto mr = pd_->RegisterMemory(buf.data(), buf.size()).value();
  Sge sge{reinterpret_cast<uint64_t>(buf.data()), 40, mr->lkey()};
  SendWr wr;
  wr.wr_id = 42;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.signaled = true;
  wr.inline_data = true;
  wr.has_imm = true;
  wr.imm = 0x01020304;
  ASSERT_TRUE(qp->PostSend(wr).ok());
  ASSERT_EQ(1u, state_.sends.size());
  const ibv_send_wr& w = state_.sends[0];
  EXPECT_EQ(42u, w.wr_id);
  EXPECT_EQ(IBV_WR_SEND_WITH_IMM, w.opcode);
  EXPECT_EQ(static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_INLINE), w.send_flags);
  EXPECT_EQ(htonl(0x01020304), w.imm_data);
  ASSERT_EQ(1u, state_.send_sges.size());
  EXPECT_EQ(40u, state_.send_sges[0].length);
  EXPECT_EQ(0x11u, state_.send_sges[0].lkey);

  wr.has_imm = false;
  wr.signaled = false;
  wr.inline_data = false;
  ASSERT_TRUE(qp->PostSend(wr).ok());
  EXPECT_EQ(IBV_WR_SEND, state_.sends[1].opcode);
  EXPECT_EQ(0u, state_.sends[1].send_flags);

  state_.post_send_rc = ENOMEM;  // the send queue is full
  Status s = qp->PostSend(wr);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ENOMEM, s.posix_code()) << s.ToString();
}

TEST_F(FakeVerbsTest, PollTranslatesCompletions) {
  ASSERT_NO_FATAL_FAILURE(Open());
  NewQp();
  ibv_cq* raw = state_.cqs.back();
  ibv_wc a{};
  a.wr_id = 7;
  a.status = IBV_WC_SUCCESS;
  a.opcode = IBV_WC_RECV;
  a.byte_len = 100;
  a.qp_num = 0x100;
  a.wc_flags = IBV_WC_WITH_IMM;
  a.imm_data = htonl(5);
  ibv_wc b{};
  b.wr_id = 8;
  b.status = IBV_WC_RNR_RETRY_EXC_ERR;
  b.opcode = IBV_WC_SEND;
  ibv_wc c{};
  c.status = IBV_WC_WR_FLUSH_ERR;
  c.opcode = IBV_WC_RECV;
  state_.completions[raw] = {a, b, c};
  WorkCompletion wc[4];
  ASSERT_EQ(3, cq_->Poll(wc, 4).value());
  EXPECT_EQ(7u, wc[0].wr_id);
  EXPECT_EQ(WcStatus::kSuccess, wc[0].status);
  EXPECT_EQ(WcOpcode::kRecv, wc[0].opcode);
  EXPECT_EQ(100u, wc[0].byte_len);
  EXPECT_EQ(0x100u, wc[0].qp_num);
  EXPECT_TRUE(wc[0].has_imm);
  EXPECT_EQ(5u, wc[0].imm);
  EXPECT_EQ(WcStatus::kRnrRetryExceeded, wc[1].status);
  EXPECT_EQ(WcOpcode::kSend, wc[1].opcode);
  EXPECT_FALSE(wc[1].has_imm);
  EXPECT_EQ(WcStatus::kFlushed, wc[2].status);
  EXPECT_EQ(0, cq_->Poll(wc, 4).value());
  ASSERT_TRUE(cq_->RequestNotify().ok());
  EXPECT_EQ(1, state_.req_notifies);
}

// Every completion event is acknowledged: in batches of 64 while the CQ lives, the rest before
// it is destroyed (ibv_destroy_cq waits forever for unacknowledged events).
TEST_F(FakeVerbsTest, CompletionEventsAreAcknowledgedBeforeTheCqIsDestroyed) {
  ASSERT_NO_FATAL_FAILURE(Open());
  NewQp();
  ibv_cq* raw = state_.cqs.back();
  EXPECT_EQ(nullptr, channel_->GetEvent().value());  // none waiting: EAGAIN is no error
  for (int i = 0; i < 70; ++i) state_.cq_events.push_back(raw);
  for (int i = 0; i < 70; ++i) EXPECT_EQ(cq_.get(), channel_->GetEvent().value());
  EXPECT_EQ(64u, state_.cq_events_acked);
  qp_.reset();
  cq_.reset();
  EXPECT_EQ(1, state_.destroyed_cqs);
  EXPECT_EQ(70u, state_.cq_events_acked_at_destroy);
}

TEST_F(FakeVerbsTest, AsyncEventsNameWhatTheirCreatorsSetAndAreAcknowledged) {
  ASSERT_NO_FATAL_FAILURE(Open());
  int srq_context = 0;
  pd_ = ctx_->AllocPd().value();
  auto srq = pd_->CreateSrq(64, &srq_context).value();
  QueuePair* qp = NewQp(236, srq.get());
  ibv_qp* raw_qp = state_.qps.back();
  EXPECT_EQ(qp->qp_num(), raw_qp->qp_num);
  ibv_async_event e{};
  e.event_type = IBV_EVENT_QP_FATAL;
  e.element.qp = raw_qp;
  state_.async_events.push_back(e);
  e.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
  state_.async_events.push_back(e);
  e = {};
  e.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
  e.element.srq = state_.srqs.back();
  state_.async_events.push_back(e);
  e = {};
  e.event_type = IBV_EVENT_CQ_ERR;
  e.element.cq = state_.cqs.back();
  state_.async_events.push_back(e);
  e = {};
  e.event_type = IBV_EVENT_DEVICE_FATAL;
  state_.async_events.push_back(e);
  AsyncEvent ev;
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kQpFatal, ev.type);
  EXPECT_EQ(qp->qp_num(), ev.qp_num);
  EXPECT_EQ(&qp_context_, ev.context);
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kQpLastWqeReached, ev.type);
  EXPECT_EQ(&qp_context_, ev.context);
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kSrqLimitReached, ev.type);
  EXPECT_EQ(&srq_context, ev.context);
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kCqError, ev.type);
  EXPECT_EQ(static_cast<void*>(static_cast<CompletionQueue*>(cq_.get())), ev.context);
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kDeviceFatal, ev.type);
  EXPECT_FALSE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(5, state_.async_acked);
  // The SRQ: receives through the context's ops, the limit with its mask.
  ASSERT_TRUE(srq->ArmLimit(16).ok());
  ASSERT_EQ(1u, state_.modify_srq.size());
  EXPECT_EQ(IBV_SRQ_LIMIT, state_.modify_srq[0].first);
  EXPECT_EQ(16u, state_.modify_srq[0].second);
  qp_.reset();
  srq.reset();
  EXPECT_EQ(1, state_.destroyed_srqs);
}

TEST_F(FakeVerbsTest, CreateAndRegistrationFailuresCarryTheirErrno) {
  ASSERT_NO_FATAL_FAILURE(Open());
  state_.fail_create_cq = ENOMEM;
  Result<std::unique_ptr<CompletionQueue>> cq = ctx_->CreateCq(64, nullptr);
  ASSERT_FALSE(cq.ok());
  EXPECT_EQ(ENOMEM, cq.status().posix_code()) << cq.status().ToString();
  pd_ = ctx_->AllocPd().value();
  std::vector<uint8_t> buf(64);
  state_.fail_reg_mr = EFAULT;
  Result<std::unique_ptr<MemoryRegion>> mr = pd_->RegisterMemory(buf.data(), buf.size());
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(EFAULT, mr.status().posix_code()) << mr.status().ToString();
  mr = pd_->RegisterMemory(buf.data(), buf.size());
  ASSERT_TRUE(mr.ok());
  mr.value().reset();
  EXPECT_EQ(1, state_.deregistered);
}

// Finding 4 of issue 37: port, GID and LID events were translated and dropped; port() stayed as
// at open. Now a port event re-reads the port before it is returned: a new LID; a port that went
// down marked inactive (what it had kept), ACTIVE again when it comes up.
TEST_F(FakeVerbsTest, ALidChangeOrPortEventReadsThePortAgain) {
  state_.ethernet = false;
  Open();
  ASSERT_EQ(7, ctx_->port().lid);
  ibv_async_event e{};
  e.element.port_num = 1;
  state_.lid = 9;
  e.event_type = IBV_EVENT_LID_CHANGE;
  state_.async_events.push_back(e);
  AsyncEvent ev;
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kLidChange, ev.type);
  EXPECT_EQ(9, ctx_->port().lid);
  state_.port_state = IBV_PORT_DOWN;
  e.event_type = IBV_EVENT_PORT_ERR;
  state_.async_events.push_back(e);
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kPortError, ev.type);
  EXPECT_FALSE(ctx_->port().active);
  EXPECT_EQ(9, ctx_->port().lid);
  state_.port_state = IBV_PORT_ACTIVE;
  e.event_type = IBV_EVENT_PORT_ACTIVE;
  state_.async_events.push_back(e);
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kPortActive, ev.type);
  EXPECT_TRUE(ctx_->port().active);
  EXPECT_EQ(3, state_.async_acked);
}

// The same for a RoCE port's GID table: a new address gives new connections its GIDs.
TEST_F(FakeVerbsTest, AGidChangeEventReadsTheGidTableAgain) {
  Open();
  ASSERT_EQ(AsGid("::ffff:10.0.0.1"), ctx_->port().gid);
  state_.address = "::ffff:10.0.0.9";
  ibv_async_event e{};
  e.element.port_num = 1;
  e.event_type = IBV_EVENT_GID_CHANGE;
  state_.async_events.push_back(e);
  AsyncEvent ev;
  ASSERT_TRUE(ctx_->NextAsyncEvent(&ev));
  EXPECT_EQ(AsyncEventType::kGidChange, ev.type);
  const PortInfo port = ctx_->port();
  EXPECT_EQ(AsGid("::ffff:10.0.0.9"), port.gid);
  EXPECT_EQ(3, port.gid_index);
  ASSERT_EQ(4u, port.gid_table.size());
  EXPECT_EQ(AsGid("::ffff:10.0.0.9"), port.gid_table[2].gid);
}

}  // namespace
}  // namespace rrpc::rdma
