#include "rrpc/util/app_metrics.h"

#include <deque>
#include <map>
#include <utility>

#include "rrpc/util/mutex.h"
#include "util/metrics/metric_prototype.h"
#include "util/metrics/metric_registry.h"

namespace rrpc {

namespace {

MetricUnit ToMetricUnit(AppUnit unit) {
  switch (unit) {
    case AppUnit::kUnits:
      return MetricUnit::kUnits;
    case AppUnit::kBytes:
      return MetricUnit::kBytes;
    case AppUnit::kRequests:
      return MetricUnit::kRequests;
    case AppUnit::kMicroseconds:
      return MetricUnit::kMicroseconds;
    case AppUnit::kMilliseconds:
      return MetricUnit::kMilliseconds;
    case AppUnit::kSeconds:
      return MetricUnit::kSeconds;
  }
  return MetricUnit::kUnits;
}

// The prototypes of the application's metrics, one per name, for the life of the process: a
// metric keeps a pointer to its prototype, and entities outlive any one AppMetrics. One name has
// one kind across groups, so /metrics gives each name one TYPE.
class AppPrototypes {
 public:
  static AppPrototypes& Get() {
    static auto* prototypes = new AppPrototypes;  // never destroyed: metrics point into it
    return *prototypes;
  }

  Result<const MetricPrototype*> Find(const std::string& name, const std::string& help,
                                      AppUnit unit, MetricType type) RRPC_EXCLUDES(mu_) {
    const std::string full = "app_" + name;
    if (name.empty() || !IsValidMetricName(name.c_str())) {
      return Status::InvalidArgument("application metric name is not snake_case", name);
    }
    MutexLock l(mu_);
    auto it = by_name_.find(full);
    if (it != by_name_.end()) {
      if (it->second->prototype.type != type) {
        return Status::InvalidArgument(
            "application metric " + name + " is a " + MetricTypeName(it->second->prototype.type),
            std::string("not a ") + MetricTypeName(type));
      }
      return &it->second->prototype;
    }
    Entry& e = entries_.emplace_back();
    e.name = full;
    e.help = help;
    e.prototype = {e.name.c_str(), e.name.c_str(), ToMetricUnit(unit), e.help.c_str(), type};
    by_name_[full] = &e;
    return &e.prototype;
  }

 private:
  struct Entry {
    std::string name;
    std::string help;
    MetricPrototype prototype{};
  };
  Mutex mu_;
  std::deque<Entry> entries_ RRPC_GUARDED_BY(mu_);  // a deque: entries never move
  std::map<std::string, Entry*> by_name_ RRPC_GUARDED_BY(mu_);
};

}  // namespace

void AppCounter::IncrementBy(int64_t n) { counter_->IncrementBy(n); }
int64_t AppCounter::value() const { return counter_->value(); }

void AppGauge::Set(int64_t value) { gauge_->Set(value); }
void AppGauge::IncrementBy(int64_t n) { gauge_->IncrementBy(n); }
int64_t AppGauge::value() const { return gauge_->value(); }

void AppHistogram::Record(uint64_t value) { histogram_->Record(value); }
uint64_t AppHistogram::count() const { return histogram_->TotalCount(); }

AppMetrics::AppMetrics(MetricRegistry* registry, std::string group)
    : registry_(registry), group_(std::move(group)) {}

Result<AppCounter> AppMetrics::Counter(const std::string& name, const std::string& help,
                                       AppUnit unit) {
  auto p = AppPrototypes::Get().Find(name, help, unit, MetricType::kCounter);
  if (!p.ok()) return p.status();
  return AppCounter(registry_->FindOrCreateEntity("app", group_)->FindOrCreateCounter(*p));
}

Result<AppGauge> AppMetrics::Gauge(const std::string& name, const std::string& help, AppUnit unit) {
  auto p = AppPrototypes::Get().Find(name, help, unit, MetricType::kGauge);
  if (!p.ok()) return p.status();
  return AppGauge(registry_->FindOrCreateEntity("app", group_)->FindOrCreateGauge(*p));
}

Result<AppHistogram> AppMetrics::Histogram(const std::string& name, const std::string& help,
                                           AppUnit unit) {
  auto p = AppPrototypes::Get().Find(name, help, unit, MetricType::kHistogram);
  if (!p.ok()) return p.status();
  return AppHistogram(registry_->FindOrCreateEntity("app", group_)->FindOrCreateHistogram(*p));
}

}  // namespace rrpc
