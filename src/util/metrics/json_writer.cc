#include "util/metrics/json_writer.h"

#include <cmath>
#include <cstdio>

#include "util/metrics/number_text.h"
#include "util/metrics/utf8.h"

namespace rrpc {

namespace {

using metrics_internal::AppendInt;

// Shortest form that reads back as the same double; JSON has no NaN or infinity, so null.
void AppendDouble(double v, std::string* out) {
  if (std::isfinite(v)) {
    metrics_internal::AppendFiniteDouble(v, out);
  } else {
    out->append("null");
  }
}

// ,"key":
void AppendKey(std::string_view key, std::string* out) {
  out->push_back(',');
  AppendJsonString(key, out);
  out->push_back(':');
}

void AppendMetric(const MetricSnapshot& m, std::string* out) {
  const MetricPrototype& proto = *m.prototype;
  out->append("{\"name\":");
  AppendJsonString(proto.name, out);
  AppendKey("type", out);
  AppendJsonString(MetricTypeName(proto.type), out);
  AppendKey("unit", out);
  AppendJsonString(MetricUnitName(proto.unit), out);
  AppendKey("help", out);
  AppendJsonString(proto.description, out);
  if (proto.type != MetricType::kHistogram || m.histogram == nullptr) {
    AppendKey("value", out);
    AppendInt(m.value, out);
  } else {
    const Histogram& h = *m.histogram;
    const std::pair<const char*, uint64_t> fields[] = {
        {"count", h.count()}, {"sum", h.sum()}, {"min", h.min()}, {"max", h.max()}};
    for (const auto& [key, value] : fields) {
      AppendKey(key, out);
      AppendInt(value, out);
    }
    AppendKey("mean", out);
    AppendDouble(h.mean(), out);
    const std::pair<const char*, double> percentiles[] = {
        {"p50", 50}, {"p75", 75}, {"p95", 95}, {"p99", 99}, {"p999", 99.9}};
    for (const auto& [key, p] : percentiles) {
      AppendKey(key, out);
      AppendInt(h.ValueAtPercentile(p), out);
    }
  }
  out->push_back('}');
}

void AppendEntity(const EntitySnapshot& e, std::string* out) {
  out->append("{\"type\":");
  AppendJsonString(e.type, out);
  AppendKey("id", out);
  AppendJsonString(e.id, out);
  AppendKey("attributes", out);
  out->push_back('{');
  bool first = true;
  for (const auto& [key, value] : e.attributes) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(key, out);
    out->push_back(':');
    AppendJsonString(value, out);
  }
  out->push_back('}');
  AppendKey("metrics", out);
  out->push_back('[');
  for (size_t i = 0; i < e.metrics.size(); i++) {
    if (i > 0) out->push_back(',');
    AppendMetric(e.metrics[i], out);
  }
  out->append("]}");
}

}  // namespace

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      i += metrics_internal::AppendUtf8OrReplacement(s, i, out);
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    i++;
  }
  out->push_back('"');
}

std::string FormatJson(const RegistrySnapshot& snapshot) {
  std::string out;
  out.append("{\"timestamp_ms\":");
  AppendInt(snapshot.timestamp_ms, &out);
  out.append(",\"entities\":[");
  for (size_t i = 0; i < snapshot.entities.size(); i++) {
    if (i > 0) out.push_back(',');
    AppendEntity(snapshot.entities[i], &out);
  }
  out.append("]}");
  return out;
}

}  // namespace rrpc
