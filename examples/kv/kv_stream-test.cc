// Tests of kv's streams (docs/kv-streams.md): ScanStream, Load and CopyRangeTo between real
// KvServers on loopback; flow control checked by counting the bytes a sender read ahead of its
// reader, and by the process's RSS across a 200 MB scan.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_client.h"
#include "kv/kv_server.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/messenger.h"

namespace rrpc::kv {
namespace {

using rpc::HandlerGate;
using rpc::WaitForCondition;

constexpr size_t kWindow = 1 << 20;  // both sides' stream receive windows
constexpr size_t kMessageBytes = 64 * 1024;

std::string KeyOf(int i) {
  char buf[32];
  snprintf(buf, sizeof(buf), "key%08d", i);
  return buf;
}
// A value of `size` bytes that names its key's index (checked by readers).
std::string ValueOf(int i, size_t size) {
  std::string v(size, static_cast<char>('a' + i % 26));
  const std::string tag = std::to_string(i) + ":";
  memcpy(v.data(), tag.data(), std::min(tag.size(), size));
  return v;
}
bool IsValueOf(int i, size_t size, std::string_view v) {
  const std::string tag = std::to_string(i) + ":";
  return v.size() == size && v.substr(0, std::min(tag.size(), size)) == tag.substr(0, size) &&
         v.back() == (size > tag.size() ? static_cast<char>('a' + i % 26) : v.back());
}

// This process's resident memory, from /proc/self/status.
int64_t RssKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

class KvStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rpc::MessengerBuilder builder("kv-stream-test-client");
    builder.mutable_options()->stream_window = kWindow;
    auto built = builder.Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    client_messenger_ = std::move(built).value();
  }
  void TearDown() override {
    gate_.Open();  // never leave a pump thread blocked
    if (client_messenger_) client_messenger_->Shutdown();
    for (auto& s : servers_) s->Shutdown();
    servers_.clear();
    for (const std::string& d : dirs_) std::filesystem::remove_all(d);
  }

  KvServer* StartServer() {
    char tmpl[] = "/tmp/kv-stream-test-XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dirs_.push_back(tmpl);
    KvServerOptions opts;
    opts.base.name = "kv-stream-test-server";
    opts.base.rpc_bind_address = "127.0.0.1:0";
    opts.base.data_dir = tmpl;
    opts.base.messenger.stream_window = kWindow;
    opts.service.stream_message_bytes = kMessageBytes;
    servers_.push_back(std::make_unique<KvServer>(std::move(opts)));
    Status s = servers_.back()->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return servers_.back().get();
  }
  std::unique_ptr<KvClient> NewClient(KvServer* server) {
    KvClientOptions opts;
    opts.stream_receive_window = kWindow;
    opts.stream_message_bytes = kMessageBytes;
    opts.default_timeout = MonoDelta::FromSeconds(120);
    return std::make_unique<KvClient>(client_messenger_, server->rpc_address(), opts);
  }
  // Loads pairs [0, n) with values of `value_size` through one Load stream.
  static void LoadPairs(KvClient* client, int n, size_t value_size) {
    int i = 0;
    LoadResponsePB loaded;
    Status s = client->Load(
        [&](std::string* key, std::string* value) {
          if (i == n) return false;
          *key = KeyOf(i);
          *value = ValueOf(i, value_size);
          i++;
          return true;
        },
        &loaded);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(static_cast<uint64_t>(n), loaded.pairs());
    EXPECT_EQ(static_cast<uint64_t>(n) * (KeyOf(0).size() + value_size), loaded.bytes());
  }

  HandlerGate gate_;  // outlives the servers, so no pump thread waits on a destroyed gate
  std::shared_ptr<rpc::Messenger> client_messenger_;
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<KvServer>> servers_;
};

// Small values inline, large ones as sidecars; the range's bounds and the limit hold.
TEST_F(KvStreamTest, ScanStreamSendsTheRangeInOrderWithLargeValuesAsSidecars) {
  KvServer* server = StartServer();
  auto client = NewClient(server);
  ASSERT_NO_FATAL_FAILURE(LoadPairs(client.get(), 3000, 100));
  for (int i = 0; i < 3000; i += 100) {
    ASSERT_TRUE(client->Put(KeyOf(i), ValueOf(i, 10000)).ok());
  }
  int next = 10;
  Status s =
      client->ScanStream(KeyOf(10), KeyOf(2990), 0, [&](std::string_view k, std::string_view v) {
        EXPECT_EQ(KeyOf(next), k);
        EXPECT_TRUE(IsValueOf(next, next % 100 == 0 ? 10000 : 100, v)) << next;
        next++;
        return true;
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(2990, next);

  int seen = 0;
  s = client->ScanStream("", "", 1234, [&](std::string_view k, std::string_view) {
    EXPECT_EQ(KeyOf(seen), k);
    seen++;
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1234, seen);
  EXPECT_TRUE(WaitForCondition([&] { return server->service()->stream_stats().open == 0; }));
}

// A reader that stops early cancels the stream: the server's sender ends.
TEST_F(KvStreamTest, ScanStreamEndsOnTheServerWhenTheReaderStops) {
  KvServer* server = StartServer();
  auto client = NewClient(server);
  ASSERT_NO_FATAL_FAILURE(LoadPairs(client.get(), 2000, 4000));
  int seen = 0;
  Status s = client->ScanStream("", "", 0,
                                [&](std::string_view, std::string_view) { return ++seen < 10; });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(10, seen);
  EXPECT_TRUE(WaitForCondition([&] { return server->service()->stream_stats().open == 0; }));
  EXPECT_LT(server->service()->stream_stats().bytes_read.load(), 2000u * 4000);
}

// 200 MB of values scanned by a reader slower than the server: at each checkpoint the reader
// waits until the server's sender stalls for room, then checks that the server read at most one
// window (plus the message it holds and the one being read) ahead of what the reader consumed.
// Server and client share this process: its RSS must not grow by anywhere near 200 MB.
TEST_F(KvStreamTest, ScanOfALargeRangeHoldsBoundedMemoryBehindASlowReader) {
  constexpr int kPairs = 3200;
  constexpr size_t kValue = 64 * 1024;  // 3200 x 64 KiB = 200 MiB
  KvServer* server = StartServer();
  auto client = NewClient(server);
  ASSERT_NO_FATAL_FAILURE(LoadPairs(client.get(), kPairs, kValue));
  {
    Result<KvDb::Ref> db = server->db()->Use();
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Flush(rocksdb::FlushOptions()).ok());  // the scan reads files, not memtables
  }
  const KvStreamStats& stats = server->service()->stream_stats();
  const int64_t rss_before = RssKb();
  int64_t rss_max = rss_before;
  uint64_t consumed = 0;
  uint64_t max_ahead = 0;
  int next = 0;
  int checkpoints = 0;
  Status s = client->ScanStream("", "", 0, [&](std::string_view k, std::string_view v) {
    EXPECT_EQ(KeyOf(next), k);
    EXPECT_TRUE(IsValueOf(next, kValue, v)) << next;
    next++;
    consumed += k.size() + v.size();
    if (next % 64 == 0 && next + 64 < kPairs) {  // every 4 MiB, while more than a window is left
      checkpoints++;
      EXPECT_TRUE(WaitForCondition([&] { return stats.senders_waiting.load() == 1; }));
      max_ahead = std::max<uint64_t>(max_ahead, stats.bytes_read.load() - consumed);
      rss_max = std::max(rss_max, RssKb());
    }
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(kPairs, next);
  EXPECT_EQ(48, checkpoints);
  // The window, the message the server holds for lack of room, the message being read.
  EXPECT_LE(max_ahead, kWindow + 2 * (kMessageBytes + kValue + 1024));
  [[maybe_unused]] const int64_t growth_kb = rss_max - rss_before;  // checked without sanitizers
  printf("scan of %d MiB: server read at most %llu KiB ahead of the reader; RSS %lld -> %lld KiB\n",
         static_cast<int>(kPairs * kValue >> 20), static_cast<unsigned long long>(max_ahead >> 10),
         static_cast<long long>(rss_before), static_cast<long long>(rss_max));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Under a sanitizer RSS measures the sanitizer (ASAN's quarantine keeps freed blocks): the
  // read-ahead bound above is what holds there.
  EXPECT_LT(growth_kb, 32 * 1024) << "RSS grew " << growth_kb << " KiB over a 200 MiB scan";
#endif
}

// CopyRangeTo between two servers. The target's writes are held at its second message: the
// source must stall within the target's window, then finish once the target goes on.
TEST_F(KvStreamTest, CopyRangeToIsFlowControlledByTheTarget) {
  constexpr int kPairs = 2000;
  constexpr size_t kValue = 4000;  // 8 MB: many windows
  KvServer* source = StartServer();
  KvServer* target = StartServer();
  auto source_client = NewClient(source);
  auto target_client = NewClient(target);
  ASSERT_NO_FATAL_FAILURE(LoadPairs(source_client.get(), kPairs, kValue));
  ASSERT_TRUE(source_client->Put("zzz-outside", "x").ok());
  std::atomic<int> applied{0};
  target->service()->set_load_hook([&] {
    if (++applied == 2) gate_.Pass();
  });

  Status copy_status;
  CopyRangeResponsePB copied;
  const std::string target_addr = target->rpc_address().ToString();
  std::thread copier(
      [&] { copy_status = source_client->CopyRange(KeyOf(0), "zzz", target_addr, &copied); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  const KvStreamStats& stats = source->service()->stream_stats();
  ASSERT_TRUE(WaitForCondition([&] { return stats.senders_waiting.load() == 1; }));
  // The target applied one message and holds one; the rest of what the source read is at most
  // the target's window and the message the source keeps.
  EXPECT_LE(stats.bytes_read.load(), kWindow + 3 * (kMessageBytes + kValue + 1024));
  gate_.Open();
  copier.join();
  ASSERT_TRUE(copy_status.ok()) << copy_status.ToString();
  EXPECT_EQ(static_cast<uint64_t>(kPairs), copied.pairs());
  EXPECT_EQ(static_cast<uint64_t>(kPairs) * (KeyOf(0).size() + kValue), copied.bytes());
  EXPECT_GT(stats.waits_for_room.load(), 0u);

  int next = 0;
  Status s = target_client->ScanStream("", "", 0, [&](std::string_view k, std::string_view v) {
    EXPECT_EQ(KeyOf(next), k);
    EXPECT_TRUE(IsValueOf(next, kValue, v)) << next;
    next++;
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(kPairs, next);  // and not the key outside the range
}

// A target that cannot be reached fails the copy with the reason; the source keeps serving.
TEST_F(KvStreamTest, CopyRangeToAnUnreachableTargetFails) {
  KvServer* source = StartServer();
  auto client = NewClient(source);
  ASSERT_NO_FATAL_FAILURE(LoadPairs(client.get(), 10, 10));
  Status s = client->CopyRange("", "", "127.0.0.1:1", nullptr,
                               MonoTime::Now() + MonoDelta::FromSeconds(20));
  EXPECT_FALSE(s.ok());
  printf("copy to 127.0.0.1:1: %s\n", s.ToString().c_str());
  s = client->CopyRange("", "", "not an address");
  EXPECT_FALSE(s.ok());
  std::string v;
  EXPECT_TRUE(client->Get(KeyOf(3), &v).ok());
  EXPECT_TRUE(WaitForCondition([&] { return source->service()->stream_stats().open == 0; }));
}

// A server that shuts down under a scan whose reader stalled ends the stream before its drain
// (which would otherwise wait for it): the reader gets the messages already sent, then a
// retriable "shutting down", and the server's sender is gone.
TEST_F(KvStreamTest, ShutdownEndsAScanWhoseReaderStalled) {
  KvServer* server = StartServer();
  auto client = NewClient(server);
  ASSERT_NO_FATAL_FAILURE(LoadPairs(client.get(), 2000, 4000));
  KvServiceProxy proxy(client_messenger_, server->rpc_address());
  rpc::StreamOptions opts;
  opts.receive_window = kWindow;
  auto stream = proxy.ScanStream(ScanStreamRequestPB(), opts);
  const KvStreamStats& stats = server->service()->stream_stats();
  ASSERT_TRUE(WaitForCondition([&] { return stats.senders_waiting.load() == 1; }));
  const MonoTime t0 = MonoTime::Now();
  server->Shutdown();
  printf("shutdown with a stalled scan took %.3f s\n", (MonoTime::Now() - t0).ToSeconds());
  EXPECT_EQ(0, stats.open.load());
  KvChunkPB chunk;
  std::vector<BlockSlice> sidecars;
  int messages = 0;
  Result<bool> got = true;
  while (got.ok() && *got) {
    got = stream.Read(&chunk, &sidecars);
    if (got.ok() && *got) messages++;
  }
  const Status end = got.ok() ? stream.Finish() : got.status();
  EXPECT_NE(std::string::npos, end.ToString().find("shutting down")) << end.ToString();
  EXPECT_LE(static_cast<size_t>(messages) * kMessageBytes, kWindow + kMessageBytes);
}

// A message that names a sidecar it does not carry fails the Load with the reason.
TEST_F(KvStreamTest, LoadRefusesAMessageWithAMissingSidecar) {
  KvServer* server = StartServer();
  KvServiceProxy proxy(client_messenger_, server->rpc_address());
  auto stream = proxy.Load();
  KvChunkPB chunk;
  KvPairPB* pair = chunk.add_pairs();
  pair->set_key("k");
  pair->set_value_sidecar(3);
  ASSERT_TRUE(stream.Write(chunk).ok());
  stream.CloseWrites();
  Status s = stream.Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("value_sidecar out of range")) << s.ToString();
}

}  // namespace
}  // namespace rrpc::kv
