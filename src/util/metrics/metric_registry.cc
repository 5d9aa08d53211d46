#include "util/metrics/metric_registry.h"

#include <chrono>
#include <vector>

namespace rrpc {

MetricRegistry::MetricRegistry() = default;
MetricRegistry::~MetricRegistry() = default;

scoped_refptr<MetricEntity> MetricRegistry::FindOrCreateEntity(
    const std::string& type, const std::string& id, const MetricEntity::Attributes& attributes) {
  scoped_refptr<MetricEntity> entity;
  {
    MutexLock l(mu_);
    scoped_refptr<MetricEntity>& slot = entities_[Key(type, id)];
    if (!slot) {
      slot = scoped_refptr<MetricEntity>(new MetricEntity(type, id, attributes));
      return slot;
    }
    entity = slot;
  }
  for (const auto& [key, value] : attributes) entity->SetAttribute(key, value);
  return entity;
}

scoped_refptr<MetricEntity> MetricRegistry::FindEntity(const std::string& type,
                                                       const std::string& id) const {
  MutexLock l(mu_);
  auto it = entities_.find(Key(type, id));
  return it == entities_.end() ? nullptr : it->second;
}

void MetricRegistry::Unregister(const MetricEntity* entity) {
  scoped_refptr<MetricEntity> dropped;  // released after mu_, in case it is the last reference
  MutexLock l(mu_);
  auto it = entities_.find(Key(entity->type(), entity->id()));
  if (it == entities_.end() || it->second.get() != entity) return;
  dropped = std::move(it->second);
  entities_.erase(it);
}

size_t MetricRegistry::num_entities() const {
  MutexLock l(mu_);
  return entities_.size();
}

RegistrySnapshot MetricRegistry::TakeSnapshot() const {
  RegistrySnapshot snapshot;
  snapshot.timestamp_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  std::vector<scoped_refptr<MetricEntity>> entities;
  {
    MutexLock l(mu_);
    entities.reserve(entities_.size());
    for (const auto& [key, entity] : entities_) entities.push_back(entity);
  }
  snapshot.entities.resize(entities.size());
  for (size_t i = 0; i < entities.size(); i++) entities[i]->ReadInto(&snapshot.entities[i]);
  return snapshot;
}

}  // namespace rrpc
