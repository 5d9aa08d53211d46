// Tests of the example storage server: KvService on RocksDB behind ServerBase, KvClient's retries,
// restarts on the same data, the graceful drain, and SIGTERM of a real kv-server process.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_client.h"
#include "kv/kv_server.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/mutex.h"
#include "util/countdown_latch.h"

extern char** environ;

namespace rrpc::kv {
namespace {

using rpc::HandlerGate;
using rpc::WaitForCondition;

std::string KeyOf(const std::string& prefix, int i) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%s%06d", prefix.c_str(), i);
  return buf;
}

class KvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kv-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    data_dir_ = tmpl;
    auto built = rpc::MessengerBuilder("kv-test-client").Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    client_messenger_ = std::move(built).value();
  }
  void TearDown() override {
    gate_.Open();  // never leave a worker blocked
    if (client_messenger_) client_messenger_->Shutdown();
    server_.reset();
    std::filesystem::remove_all(data_dir_);
  }

  KvServerOptions Options() {
    KvServerOptions opts;
    opts.base.name = "kv-test-server";
    opts.base.rpc_bind_address = "127.0.0.1:0";
    opts.base.data_dir = data_dir_;
    return opts;
  }
  void StartServer(KvServerOptions opts) {
    server_ = std::make_unique<KvServer>(std::move(opts));
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void StartServer() { StartServer(Options()); }
  std::unique_ptr<KvClient> NewClient(KvClientOptions opts = {}) {
    return std::make_unique<KvClient>(client_messenger_, server_->rpc_address(), opts);
  }

  HandlerGate gate_;  // outlives the server, so no handler waits on a destroyed gate
  std::string data_dir_;
  std::shared_ptr<rpc::Messenger> client_messenger_;
  std::unique_ptr<KvServer> server_;
};

// Increment (a tracked method, docs/exactly-once.md) adds to a decimal counter and refuses a
// value that is not a counter.
TEST_F(KvTest, IncrementAddsToACounterAndIsTracked) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = NewClient();
  int64_t value = 0;
  ASSERT_TRUE(client->Increment("n", 5, &value).ok());
  EXPECT_EQ(5, value);
  ASSERT_TRUE(client->Increment("n", -2, &value).ok());
  EXPECT_EQ(3, value);
  std::string v;
  ASSERT_TRUE(client->Get("n", &v).ok());
  EXPECT_EQ("3", v);
  ASSERT_TRUE(client->Put("text", "abc").ok());
  EXPECT_FALSE(client->Increment("text", 1, &value).ok());
  ASSERT_TRUE(client->Put("big", std::to_string(INT64_MAX)).ok());
  EXPECT_FALSE(client->Increment("big", 1, &value).ok());
  // Tracked: the call carries a request id, and the server keeps its result for a retry; a Put
  // (not tracked) carries none.
  KvServiceProxy proxy(client_messenger_, server_->rpc_address());
  IncrementRequestPB inc;
  inc.set_key("n");
  inc.set_delta(1);
  IncrementResponsePB inc_resp;
  rpc::RpcController inc_ctl;
  ASSERT_TRUE(proxy.Increment(inc, &inc_resp, &inc_ctl).ok()) << inc_ctl.status().ToString();
  EXPECT_EQ(4, inc_resp.value());
  EXPECT_GT(inc_ctl.request_seq_no(), 0u);
  EXPECT_TRUE(inc_ctl.server_tracks_results());
  PutRequestPB put;
  put.set_key("p");
  put.set_value("v");
  PutResponsePB put_resp;
  rpc::RpcController put_ctl;
  ASSERT_TRUE(proxy.Put(put, &put_resp, &put_ctl).ok()) << put_ctl.status().ToString();
  EXPECT_EQ(0u, put_ctl.request_seq_no());
}

TEST_F(KvTest, PutGetDeleteScanAndBatch) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = NewClient();
  ASSERT_TRUE(client->Put("b", "2").ok());
  ASSERT_TRUE(client->Put("a", "1").ok());
  ASSERT_TRUE(client->Put("c", "3").ok());
  std::string v;
  ASSERT_TRUE(client->Get("a", &v).ok());
  EXPECT_EQ("1", v);
  EXPECT_TRUE(client->Get("zz", &v).IsNotFound());
  ASSERT_TRUE(client->Delete("b").ok());
  EXPECT_TRUE(client->Get("b", &v).IsNotFound());

  std::vector<std::pair<std::string, std::string>> pairs;
  bool has_more = true;
  ASSERT_TRUE(client->Scan("", "", 0, &pairs, &has_more).ok());
  ASSERT_EQ(2u, pairs.size());
  EXPECT_EQ("a", pairs[0].first);
  EXPECT_EQ("c", pairs[1].first);
  EXPECT_EQ("3", pairs[1].second);
  EXPECT_FALSE(has_more);

  KvBatch batch;
  batch.Put("d", "4");
  batch.Put("e", "5");
  batch.Delete("a");
  ASSERT_TRUE(client->Batch(batch).ok());
  ASSERT_TRUE(client->Scan("b", "e", 0, &pairs).ok());  // [b, e)
  ASSERT_EQ(2u, pairs.size());
  EXPECT_EQ("c", pairs[0].first);
  EXPECT_EQ("d", pairs[1].first);
  ASSERT_TRUE(client->Scan("", "", 2, &pairs, &has_more).ok());
  ASSERT_EQ(2u, pairs.size());
  EXPECT_EQ("c", pairs[0].first);
  EXPECT_TRUE(has_more);
  EXPECT_TRUE(client->Get("a", &v).IsNotFound());
}

TEST_F(KvTest, PutWithNeitherValueNorSidecarIsInvalid) {
  StartServer();
  // kv.proto: exactly one of value / value_sidecar. Neither used to store an empty value.
  KvServiceProxy proxy(client_messenger_, server_->rpc_address());
  PutRequestPB req;
  req.set_key("k");
  PutResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = proxy.Put(req, &resp, &ctl);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(rpc::ErrorStatusPB::ERROR_INVALID_REQUEST, ctl.error_response()->code());
  std::string value;
  EXPECT_TRUE(NewClient()->Get("k", &value).IsNotFound());
  // An empty value sent as value = "" is a value.
  EXPECT_TRUE(NewClient()->Put("k", "").ok());
  EXPECT_TRUE(NewClient()->Get("k", &value).ok());
  EXPECT_EQ("", value);
}

// A file system that fails on demand, as a disk or a process out of descriptors does: new table
// files (a flush) and appends to the write-ahead log (a write) fail while `fail` is set.
// `on_lock`, when set, runs as a database open takes its LOCK file (in a KvDb::Reopen(): with the
// old database closed and calls refused); the lock then fails while `fail_lock` is set. Set
// `on_lock` before the fault that leads to the reopen (the `fail` store orders the two).
class FailingFs : public rocksdb::FileSystemWrapper {
 public:
  FailingFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FailingFs"; }
  rocksdb::IOStatus LockFile(const std::string& name, const rocksdb::IOOptions& options,
                             rocksdb::FileLock** lock, rocksdb::IODebugContext* dbg) override {
    if (on_lock) on_lock();
    if (fail_lock.load()) return rocksdb::IOStatus::IOError("injected: cannot lock", name);
    return target()->LockFile(name, options, lock, dbg);
  }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* dbg) override {
    if (fail.load() && name.find(".sst") != std::string::npos) return Injected();
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, file, dbg);
    if (s.ok() && name.find(".log") != std::string::npos) {
      *file = std::make_unique<FailingWal>(std::move(*file), this);
    }
    return s;
  }
  rocksdb::IOStatus Injected() const {
    rocksdb::IOStatus s = rocksdb::IOStatus::IOError("injected: Too many open files");
    s.SetRetryable(retryable);  // a file system that knows the error is transient says so
    return s;
  }
  std::atomic<bool> fail{false};
  bool retryable = false;
  std::function<void()> on_lock;
  std::atomic<bool> fail_lock{false};

 private:
  class FailingWal : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    FailingWal(std::unique_ptr<rocksdb::FSWritableFile> file, const FailingFs* fs)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->fail.load()) return fs_->Injected();
      return target()->Append(data, options, dbg);
    }

   private:
    const FailingFs* const fs_;
  };
};

class KvHealthTest : public KvTest {
 protected:
  void StartFailable() {
    env_ = rocksdb::NewCompositeEnv(fs_);
    KvServerOptions opts = Options();
    opts.db_env = env_.get();
    opts.db_recovery_interval = MonoDelta::FromMilliseconds(50);
    StartServer(opts);
  }
  std::string Note() { return server_->base()->HealthNote(); }
  std::shared_ptr<FailingFs> fs_ = std::make_shared<FailingFs>();
  std::unique_ptr<rocksdb::Env> env_;  // outlives the server (reset in TearDown)
};

TEST_F(KvHealthTest, UnrecoverableWriteErrorReopensTheDatabaseAndLosesNoAcknowledgedWrite) {
  StartFailable();
  // The reopen waits here (database closed, calls refused) until the test lets it go on.
  CountDownLatch reopening(1), go_on(1);
  fs_->on_lock = [&] {
    reopening.CountDown();
    go_on.Wait();
  };
  std::unique_ptr<KvClient> client = NewClient();
  constexpr int kAcknowledged = 50;
  for (int i = 0; i < kAcknowledged; i++) {
    ASSERT_TRUE(client->Put(KeyOf("k", i), "v" + std::to_string(i)).ok());
  }

  // The write-ahead log cannot be written (an error not marked retryable): RocksDB stops writes
  // for good and rates the error unrecoverable; DB::Resume() can't help, a reopen does.
  fs_->fail = true;
  EXPECT_FALSE(client->Put("x", "not acknowledged").ok());
  reopening.Wait();
  const std::string note = Note();
  EXPECT_EQ(0u, note.find("DEGRADED: rocksdb: background error")) << note;
  EXPECT_NE(std::string::npos, note.find("reopening the database")) << note;
  // During the reopen: writes and reads refused with a retriable status that says why.
  Status put = client->Put("b", "2");
  EXPECT_NE(std::string::npos, put.ToString().find("writes refused")) << put.ToString();
  std::string value;
  Status get = client->Get("k1", &value);
  EXPECT_NE(std::string::npos, get.ToString().find("reopening")) << get.ToString();

  fs_->fail = false;  // the disk is fine again
  go_on.CountDown();
  ASSERT_TRUE(WaitForCondition([&] { return Note().empty(); })) << Note();
  EXPECT_TRUE(server_->base()->Health().ok());
  EXPECT_EQ(1, server_->db()->reopens());
  // Writes resume, and every acknowledged write is there.
  ASSERT_TRUE(client->Put("b", "2").ok());
  for (int i = 0; i < kAcknowledged; i++) {
    ASSERT_TRUE(client->Get(KeyOf("k", i), &value).ok()) << KeyOf("k", i);
    EXPECT_EQ("v" + std::to_string(i), value);
  }
  ASSERT_TRUE(client->Get("b", &value).ok());
  EXPECT_EQ("2", value);
}

// A reopen that fails (the fault is still there) reports the server failed and is retried until
// the database opens.
TEST_F(KvHealthTest, FailedReopenIsRetriedUntilTheDatabaseOpens) {
  StartFailable();
  std::atomic<int> attempts{0};
  CountDownLatch second_attempt(1);
  fs_->on_lock = [&] {
    // The first attempt cannot take the database's lock (as after a lost mount); later ones can.
    if (attempts++ == 0) {
      fs_->fail_lock = true;
    } else {
      fs_->fail_lock = false;
      second_attempt.CountDown();
    }
  };
  std::unique_ptr<KvClient> client = NewClient();
  ASSERT_TRUE(client->Put("a", "1").ok());
  fs_->fail = true;
  EXPECT_FALSE(client->Put("x", "not acknowledged").ok());
  fs_->fail = false;
  second_attempt.Wait();
  ASSERT_TRUE(WaitForCondition([&] { return Note().empty(); })) << Note();
  EXPECT_GE(attempts.load(), 2);
  EXPECT_EQ(1, server_->db()->reopens());
  std::string value;
  ASSERT_TRUE(client->Get("a", &value).ok());
  EXPECT_EQ("1", value);
  EXPECT_TRUE(client->Put("c", "3").ok());
}

// A transient error (marked retryable): RocksDB keeps accepting writes and recovers by itself
// (KvDbHealth's DB::Resume() runs meanwhile too); the server says degraded until then.
TEST_F(KvHealthTest, TransientFlushErrorIsDegradedUntilRocksDbRecovers) {
  fs_->retryable = true;
  StartFailable();
  std::unique_ptr<KvClient> client = NewClient();
  ASSERT_TRUE(client->Put("a", "1").ok());
  fs_->fail = true;  // table files cannot be created, but the error says it may pass
  {
    auto db = server_->db()->Use();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    EXPECT_FALSE(db.value()->Flush(rocksdb::FlushOptions()).ok());
  }
  ASSERT_TRUE(WaitForCondition([&] { return !Note().empty(); }));
  EXPECT_EQ(0u, Note().find("DEGRADED: rocksdb: background error")) << Note();
  EXPECT_TRUE(server_->base()->Health().ok()) << "degraded still serves";
  fs_->fail = false;
  ASSERT_TRUE(WaitForCondition([&] { return Note().empty(); })) << Note();
  EXPECT_TRUE(client->Put("b", "2").ok());
}

TEST_F(KvTest, ManyClientThreadsThenRestartReadsEverythingBack) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = NewClient();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 250;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      const std::string prefix = "t" + std::to_string(t) + "-";
      for (int i = 0; i < kPerThread; i++) {
        if (!client->Put(KeyOf(prefix, i), "value-" + KeyOf(prefix, i)).ok()) failures++;
        std::string v;
        if (!client->Get(KeyOf(prefix, i), &v).ok() || v != "value-" + KeyOf(prefix, i)) {
          failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(0, failures.load());
  std::vector<std::pair<std::string, std::string>> pairs;
  ASSERT_TRUE(client->Scan("", "", 0, &pairs).ok());
  EXPECT_EQ(static_cast<size_t>(kThreads * kPerThread), pairs.size());

  // Restart on the same directory: nothing is lost.
  server_->Shutdown();
  server_.reset();
  ASSERT_NO_FATAL_FAILURE(StartServer());
  client = NewClient();
  for (int t = 0; t < kThreads; t++) {
    const std::string prefix = "t" + std::to_string(t) + "-";
    for (int i = 0; i < kPerThread; i++) {
      std::string v;
      ASSERT_TRUE(client->Get(KeyOf(prefix, i), &v).ok()) << KeyOf(prefix, i);
      ASSERT_EQ("value-" + KeyOf(prefix, i), v);
    }
  }
  ASSERT_TRUE(client->Scan("", "", 0, &pairs).ok());
  EXPECT_EQ(static_cast<size_t>(kThreads * kPerThread), pairs.size());
}

TEST_F(KvTest, LargeValuesTravelAsSidecarsBothWays) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = NewClient();
  std::string big(256 * 1024, '\0');
  for (size_t i = 0; i < big.size(); i++) big[i] = static_cast<char>(i * 7 + i / 251);
  ASSERT_TRUE(client->Put("big", big).ok());
  ASSERT_TRUE(client->Put("small", "tiny").ok());
  std::string v;
  ASSERT_TRUE(client->Get("big", &v).ok());
  EXPECT_TRUE(v == big);
  // The service's own counters, as /metrics shows them.
  auto count = [this](const MetricPrototype& m) {
    return server_->base()
        ->metric_registry()
        ->FindOrCreateEntity("kv_service", "kv")
        ->FindOrCreateCounter(&m)
        ->value();
  };
  EXPECT_EQ(1, count(METRIC_kv_values_received_as_sidecars_total));
  EXPECT_EQ(1, count(METRIC_kv_values_sent_as_sidecars_total));

  std::vector<std::pair<std::string, std::string>> pairs;
  ASSERT_TRUE(client->Scan("", "", 0, &pairs).ok());
  ASSERT_EQ(2u, pairs.size());
  EXPECT_TRUE(pairs[0].second == big);
  EXPECT_EQ("tiny", pairs[1].second);
  EXPECT_EQ(2, count(METRIC_kv_values_sent_as_sidecars_total));

  KvBatch batch;
  batch.Put("big2", big);
  batch.Put("big3", big.substr(1000));
  ASSERT_TRUE(client->Batch(batch).ok());
  EXPECT_EQ(3, count(METRIC_kv_values_received_as_sidecars_total));
  ASSERT_TRUE(client->Get("big3", &v).ok());
  EXPECT_TRUE(v == big.substr(1000));
}

// One worker held at a gate and a queue of one call: the client's call is refused as too busy
// until the gate opens, and the client retries until it succeeds.
TEST_F(KvTest, ClientRetriesTooBusyWithinItsDeadline) {
  KvServerOptions opts = Options();
  opts.base.messenger.num_workers = 1;
  opts.base.messenger.service_queue_length = 1;
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  server_->service()->set_handler_hook([this] { gate_.Pass(); });

  // Call 1 holds the worker; call 2 fills the queue. Its deadline (100 ms) is earlier than any
  // of the client's below, so the full queue refuses the client's calls, not call 2 (which
  // expires in the queue).
  KvServiceProxy proxy(client_messenger_, server_->rpc_address());
  PutRequestPB req;
  req.set_key("held");
  req.set_value("x");
  PutResponsePB resp1, resp2;
  rpc::RpcController ctl1, ctl2;
  ctl1.set_timeout(MonoDelta::FromSeconds(60));
  ctl2.set_timeout(MonoDelta::FromMilliseconds(100));
  CountDownLatch done1(1), done2(1);
  proxy.PutAsync(req, &resp1, &ctl1, [&] { done1.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  proxy.PutAsync(req, &resp2, &ctl2, [&] { done2.CountDown(); });
  rpc::ServicePool* pool = rpc::MessengerInternals::service_pool(*server_->base()->messenger());
  rpc::MessengerMetrics* metrics = rpc::MessengerInternals::metrics(*server_->base()->messenger());
  ASSERT_TRUE(WaitForCondition([&] { return pool->queue_size() == 1; }));

  // A deadline that passes while the server is busy: the client gives up in time.
  auto client = NewClient();
  Status s = client->Put("k", "v", MonoTime::Now() + MonoDelta::FromMilliseconds(200));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();

  Status retried;
  std::thread writer(
      [&] { retried = client->Put("k", "v", MonoTime::Now() + MonoDelta::FromSeconds(120)); });
  const uint64_t rejected_before = static_cast<uint64_t>(metrics->service_queue_overflows->value());
  ASSERT_TRUE(WaitForCondition([&] {
    return static_cast<uint64_t>(metrics->service_queue_overflows->value()) >= rejected_before + 3;
  }));
  // Call 2 must have expired before the worker frees up: the client gave up on it at its
  // deadline, so the server finds it expired in the queue. (Opening the gate sooner let a fast
  // machine run call 2 inside its 100 ms: the client above gives up early when its next
  // backoff would overrun its deadline, so less than 100 ms may have passed by now.)
  ASSERT_TRUE(done2.WaitFor(MonoDelta::FromSeconds(60)));
  gate_.Open();
  writer.join();
  EXPECT_TRUE(retried.ok()) << retried.ToString();
  EXPECT_GE(client->retries(), 3u);
  done1.Wait();
  EXPECT_TRUE(ctl1.status().ok());
  EXPECT_TRUE(ctl2.status().IsTimedOut()) << ctl2.status().ToString();  // expired
  // ... and the server answered it without running the handler.
  EXPECT_TRUE(WaitForCondition([&] { return metrics->calls_expired_in_queue->value() >= 1; }));
  std::string v;
  ASSERT_TRUE(client->Get("k", &v).ok());
  EXPECT_EQ("v", v);
}

// Every call sent before the drain gets a real answer (no connection failure), and so does a
// call arriving during it (refused, retriable).
TEST_F(KvTest, GracefulDrainAnswersEveryCall) {
  constexpr int kCalls = 40;
  KvServerOptions opts = Options();
  opts.base.messenger.num_workers = 2;
  opts.base.messenger.service_queue_length = kCalls;
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  server_->service()->set_handler_hook([this] { gate_.Pass(); });

  KvServiceProxy proxy(client_messenger_, server_->rpc_address());
  std::vector<std::unique_ptr<rpc::RpcController>> ctls;
  std::vector<std::unique_ptr<PutResponsePB>> resps;
  std::atomic<int> callbacks{0};
  for (int i = 0; i < kCalls; i++) {
    PutRequestPB req;
    req.set_key(KeyOf("drain", i));
    req.set_value("v");
    ctls.push_back(std::make_unique<rpc::RpcController>());
    ctls.back()->set_timeout(MonoDelta::FromSeconds(60));
    resps.push_back(std::make_unique<PutResponsePB>());
    proxy.PutAsync(req, resps.back().get(), ctls.back().get(), [&] { callbacks++; });
  }
  // Two calls run (held at the gate), the rest wait in the queue.
  ASSERT_TRUE(gate_.WaitForEntered(2));
  rpc::ServicePool* pool = rpc::MessengerInternals::service_pool(*server_->base()->messenger());
  ASSERT_TRUE(WaitForCondition([&] { return pool->queue_size() == kCalls - 2; }));

  std::thread stopper([&] { server_->Shutdown(); });
  ASSERT_TRUE(WaitForCondition([&] { return !server_->base()->Health().ok(); }));
  // During the drain a new call on the open connection is refused with a retriable answer.
  rpc::RpcController late_ctl;
  late_ctl.set_timeout(MonoDelta::FromSeconds(60));
  PutRequestPB late;
  late.set_key("late");
  late.set_value("v");
  PutResponsePB late_resp;
  // The listener may still be closing: wait until the drain refuses calls, then send.
  Status late_status = proxy.Put(late, &late_resp, &late_ctl);
  EXPECT_FALSE(late_status.ok());
  EXPECT_TRUE(late_ctl.IsRetriable()) << late_status.ToString();

  gate_.Open();
  stopper.join();
  ASSERT_TRUE(WaitForCondition([&] { return callbacks.load() == kCalls; }));
  for (int i = 0; i < kCalls; i++) {
    EXPECT_TRUE(ctls[i]->status().ok()) << i << ": " << ctls[i]->status().ToString();
  }
  // Everything acknowledged is there after a restart.
  server_.reset();
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = NewClient();
  for (int i = 0; i < kCalls; i++) {
    std::string v;
    EXPECT_TRUE(client->Get(KeyOf("drain", i), &v).ok()) << i;
  }
}

// A real kv-server process gets SIGTERM while a client writes: every write it acknowledged is
// there after a restart on the same directory.
TEST_F(KvTest, SigtermDuringLoadLosesNoAcknowledgedWrite) {
  const std::string port_file = data_dir_ + "/port";
  const std::string db_dir = data_dir_ + "/db";
  std::vector<std::string> args = {
      KV_SERVER_PATH,         "--rpc_bind=127.0.0.1:0",   "--webserver_bind=127.0.0.1:0",
      "--data_dir=" + db_dir, "--port_file=" + port_file, "--shutdown_timeout_ms=20000"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(0, posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ));
  bool reaped = false;
  int wstatus = 0;
  auto reap = [&](MonoDelta timeout) {
    return WaitForCondition(
        [&] {
          if (!reaped && waitpid(pid, &wstatus, WNOHANG) == pid) reaped = true;
          return reaped;
        },
        timeout);
  };
  // Kills the child if the test stops early.
  struct Killer {
    std::function<void()> fn;
    ~Killer() { fn(); }
  } killer{[&] {
    if (!reaped) {
      kill(pid, SIGKILL);
      reap(MonoDelta::FromSeconds(30));
    }
  }};

  uint16_t port = 0;
  ASSERT_TRUE(WaitForCondition([&] {
    std::ifstream in(port_file);
    unsigned p = 0;
    if (in >> p) port = static_cast<uint16_t>(p);
    return port != 0 || (!reaped && waitpid(pid, &wstatus, WNOHANG) == pid && (reaped = true));
  }));
  ASSERT_NE(0, port) << "kv-server exited early";

  KvClientOptions copts;
  copts.max_backoff = MonoDelta::FromMilliseconds(20);
  KvClient client(client_messenger_, Sockaddr::Loopback(port), copts);
  Mutex mu;
  std::vector<std::string> acked;  // guarded by mu
  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    // Bounded: stops at the first failure (the server went away) or after 100000 writes.
    for (int i = 0; i < 100000; i++) {
      const std::string key = KeyOf("sig", i);
      Status s = client.Put(key, "value-" + key, MonoTime::Now() + MonoDelta::FromSeconds(2));
      if (!s.ok()) break;
      MutexLock l(mu);
      acked.push_back(key);
    }
    writer_done = true;
  });
  ASSERT_TRUE(WaitForCondition([&] {
    MutexLock l(mu);
    return acked.size() >= 300 || writer_done.load();
  }));
  ASSERT_EQ(0, kill(pid, SIGTERM));
  ASSERT_TRUE(reap(MonoDelta::FromSeconds(60))) << "kv-server did not exit after SIGTERM";
  writer.join();
  ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
  EXPECT_EQ(0, WEXITSTATUS(wstatus));

  std::vector<std::string> keys;
  {
    MutexLock l(mu);
    keys = acked;
  }
  ASSERT_GE(keys.size(), 300u);
  KvServerOptions opts = Options();
  opts.base.data_dir = db_dir;
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  auto reader = NewClient();
  for (const std::string& key : keys) {
    std::string v;
    ASSERT_TRUE(reader->Get(key, &v).ok()) << "acknowledged write lost: " << key;
    ASSERT_EQ("value-" + key, v);
  }
}

}  // namespace
}  // namespace rrpc::kv
