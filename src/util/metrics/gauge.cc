#include "util/metrics/gauge.h"

#include <glog/logging.h>

#include <utility>

namespace rrpc {

Gauge::Gauge(const MetricPrototype* prototype) : Metric(prototype) {
  DCHECK(prototype->type == MetricType::kGauge) << prototype->name;
}

void Gauge::ReadInto(MetricSnapshot* out) const {
  out->prototype = &prototype();
  out->value = value();
}

CallbackGauge::CallbackGauge(const MetricPrototype* prototype, Callback callback)
    : Metric(prototype), callback_(std::move(callback)) {
  DCHECK(prototype->type == MetricType::kGauge) << prototype->name;
}

void CallbackGauge::SetCallback(Callback callback) {
  MutexLock l(mu_);
  callback_ = std::move(callback);
}

int64_t CallbackGauge::value() const {
  MutexLock l(mu_);
  if (callback_) last_ = callback_();
  return last_;
}

void CallbackGauge::DetachToConstant(int64_t v) {
  MutexLock l(mu_);
  callback_ = nullptr;
  last_ = v;
}

void CallbackGauge::DetachToLastValue() {
  MutexLock l(mu_);
  if (callback_) last_ = callback_();
  callback_ = nullptr;
}

void CallbackGauge::ReadInto(MetricSnapshot* out) const {
  out->prototype = &prototype();
  out->value = value();
}

}  // namespace rrpc
