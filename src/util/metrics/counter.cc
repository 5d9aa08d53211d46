#include "util/metrics/counter.h"

#include <glog/logging.h>

namespace rrpc {

Counter::Counter(const MetricPrototype* prototype)
    : Metric(prototype),
      mask_(metrics_internal::NumStripes() - 1),
      stripes_(new Stripe[metrics_internal::NumStripes()]) {
  DCHECK(prototype->type == MetricType::kCounter) << prototype->name;
}

int64_t Counter::value() const {
  int64_t sum = 0;
  for (int i = 0; i <= mask_; i++) sum += stripes_[i].value.load(std::memory_order_relaxed);
  return sum;
}

void Counter::ReadInto(MetricSnapshot* out) const {
  out->prototype = &prototype();
  out->value = value();
}

}  // namespace rrpc
