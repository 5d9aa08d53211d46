// MetricRegistry: the set of metric entities of a process (or of one server in a test), which
// the writers (prometheus_writer.h, json_writer.h) read through TakeSnapshot(). Usually one per
// ServerBase, which passes it to the messenger and services. Thread-safe.
//
// Entities are keyed by (type, id). The registry holds a reference to each until Unregister();
// the code that creates a short-lived entity (a client, a connection) keeps its own scoped_refptr
// while it uses the entity's metrics and unregisters it when done.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/snapshot.h"

namespace rrpc {

class MetricRegistry {
 public:
  MetricRegistry();
  ~MetricRegistry();
  MetricRegistry(const MetricRegistry&) = delete;
  MetricRegistry& operator=(const MetricRegistry&) = delete;

  // The entity (type, id), created on first call. `attributes` are set on it (added to, or
  // overwriting, those it has).
  scoped_refptr<MetricEntity> FindOrCreateEntity(const std::string& type, const std::string& id,
                                                 const MetricEntity::Attributes& attributes = {});
  // Null when there is no such entity.
  scoped_refptr<MetricEntity> FindEntity(const std::string& type, const std::string& id) const;

  // Drops the registry's reference: the entity leaves the output. Its metrics stay usable by
  // whoever still holds the entity. No-op if `entity` is not (or no longer) registered.
  void Unregister(const MetricEntity* entity);

  size_t num_entities() const;

  // Every entity's metrics, read now. Takes no lock during the reads of the metrics themselves
  // beyond each histogram stripe's, so writers are never blocked for long.
  RegistrySnapshot TakeSnapshot() const;

 private:
  using Key = std::pair<std::string, std::string>;  // (type, id)

  mutable Mutex mu_;
  std::map<Key, scoped_refptr<MetricEntity>> entities_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc
