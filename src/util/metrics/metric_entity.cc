#include "util/metrics/metric_entity.h"

#include <glog/logging.h>

#include <utility>
#include <vector>

namespace rrpc {

MetricEntity::MetricEntity(std::string type, std::string id, Attributes attributes)
    : type_(std::move(type)), id_(std::move(id)), attributes_(std::move(attributes)) {}

MetricEntity::~MetricEntity() = default;

void MetricEntity::SetAttribute(const std::string& key, const std::string& value) {
  MutexLock l(mu_);
  attributes_[key] = value;
}

MetricEntity::Attributes MetricEntity::attributes() const {
  MutexLock l(mu_);
  return attributes_;
}

template <typename T>
T* MetricEntity::FindLocked(const MetricPrototype* prototype) const {
  CHECK(IsValidMetricName(prototype->name))
      << "metric name must be snake_case: '" << prototype->name << "'";
  auto it = metrics_.find(prototype->name);
  if (it == metrics_.end()) return nullptr;
  T* metric = dynamic_cast<T*>(it->second.get());
  CHECK(metric != nullptr) << "metric " << prototype->name << " of " << type_ << " " << id_
                           << " already exists as another kind of metric";
  return metric;
}

Counter* MetricEntity::FindOrCreateCounter(const MetricPrototype* prototype) {
  CHECK(prototype->type == MetricType::kCounter) << prototype->name;
  MutexLock l(mu_);
  if (Counter* existing = FindLocked<Counter>(prototype)) return existing;
  auto metric = std::make_unique<Counter>(prototype);
  Counter* result = metric.get();
  metrics_.emplace(prototype->name, std::move(metric));
  return result;
}

Gauge* MetricEntity::FindOrCreateGauge(const MetricPrototype* prototype) {
  CHECK(prototype->type == MetricType::kGauge) << prototype->name;
  MutexLock l(mu_);
  if (Gauge* existing = FindLocked<Gauge>(prototype)) return existing;
  auto metric = std::make_unique<Gauge>(prototype);
  Gauge* result = metric.get();
  metrics_.emplace(prototype->name, std::move(metric));
  return result;
}

CallbackGauge* MetricEntity::FindOrCreateCallbackGauge(const MetricPrototype* prototype,
                                                       CallbackGauge::Callback callback) {
  CHECK(prototype->type == MetricType::kGauge) << prototype->name;
  CallbackGauge* existing;
  {
    MutexLock l(mu_);
    existing = FindLocked<CallbackGauge>(prototype);
    if (existing == nullptr) {
      auto metric = std::make_unique<CallbackGauge>(prototype, std::move(callback));
      CallbackGauge* result = metric.get();
      metrics_.emplace(prototype->name, std::move(metric));
      return result;
    }
  }
  // Outside mu_: SetCallback waits for a running callback, which must not wait on mu_ in turn.
  existing->SetCallback(std::move(callback));
  return existing;
}

HistogramMetric* MetricEntity::FindOrCreateHistogram(const MetricPrototype* prototype) {
  CHECK(prototype->type == MetricType::kHistogram) << prototype->name;
  MutexLock l(mu_);
  if (HistogramMetric* existing = FindLocked<HistogramMetric>(prototype)) return existing;
  auto metric = std::make_unique<HistogramMetric>(prototype);
  HistogramMetric* result = metric.get();
  metrics_.emplace(prototype->name, std::move(metric));
  return result;
}

void MetricEntity::ReadInto(EntitySnapshot* out) const {
  out->type = type_;
  out->id = id_;
  std::vector<const Metric*> metrics;
  {
    MutexLock l(mu_);
    out->attributes = attributes_;
    metrics.reserve(metrics_.size());
    for (const auto& [name, metric] : metrics_) metrics.push_back(metric.get());
  }
  // Metrics are never removed, so the pointers stay valid without the lock; reading without it
  // lets a callback gauge take locks of its own (even look this entity up) safely.
  out->metrics.clear();
  out->metrics.resize(metrics.size());
  for (size_t i = 0; i < metrics.size(); i++) metrics[i]->ReadInto(&out->metrics[i]);
}

}  // namespace rrpc
