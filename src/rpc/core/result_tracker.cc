#include "rpc/core/result_tracker.h"

#include <algorithm>
#include <utility>

#include "rpc/core/inbound_call.h"
#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

namespace {

inline constexpr MetricPrototype METRIC_result_tracker_replays_total = MetricPrototype::Counter(
    "result_tracker_replays_total", "Tracked calls replayed", MetricUnit::kCalls,
    "Retries of tracked calls that had already run, answered with the stored answer without "
    "running the handler again.");
inline constexpr MetricPrototype METRIC_result_tracker_waits_total = MetricPrototype::Counter(
    "result_tracker_waits_total", "Tracked duplicates waited", MetricUnit::kCalls,
    "Duplicates of a tracked call that arrived while it ran and waited for its answer.");
inline constexpr MetricPrototype METRIC_result_tracker_refused_total = MetricPrototype::Counter(
    "result_tracker_refused_total", "Tracked calls refused", MetricUnit::kCalls,
    "New tracked calls refused (ERROR_SERVER_TOO_BUSY) because the tracker's memory cap was "
    "reached or too many duplicates waited.");
inline constexpr MetricPrototype METRIC_result_tracker_stale_total = MetricPrototype::Counter(
    "result_tracker_stale_total", "Tracked calls stale", MetricUnit::kCalls,
    "Tracked calls answered ERROR_REQUEST_STALE: below the client's lowest in-flight number, "
    "evicted, or ran with a result too large to keep.");
inline constexpr MetricPrototype METRIC_result_tracker_evicted_total = MetricPrototype::Counter(
    "result_tracker_evicted_total", "Tracked results evicted", MetricUnit::kEntries,
    "Finished results evicted because their client reached its memory cap.");
inline constexpr MetricPrototype METRIC_result_tracker_bytes = MetricPrototype::Gauge(
    "result_tracker_bytes", "Result tracker memory", MetricUnit::kBytes,
    "Memory the result tracker holds now: kept answers and their bookkeeping.");
inline constexpr MetricPrototype METRIC_result_tracker_clients =
    MetricPrototype::Gauge("result_tracker_clients", "Result tracker clients", MetricUnit::kEntries,
                           "Client ids the result tracker holds state for.");

// How often Admit looks for idle clients.
constexpr MonoDelta kExpiryScanPeriod = MonoDelta::FromSeconds(1);

void Bump(Counter* c) {
  if (c != nullptr) c->Increment();
}

}  // namespace

ResultTracker::ResultTracker(ResultTrackerOptions options, MessengerMetrics* metrics)
    : options_(options) {
  if (metrics == nullptr) return;
  MetricEntity* e = metrics->entity();
  replays_metric_ = e->FindOrCreateCounter(&METRIC_result_tracker_replays_total);
  waits_metric_ = e->FindOrCreateCounter(&METRIC_result_tracker_waits_total);
  refused_metric_ = e->FindOrCreateCounter(&METRIC_result_tracker_refused_total);
  stale_metric_ = e->FindOrCreateCounter(&METRIC_result_tracker_stale_total);
  evicted_metric_ = e->FindOrCreateCounter(&METRIC_result_tracker_evicted_total);
  bytes_metric_ = e->FindOrCreateGauge(&METRIC_result_tracker_bytes);
  clients_metric_ = e->FindOrCreateGauge(&METRIC_result_tracker_clients);
}

ResultTracker::~ResultTracker() {
  // Calls still waiting belong to connections being torn down with the messenger; their
  // memory goes with their reactors' pools. None normally remain: the service pool drains first.
  MutexLock l(mu_);
  for (auto& [key, client] : clients_) {
    for (auto& [seq, entry] : client.entries) {
      LOG_IF(WARNING, !entry.waiters.empty())
          << entry.waiters.size() << " tracked calls still waiting at shutdown";
    }
  }
}

ResultTracker::Verdict ResultTracker::Admit(InboundCall* call) {
  const TrackedRequestId& id = call->request_id();
  if (!id.valid()) {
    call->RespondFailure(ErrorStatusPB::ERROR_INVALID_REQUEST,
                         Status::InvalidArgument("request id: client id must be 1 to 16 bytes"));
    return Verdict::kAnswered;
  }
  std::shared_ptr<const StoredResponse> replay;
  const char* stale_reason = nullptr;
  const char* refuse_reason = nullptr;
  {
    MutexLock l(mu_);
    const MonoTime now = MonoTime::Now();
    ExpireIdle(now);
    auto cit = clients_.find(id.client_key());
    if (cit == clients_.end()) {
      if (bytes_ + kClientOverhead + kEntryOverhead > options_.max_bytes) {
        refuse_reason = "result tracker full (max_bytes)";
      } else {
        cit = clients_.emplace(id.client_key(), Client()).first;
        bytes_ += kClientOverhead;
      }
    }
    if (refuse_reason == nullptr) {
      Client& c = cit->second;
      c.last_seen = now;
      Advance(&c, id.first_incomplete_seq_no);
      auto it = c.entries.find(id.seq_no);
      if (it != c.entries.end()) {
        Entry& e = it->second;
        if (e.done) {
          counts_.replays++;
          Bump(replays_metric_);
          replay = e.response;
          if (replay == nullptr) stale_reason = "the call ran but its result was too large to keep";
        } else if (e.waiters.size() >= options_.max_waiters_per_call) {
          refuse_reason = "too many duplicates of this call wait";
        } else {
          e.waiters.push_back(call);
          counts_.waits++;
          Bump(waits_metric_);
          return Verdict::kWaiting;
        }
      } else if (id.seq_no < c.floor) {
        stale_reason = "the server no longer holds this call's result";
      } else if (!MakeRoom(&c, kEntryOverhead, id.seq_no)) {
        refuse_reason = "result tracker full for this client (max_bytes_per_client)";
      } else if (id.seq_no < c.floor) {  // MakeRoom evicted past it
        stale_reason = "the server no longer holds this call's result";
      } else if (bytes_ + kEntryOverhead > options_.max_bytes) {
        refuse_reason = "result tracker full (max_bytes)";
      } else {
        c.entries.emplace(id.seq_no, Entry());
        c.bytes += kEntryOverhead;
        c.running++;
        bytes_ += kEntryOverhead;
        entries_++;
        UpdateGauges();
        call->set_result_tracker(this);
        return Verdict::kRun;
      }
    }
    if (stale_reason != nullptr) {
      counts_.stale++;
      Bump(stale_metric_);
    } else if (refuse_reason != nullptr) {
      counts_.refused++;
      Bump(refused_metric_);
    }
  }
  if (stale_reason != nullptr) {
    call->RespondFailure(ErrorStatusPB::ERROR_REQUEST_STALE,
                         Status::IllegalState(stale_reason, "seq " + std::to_string(id.seq_no)));
  } else if (refuse_reason != nullptr) {
    call->RespondFailure(ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
                         Status::ServiceUnavailable(refuse_reason));
  } else {
    call->RespondStored(*replay);
  }
  return Verdict::kAnswered;
}

void ResultTracker::Finish(const TrackedRequestId& id,
                           std::shared_ptr<const StoredResponse> response) {
  std::vector<InboundCall*> waiters;
  {
    MutexLock l(mu_);
    auto cit = clients_.find(id.client_key());
    if (cit == clients_.end()) return;  // running entries keep their client: not reached
    Client& c = cit->second;
    auto it = c.entries.find(id.seq_no);
    if (it == c.entries.end() || it->second.done) return;
    c.running--;
    waiters.swap(it->second.waiters);
    if (response == nullptr) {
      EraseEntry(&c, it);
    } else {
      Entry& e = it->second;
      e.done = true;
      const size_t extra = response->size;
      if (MakeRoom(&c, extra, id.seq_no) && bytes_ + extra <= options_.max_bytes) {
        e.response = response;
        e.bytes += extra;
        c.bytes += extra;
        bytes_ += extra;
      } else {
        counts_.not_kept++;
      }
      // The client already said it waits no more for this number (its own retries gave up).
      if (id.seq_no < c.floor) EraseEntry(&c, it);
    }
    UpdateGauges();
  }
  for (InboundCall* w : waiters) {
    if (response != nullptr) {
      w->RespondStored(*response);
    } else {
      w->RespondFailure(ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
                        Status::ServiceUnavailable(
                            "not run: this attempt waited for an earlier attempt of the same "
                            "call, which ended without running"));
    }
  }
}

void ResultTracker::Advance(Client* c, uint64_t first_incomplete) {
  if (first_incomplete <= c->floor) return;
  c->floor = first_incomplete;
  auto it = c->entries.begin();
  while (it != c->entries.end() && it->first < first_incomplete) {
    auto next = std::next(it);
    if (it->second.done) EraseEntry(c, it);  // running ones go when they finish
    it = next;
  }
  UpdateGauges();
}

bool ResultTracker::MakeRoom(Client* c, size_t need, uint64_t keep) {
  auto it = c->entries.begin();
  while (c->bytes + need > options_.max_bytes_per_client && it != c->entries.end()) {
    auto next = std::next(it);
    if (it->second.done && it->first != keep) {
      c->floor = std::max(c->floor, it->first + 1);
      EraseEntry(c, it);
      counts_.evicted++;
      Bump(evicted_metric_);
    }
    it = next;
  }
  return c->bytes + need <= options_.max_bytes_per_client;
}

void ResultTracker::EraseEntry(Client* c, std::map<uint64_t, Entry>::iterator it) {
  c->bytes -= it->second.bytes;
  bytes_ -= it->second.bytes;
  entries_--;
  c->entries.erase(it);
}

void ResultTracker::ExpireIdle(MonoTime now) {
  if (now < next_expiry_scan_) return;
  next_expiry_scan_ = now + kExpiryScanPeriod;
  for (auto it = clients_.begin(); it != clients_.end();) {
    Client& c = it->second;
    if (c.running == 0 && c.last_seen + options_.client_idle_timeout < now) {
      bytes_ -= c.bytes;
      entries_ -= c.entries.size();
      counts_.expired_clients++;
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
  UpdateGauges();
}

void ResultTracker::UpdateGauges() {
  if (bytes_metric_ != nullptr) bytes_metric_->Set(static_cast<int64_t>(bytes_));
  if (clients_metric_ != nullptr) clients_metric_->Set(static_cast<int64_t>(clients_.size()));
}

ResultTrackerStats ResultTracker::stats() const {
  MutexLock l(mu_);
  ResultTrackerStats s = counts_;
  s.bytes = bytes_;
  s.clients = clients_.size();
  s.entries = entries_;
  return s;
}

}  // namespace rrpc::rpc
