// kv-soak: a long mixed load on the kv service with faults injected on both sides, checking
// what must hold however the faults fall (build-support/soak.sh runs it):
//   - every call is answered exactly once (its callback runs once: success, refusal, timeout or
//     network error), and none is left unanswered at the end;
//   - no acknowledged write is lost: each key is written by one loop at a time, so its value can
//     only be its last acknowledged write or a later write whose answer was lost; every Get during
//     the run and a final read of every key after the faults stop must see one of those;
//   - memory stays flat: RSS after the warm-up minute against RSS at the end;
//   - increments are exactly once (docs/exactly-once.md): a fifth of the calls add to a counter
//     through the tracked Increment, retried with the same request id when their outcome is lost
//     (--response_drop of the responses the client reads are dropped). Each increment of a
//     counter carries its own identity in its delta: the i-th adds 3^i (a counter key holds 39,
//     then the next generation's key takes over), so the counter's base-3 digit i is the number
//     of times increment i was applied. Every answer and a final read of every counter are
//     decoded: an acknowledged increment must be there once, one that ended in an error at most
//     once, one never sent not at all; a digit of 2 or more is a duplicate, counted
//     (duplicates=N), not bounded. The server's replay count shows retries of increments that
//     had already run, and the tracker's memory stays flat.
// Server and client run in this process on loopback, the server on a RocksDB in a temporary
// directory. Faults (rpc/core/fault_injection.h): delayed reads and writes, dropped frames,
// connections cut mid-frame, failed accepts and connects, slow handlers.
// Prints "SOAK ..." lines; exits 1 if a check failed.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/kv.rrpc.h"
#include "kv/kv_db.h"
#include "kv/kv_service.h"
#include "rpc/core/fault_injection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/result_tracker.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/command_line.h"
#include "rrpc/util/monotime.h"
#include "util/countdown_latch.h"

DEFINE_double(minutes, 1, "How long the load runs");
DEFINE_int32(loops, 32, "Closed loops of calls in flight (each owns its keys)");
DEFINE_int32(keys_per_loop, 64, "Keys each loop writes and reads");
DEFINE_int32(call_timeout_ms, 2000, "Each call's deadline");
DEFINE_double(fault_scale, 1, "Multiplies every fault probability (0: no faults)");
DEFINE_string(faults, "all",
              "Faults to inject, comma-separated: delay_read, drop_read, cut_read, delay_write, "
              "cut_write, fail_accept, fail_connect, slow_handler; or all");
DEFINE_double(increments, 0.2, "Share of calls that are tracked Increments of a counter");
DEFINE_double(response_drop, 0.01,
              "With drop_read on: probability that the client drops a response it reads");
DEFINE_int32(increment_attempt_ms, 300, "Each Increment attempt's timeout (retried after)");
DEFINE_double(warmup_fraction, 0.2,
              "Share of the run (at most a minute) before the RSS baseline is taken");
DEFINE_int32(counters_per_loop, 8, "Counters each loop increments");
DEFINE_bool(check_rss, true,
            "Check that RSS stays flat (off under sanitizers: ASAN's quarantine and TSAN's shadow "
            "memory keep freed memory resident, so RSS measures the sanitizer)");
DEFINE_string(data_dir, "", "RocksDB directory (default: a new one under /tmp, removed after)");

namespace rrpc::kv {
namespace {

using rpc::FaultInjector;
using rpc::FaultSpec;

FaultSpec SoakFaults(double scale) {
  const std::string wanted = "," + FLAGS_faults + ",";
  auto on = [&](const char* name) {
    return FLAGS_faults == "all" || wanted.find("," + std::string(name) + ",") != std::string::npos
               ? scale
               : 0.0;
  };
  FaultSpec f;
  f.delay_read = 0.02 * on("delay_read");
  f.read_delay = MonoDelta::FromMilliseconds(3);
  f.delay_write = 0.02 * on("delay_write");
  f.write_delay = MonoDelta::FromMilliseconds(3);
  f.drop_read = 0.001 * on("drop_read");
  f.cut_write = 0.001 * on("cut_write");
  f.cut_read = 0.0005 * on("cut_read");
  f.fail_accept = 0.02 * on("fail_accept");
  f.fail_connect = 0.02 * on("fail_connect");
  f.slow_handler = 0.01 * on("slow_handler");
  f.handler_delay = MonoDelta::FromMilliseconds(5);
  return f;
}

// A Get's value: inline, or (large values) the response sidecar it names.
std::string GetValue(const GetResponsePB& resp, const rpc::RpcController& ctl) {
  if (!resp.has_value_sidecar()) return resp.value();
  const size_t i = static_cast<size_t>(resp.value_sidecar());
  return i < ctl.num_inbound_sidecars() ? ctl.inbound_sidecar(i).ToString() : std::string();
}

int64_t RssKb() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// What a key may hold: its last acknowledged value, or the value of a write whose answer never
// came (timed out, connection cut) and that may still be applied: such a write can even land
// after a later acknowledged one (it waited in a queue or a slowed handler while the later one
// ran on another worker). A write can no longer land once its deadline has passed on the server
// (a queued call past its deadline is answered TIMED_OUT without running), so unanswered writes
// older than the call timeout plus a margin are forgotten.
struct KeyState {
  struct Pending {
    std::string value;
    MonoTime sent;
  };
  std::string acked;  // empty: never acknowledged
  std::vector<Pending> maybe;
  bool Allows(const std::string& v, bool found) const {
    if (!found) return acked.empty();
    if (v == acked) return true;
    for (const Pending& m : maybe) {
      if (v == m.value) return true;
    }
    return false;
  }
  void Forget(MonoTime now) {
    const MonoDelta horizon = MonoDelta::FromMilliseconds(FLAGS_call_timeout_ms + 10000);
    size_t keep = 0;
    for (size_t i = 0; i < maybe.size(); i++) {
      if (now - maybe[i].sent >= horizon) continue;
      if (keep != i) maybe[keep] = std::move(maybe[i]);  // (a self-move may empty a string)
      keep++;
    }
    maybe.resize(keep);
  }
};

struct Totals {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> answers{0};
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> too_busy{0};
  std::atomic<int64_t> timed_out{0};
  std::atomic<int64_t> network_errors{0};
  std::atomic<int64_t> other_errors{0};
  std::atomic<int64_t> acked_writes{0};
  std::atomic<int64_t> gets_checked{0};
  std::atomic<int64_t> violations{0};
  std::atomic<int64_t> increments_acked{0};
  std::atomic<int64_t> increments_failed{0};
  std::atomic<int64_t> increment_retries{0};
  std::atomic<int64_t> increment_duplicates{0};  // seen in answers during the run
};

// The increments of one counter key (a generation): the i-th adds 3^i, so that the value's
// base-3 digit i counts the applications of increment i. kIncrementsPerKey fit an int64 even
// with every digit 2 (3^39 - 1 < 2^63).
constexpr int kIncrementsPerKey = 39;
struct CounterGeneration {
  // Per increment sent, in order: 'p' in flight, 'a' acknowledged, 'f' ended in an error
  // (applied once or not at all).
  std::string outcomes;
};
// What a counter value shows against the outcomes of its increments.
struct CounterCheck {
  int64_t duplicates = 0;  // extra applications of an increment (digit - 1 where digit > 1)
  int64_t missing = 0;     // acknowledged increments not applied
  int64_t phantom = 0;     // applications of increments never sent
  bool ok() const { return duplicates == 0 && missing == 0 && phantom == 0; }
};
int64_t IncrementDelta(int i) {
  int64_t d = 1;
  while (i-- > 0) d *= 3;
  return d;
}
CounterCheck CheckCounter(int64_t value, const std::string& outcomes) {
  CounterCheck c;
  if (value < 0) {
    c.phantom = 1;
    return c;
  }
  for (int i = 0; value > 0 || i < static_cast<int>(outcomes.size()); i++, value /= 3) {
    const int64_t digit = value % 3;
    const char o = i < static_cast<int>(outcomes.size()) ? outcomes[i] : 0;
    if (o == 0) {
      c.phantom += digit;
    } else {
      if (digit > 1) c.duplicates += digit - 1;
      if (o == 'a' && digit == 0) c.missing++;
    }
  }
  return c;
}
// A counter's generations (the last one takes new increments).
struct CounterState {
  std::vector<CounterGeneration> generations{1};
  int64_t acked = 0;
  int64_t failed = 0;
};

// One closed loop: one call in flight at a time, on its own keys, each call issued by the
// previous one's callback (client reactor thread). Owns its key states (only its callbacks touch
// them, one at a time).
class Loop {
 public:
  Loop(int id, KvServiceProxy* proxy, Totals* totals, std::atomic<bool>* stop, CountDownLatch* done)
      : id_(id), proxy_(proxy), totals_(totals), stop_(stop), done_(done), rng_(id * 7919 + 1) {
    keys_.resize(FLAGS_keys_per_loop);
    counters_.resize(FLAGS_counters_per_loop);
  }

  void Start() { Next(); }
  const std::vector<KeyState>& keys() const { return keys_; }
  std::string Key(int k) const { return "loop" + std::to_string(id_) + "-key" + std::to_string(k); }
  const std::vector<CounterState>& counters() const { return counters_; }
  std::string Counter(int c, size_t generation) const {
    return "loop" + std::to_string(id_) + "-ctr" + std::to_string(c) + "-g" +
           std::to_string(generation);
  }

 private:
  void Next() {
    if (stop_->load(std::memory_order_acquire)) {
      done_->CountDown();
      return;
    }
    key_ = static_cast<int>(rng_() % keys_.size());
    ctl_.Reset();
    ctl_.set_timeout(MonoDelta::FromMilliseconds(FLAGS_call_timeout_ms));
    answered_ = 0;
    totals_->calls++;
    if (std::uniform_real_distribution<double>(0, 1)(rng_) < FLAGS_increments) {
      counter_ = static_cast<int>(rng_() % counters_.size());
      CounterState& c = counters_[counter_];
      if (c.generations.back().outcomes.size() == kIncrementsPerKey) c.generations.emplace_back();
      std::string& outcomes = c.generations.back().outcomes;
      inc_.Clear();
      inc_.set_key(Counter(counter_, c.generations.size() - 1));
      inc_.set_delta(IncrementDelta(static_cast<int>(outcomes.size())));
      outcomes.push_back('p');
      rpc::RetryPolicy policy;
      policy.max_attempts = 100;  // bounded by the deadline
      policy.attempt_timeout = MonoDelta::FromMilliseconds(FLAGS_increment_attempt_ms);
      ctl_.set_retry_policy(policy);
      proxy_->IncrementAsync(inc_, &inc_resp_, &ctl_, [this] { IncrementDone(); });
      return;
    }
    if (rng_() % 10 < 6) {  // 60% of the rest writes
      put_.Clear();
      put_.set_key(Key(key_));
      // Mostly small values, some of 16 KiB (several reads and writes per frame).
      const size_t size = rng_() % 20 == 0 ? 16384 : 32;
      std::string value = "v" + std::to_string(++seq_) + "-" + Key(key_) + "-";
      value.resize(size, static_cast<char>('a' + seq_ % 26));
      put_.set_value(value);
      keys_[key_].maybe.push_back({value, MonoTime::Now()});  // may be applied from now on
      proxy_->PutAsync(put_, &put_resp_, &ctl_, [this] { PutDone(); });
    } else {
      get_.Clear();
      get_.set_key(Key(key_));
      proxy_->GetAsync(get_, &get_resp_, &ctl_, [this] { GetDone(); });
    }
  }

  // Counts the answer; false (and a violation) if this call was already answered.
  bool Answered() {
    if (++answered_ != 1) {
      fprintf(stderr, "SOAK violation: loop %d call answered %d times\n", id_, answered_);
      totals_->violations++;
      return false;
    }
    totals_->answers++;
    const Status& s = ctl_.status();
    if (s.ok()) {
      totals_->ok++;
    } else if (ctl_.error_response() != nullptr &&
               ctl_.error_response()->code() == rpc::ErrorStatusPB::ERROR_SERVER_TOO_BUSY) {
      totals_->too_busy++;
    } else if (s.IsTimedOut()) {
      totals_->timed_out++;
    } else if (s.IsNetworkError()) {
      totals_->network_errors++;
    } else {
      totals_->other_errors++;
    }
    return true;
  }

  void PutDone() {
    if (!Answered()) return;
    KeyState& k = keys_[key_];
    // The last pending write is this call's (one call in flight per loop).
    if (ctl_.status().ok()) {
      k.acked = put_.value();
      k.maybe.pop_back();
      totals_->acked_writes++;
    } else if (ctl_.error_response() != nullptr) {
      k.maybe.pop_back();  // the server answered with an error: not applied
    }
    k.Forget(MonoTime::Now());
    Next();
  }

  void IncrementDone() {
    if (!Answered()) return;
    CounterState& c = counters_[counter_];
    std::string& outcomes = c.generations.back().outcomes;
    totals_->increment_retries += ctl_.attempts() - 1;
    if (ctl_.status().ok()) {
      outcomes.back() = 'a';
      c.acked++;
      totals_->increments_acked++;
      // The answer holds every acknowledged increment once (this one included), none twice, and
      // none not sent.
      const CounterCheck check = CheckCounter(inc_resp_.value(), outcomes);
      if (!check.ok()) {
        fprintf(stderr,
                "SOAK violation: %s answered %lld: duplicates %lld missing %lld phantom %lld\n",
                Counter(counter_, c.generations.size() - 1).c_str(), (long long)inc_resp_.value(),
                (long long)check.duplicates, (long long)check.missing, (long long)check.phantom);
        totals_->increment_duplicates += check.duplicates;
        totals_->violations++;
      }
    } else {
      outcomes.back() = 'f';
      c.failed++;
      totals_->increments_failed++;
    }
    Next();
  }

  void GetDone() {
    if (!Answered()) return;
    if (ctl_.status().ok()) {
      const KeyState& k = keys_[key_];
      const std::string value = GetValue(get_resp_, ctl_);
      if (!k.Allows(value, get_resp_.found())) {
        fprintf(stderr,
                "SOAK violation: %s read '%.40s' (%zu bytes, found=%d), last acked '%.40s'\n",
                Key(key_).c_str(), value.c_str(), value.size(), get_resp_.found(), k.acked.c_str());
        totals_->violations++;
      }
      totals_->gets_checked++;
    }
    Next();
  }

  const int id_;
  KvServiceProxy* const proxy_;
  Totals* const totals_;
  std::atomic<bool>* const stop_;
  CountDownLatch* const done_;
  std::minstd_rand rng_;
  std::vector<KeyState> keys_;
  std::vector<CounterState> counters_;
  uint64_t seq_ = 0;
  // The call in flight.
  int key_ = 0;
  int answered_ = 0;
  rpc::RpcController ctl_;
  PutRequestPB put_;
  PutResponsePB put_resp_;
  GetRequestPB get_;
  GetResponsePB get_resp_;
  int counter_ = 0;
  IncrementRequestPB inc_;
  IncrementResponsePB inc_resp_;
};

void PrintFaults(const char* side, const rpc::FaultCounts& c) {
  printf(
      "SOAK faults side=%s delayed_reads=%llu dropped_reads=%llu cut_reads=%llu "
      "delayed_writes=%llu cut_writes=%llu failed_accepts=%llu failed_connects=%llu "
      "slowed_handlers=%llu total=%llu\n",
      side, (unsigned long long)c.delayed_reads, (unsigned long long)c.dropped_reads,
      (unsigned long long)c.cut_reads, (unsigned long long)c.delayed_writes,
      (unsigned long long)c.cut_writes, (unsigned long long)c.failed_accepts,
      (unsigned long long)c.failed_connects, (unsigned long long)c.slowed_handlers,
      (unsigned long long)c.total());
}

int Main() {
  std::string dir = FLAGS_data_dir;
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/kv-soak-XXXXXX";
    CHECK(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.write_buffer_size = 4 << 20;  // memtables flush often: RSS reflects rrpc, not them
  auto db = std::make_unique<KvDb>(dir, db_options);
  RRPC_CHECK_OK(db->Open());

  auto server_faults = std::make_shared<FaultInjector>(FaultSpec(), 11);
  auto client_faults = std::make_shared<FaultInjector>(FaultSpec(), 13);
  rpc::MessengerOptions server_options;
  server_options.name = "soak-server";
  server_options.num_workers = 4;
  MetricRegistry kv_metrics;  // the service's counters; outlives the server
  rpc::MessengerBuilder server_builder(server_options);
  rpc::MessengerInternals::SetFaultInjector(&server_builder, server_faults);
  std::shared_ptr<rpc::Messenger> server = server_builder.Build().value();
  RRPC_CHECK_OK(server->RegisterService(
      std::make_unique<KvService>(db.get(), KvServiceOptions(), &kv_metrics)));
  Sockaddr addr;
  RRPC_CHECK_OK(server->Listen(Sockaddr::Loopback(0), &addr));
  rpc::MessengerOptions client_options;
  client_options.name = "soak-client";
  rpc::MessengerBuilder client_builder(client_options);
  rpc::MessengerInternals::SetFaultInjector(&client_builder, client_faults);
  std::shared_ptr<rpc::Messenger> client = client_builder.Build().value();
  KvServiceProxy proxy(client, addr);

  const FaultSpec faults = SoakFaults(FLAGS_fault_scale);
  server_faults->set_spec(faults);
  FaultSpec client_spec = faults;
  if (faults.drop_read > 0) client_spec.drop_read = FLAGS_response_drop * FLAGS_fault_scale;
  client_faults->set_spec(client_spec);
  const rpc::ResultTracker* tracker = rpc::MessengerInternals::result_tracker(*server);

  Totals totals;
  std::atomic<bool> stop{false};
  CountDownLatch loops_done(FLAGS_loops);
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < FLAGS_loops; i++) {
    loops.push_back(std::make_unique<Loop>(i, &proxy, &totals, &stop, &loops_done));
  }
  const MonoTime start = MonoTime::Now();
  for (auto& l : loops) l->Start();

  // RSS: sampled every 5 s; the baseline is the first sample after a warm-up of a fifth of the
  // run (at most a minute): by then pools, caches and memtables have reached their working size.
  const double seconds = FLAGS_minutes * 60;
  const double warmup = std::min(60.0, seconds * FLAGS_warmup_fraction);
  int64_t rss_base = 0, rss_max = 0, rss_last = 0;
  size_t tracker_max = 0, tracker_last = 0;
  while (true) {
    const double elapsed = (MonoTime::Now() - start).ToSeconds();
    if (elapsed >= seconds) break;
    SleepFor(MonoDelta::FromSeconds(std::min(5.0, seconds - elapsed)));
    rss_last = RssKb();
    if (rss_base == 0 && (MonoTime::Now() - start).ToSeconds() >= warmup) rss_base = rss_last;
    if (rss_base != 0) rss_max = std::max(rss_max, rss_last);
    tracker_last = tracker->stats().bytes;
    tracker_max = std::max(tracker_max, tracker_last);
    printf("SOAK progress seconds=%.0f calls=%lld ok=%lld rss_kb=%lld tracker_bytes=%zu\n",
           (MonoTime::Now() - start).ToSeconds(), (long long)totals.calls.load(),
           (long long)totals.ok.load(), (long long)rss_last, tracker_last);
    fflush(stdout);
  }
  stop = true;
  // Every loop's last call ends by its deadline at the latest: none may be left unanswered.
  const bool drained = loops_done.WaitFor(MonoDelta::FromMilliseconds(FLAGS_call_timeout_ms) +
                                          MonoDelta::FromSeconds(30));
  server_faults->set_spec(FaultSpec());
  client_faults->set_spec(FaultSpec());
  // Writes still queued on the server run or expire within their deadline.
  SleepFor(MonoDelta::FromMilliseconds(FLAGS_call_timeout_ms) + MonoDelta::FromSeconds(1));

  // Every key, read back with the faults off.
  int64_t keys_verified = 0, lost = 0;
  for (auto& l : loops) {
    for (int k = 0; k < FLAGS_keys_per_loop; k++) {
      GetRequestPB req;
      req.set_key(l->Key(k));
      GetResponsePB resp;
      rpc::RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(30));
      Status s = proxy.Get(req, &resp, &ctl);
      if (!s.ok()) {
        fprintf(stderr, "SOAK final read of %s failed: %s\n", req.key().c_str(),
                s.ToString().c_str());
        lost++;
        continue;
      }
      const std::string value = GetValue(resp, ctl);
      if (!l->keys()[k].Allows(value, resp.found())) {
        fprintf(stderr, "SOAK lost write: %s holds '%.20s', last acked '%.20s'\n",
                req.key().c_str(), value.c_str(), l->keys()[k].acked.c_str());
        lost++;
      }
      keys_verified++;
    }
  }
  // Every counter generation, read back and decoded: each acknowledged increment applied once,
  // each failed one at most once, nothing else.
  int64_t counters_verified = 0, counter_violations = 0, counters_with_failures = 0;
  int64_t final_duplicates = 0;
  for (auto& l : loops) {
    for (int c = 0; c < FLAGS_counters_per_loop; c++) {
      const CounterState& want = l->counters()[c];
      for (size_t g = 0; g < want.generations.size(); g++) {
        const std::string& outcomes = want.generations[g].outcomes;
        if (outcomes.empty()) continue;
        GetRequestPB req;
        req.set_key(l->Counter(c, g));
        GetResponsePB resp;
        rpc::RpcController ctl;
        ctl.set_timeout(MonoDelta::FromSeconds(30));
        Status s = proxy.Get(req, &resp, &ctl);
        const int64_t final_value =
            s.ok() && resp.found() ? std::strtoll(GetValue(resp, ctl).c_str(), nullptr, 10) : 0;
        const CounterCheck check = CheckCounter(final_value, outcomes);
        final_duplicates += check.duplicates;
        if (!s.ok() || !check.ok()) {
          fprintf(stderr,
                  "SOAK counter violation: %s holds %lld for outcomes %s: duplicates %lld "
                  "missing %lld phantom %lld (%s)\n",
                  req.key().c_str(), (long long)final_value, outcomes.c_str(),
                  (long long)check.duplicates, (long long)check.missing, (long long)check.phantom,
                  s.ToString().c_str());
          counter_violations++;
        }
        if (outcomes.find('f') != std::string::npos) counters_with_failures++;
        counters_verified++;
      }
    }
  }
  // One more tracked call, made when no other is in flight: its lowest in-flight number is its
  // own, so the server forgets every other result of this client. What stays is that one entry.
  {
    IncrementRequestPB req;
    req.set_key("probe");
    req.set_delta(1);
    IncrementResponsePB resp;
    rpc::RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    Status s = proxy.Increment(req, &resp, &ctl);
    if (!s.ok()) fprintf(stderr, "SOAK probe increment failed: %s\n", s.ToString().c_str());
  }
  const rpc::ResultTrackerStats tracked = tracker->stats();
  const double ran = (MonoTime::Now() - start).ToSeconds();
  const int64_t unanswered = totals.calls.load() - totals.answers.load();
  printf(
      "SOAK calls seconds=%.0f calls=%lld answered_once=%lld unanswered=%lld ok=%lld "
      "too_busy=%lld timed_out=%lld network_errors=%lld other_errors=%lld violations=%lld\n",
      ran, (long long)totals.calls.load(), (long long)totals.answers.load(), (long long)unanswered,
      (long long)totals.ok.load(), (long long)totals.too_busy.load(),
      (long long)totals.timed_out.load(), (long long)totals.network_errors.load(),
      (long long)totals.other_errors.load(), (long long)totals.violations.load());
  printf("SOAK writes acked=%lld gets_checked=%lld keys_verified=%lld lost=%lld\n",
         (long long)totals.acked_writes.load(), (long long)totals.gets_checked.load(),
         (long long)keys_verified, (long long)lost);
  printf(
      "SOAK increments acked=%lld failed=%lld client_retries=%lld counters_verified=%lld "
      "counters_with_failures=%lld counter_violations=%lld duplicates=%lld "
      "duplicates_in_answers=%lld\n",
      (long long)totals.increments_acked.load(), (long long)totals.increments_failed.load(),
      (long long)totals.increment_retries.load(), (long long)counters_verified,
      (long long)counters_with_failures, (long long)counter_violations, (long long)final_duplicates,
      (long long)totals.increment_duplicates.load());
  printf(
      "SOAK tracker replays=%llu waits=%llu refused=%llu stale=%llu evicted=%llu "
      "bytes_max=%zu bytes_after_probe=%zu entries_after_probe=%zu\n",
      (unsigned long long)tracked.replays, (unsigned long long)tracked.waits,
      (unsigned long long)tracked.refused, (unsigned long long)tracked.stale,
      (unsigned long long)tracked.evicted, tracker_max, tracked.bytes, tracked.entries);
  PrintFaults("server", server_faults->counts());
  PrintFaults("client", client_faults->counts());
  // Flat: at most 20% + 16 MiB above the post-warm-up baseline, at the end and at the peak.
  const int64_t rss_limit = rss_base + rss_base / 5 + 16 * 1024;
  const bool rss_flat = !FLAGS_check_rss || rss_base == 0 || rss_max <= rss_limit;
  printf("SOAK memory rss_base_kb=%lld rss_max_kb=%lld rss_end_kb=%lld limit_kb=%lld flat=%d\n",
         (long long)rss_base, (long long)rss_max, (long long)rss_last, (long long)rss_limit,
         rss_flat);
  client->Shutdown();
  server->Shutdown();
  db.reset();
  if (own_dir) {
    const std::string rm = "rm -rf '" + dir + "'";
    if (std::system(rm.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir.c_str());
  }
  // Tracker memory: bounded while running (the results of the calls issued within one retry
  // window; never at the per-client cap, so nothing was evicted or refused) and back to one
  // client and one entry once the probe has told the server nothing else is in flight.
  const size_t tracker_limit =
      rpc::ResultTracker::kClientOverhead + rpc::ResultTracker::kEntryOverhead + 64;
  const bool tracker_flat = tracked.bytes <= tracker_limit && tracked.entries <= 1 &&
                            tracked.evicted == 0 && tracked.refused == 0 &&
                            tracker_max < server_options.result_tracker.max_bytes_per_client;
  // With responses dropped and increments made, some retries must have met a call that had run.
  const bool replays_seen =
      FLAGS_increments == 0 || client_spec.drop_read == 0 || tracked.replays + tracked.waits > 0;
  printf("SOAK exactly_once tracker_limit=%zu tracker_flat=%d replays_seen=%d\n", tracker_limit,
         tracker_flat, replays_seen);
  const bool pass = drained && unanswered == 0 && totals.violations.load() == 0 && lost == 0 &&
                    counter_violations == 0 && final_duplicates == 0 &&
                    totals.increment_duplicates.load() == 0 && tracker_flat && replays_seen &&
                    keys_verified == int64_t{FLAGS_loops} * FLAGS_keys_per_loop && rss_flat &&
                    totals.ok.load() > 0;
  printf("SOAK result=%s\n", pass ? "pass" : "FAIL");
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace rrpc::kv

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"kv-soak [--minutes=N] [--fault_scale=X]",
       "Mixed kv load with faults injected on both sides; checks that every call is answered "
       "exactly once, no acknowledged write is lost and memory stays flat "
       "(build-support/soak.sh, docs/reliability.md).",
       {"kv/kv_soak_main.cc"}});
  google::InitGoogleLogging(argv[0]);
  return rrpc::kv::Main();
}
