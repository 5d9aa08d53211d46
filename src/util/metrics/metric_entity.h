// MetricEntity: one thing that has metrics (a server, a service, a method, a messenger, a
// client), named by a type and an id ("method", "rtest.EchoService.Echo"), with free-form
// attributes. It owns its metric instances, one per prototype name, created on first use.
//
// Lookups take the entity's mutex and are not meant for the call path: look a metric up once,
// cache the pointer, and update through it. A metric pointer is valid as long as its entity is;
// an entity lives while someone holds a scoped_refptr to it, and the registry holds one until
// MetricRegistry::Unregister(). Thread-safe.
//
//   scoped_refptr<MetricEntity> method = registry->FindOrCreateEntity("method", "svc.Echo");
//   Counter* calls = method->FindOrCreateCounter(&METRIC_rpc_calls_total);
#pragma once

#include <map>
#include <memory>
#include <string>

#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "util/metrics/counter.h"
#include "util/metrics/gauge.h"
#include "util/metrics/histogram_metric.h"
#include "util/metrics/metric.h"
#include "util/metrics/snapshot.h"

namespace rrpc {

class MetricEntity : public RefCounted<MetricEntity> {
 public:
  using Attributes = std::map<std::string, std::string>;

  const std::string& type() const { return type_; }
  const std::string& id() const { return id_; }

  void SetAttribute(const std::string& key, const std::string& value);
  Attributes attributes() const;

  // The entity's metric named prototype->name, created on first call. CHECK-fails when the name
  // is not snake_case or is already taken by a metric of another kind. For a callback gauge that
  // already exists, `callback` replaces the old one (the newest owner of the state wins).
  Counter* FindOrCreateCounter(const MetricPrototype* prototype);
  Gauge* FindOrCreateGauge(const MetricPrototype* prototype);
  CallbackGauge* FindOrCreateCallbackGauge(const MetricPrototype* prototype,
                                           CallbackGauge::Callback callback);
  HistogramMetric* FindOrCreateHistogram(const MetricPrototype* prototype);

  // Reads every metric (calling callback gauges with no lock of this entity held).
  void ReadInto(EntitySnapshot* out) const;

 private:
  friend class MetricRegistry;            // creates entities
  friend class RefCounted<MetricEntity>;  // destroys them

  MetricEntity(std::string type, std::string id, Attributes attributes);
  ~MetricEntity();

  // The existing metric named prototype->name (null if none); CHECKs that it is a T.
  template <typename T>
  T* FindLocked(const MetricPrototype* prototype) const RRPC_REQUIRES(mu_);

  const std::string type_;
  const std::string id_;

  mutable Mutex mu_;
  Attributes attributes_ RRPC_GUARDED_BY(mu_);
  // By name. Metrics are added, never removed, so pointers handed out stay valid.
  std::map<std::string, std::unique_ptr<Metric>> metrics_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc
