#include "util/metrics/prometheus_writer.h"

#include <glog/logging.h>

#include <cmath>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "util/metrics/number_text.h"
#include "util/metrics/utf8.h"

namespace rrpc {

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Suffixes that name a time unit in our metric names; replaced by Prometheus' "_seconds".
constexpr std::string_view kTimeSuffixes[] = {
    "_nanoseconds", "_microseconds", "_milliseconds", "_seconds", "_nanos",
    "_micros",      "_millis",       "_nsec",         "_usec",    "_msec",
    "_sec",         "_ns",           "_us",           "_ms",      "_s"};

using metrics_internal::AppendInt;

// Go's ParseFloat reads the shortest round-trip form; infinities and NaN have fixed spellings.
void AppendDouble(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
  } else {
    metrics_internal::AppendFiniteDouble(v, out);
  }
}

// A value in the metric's unit, converted to seconds for time units (units_per_second != 0).
template <typename Int>
void AppendValue(Int v, uint64_t units_per_second, std::string* out) {
  if (units_per_second == 0) {
    AppendInt(v, out);
  } else {
    AppendDouble(static_cast<double>(v) / static_cast<double>(units_per_second), out);
  }
}

// Escapes text for a label value (`escape_quote`) or a HELP line: backslash, newline and, in
// label values, the double quote; ill-formed UTF-8 becomes U+FFFD.
void AppendEscaped(std::string_view s, bool escape_quote, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      i += metrics_internal::AppendUtf8OrReplacement(s, i, out);
      continue;
    }
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && escape_quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
    i++;
  }
}

// {entity="method",id="x"  -- left open so a caller can add le="..." before closing.
void AppendLabelsOpen(const EntitySnapshot& e, std::string* out) {
  out->append("{entity=\"");
  AppendEscaped(e.type, true, out);
  out->append("\",id=\"");
  AppendEscaped(e.id, true, out);
  out->push_back('"');
}

struct Sample {
  const EntitySnapshot* entity;
  const MetricSnapshot* metric;
};

void AppendScalar(const std::string& name, const Sample& s, std::string* out) {
  const MetricPrototype& proto = *s.metric->prototype;
  out->append(name);
  AppendLabelsOpen(*s.entity, out);
  out->append("} ");
  AppendValue(s.metric->value, MetricUnitsPerSecond(proto.unit), out);
  out->push_back('\n');
}

// The `le` boundaries of a histogram, in the metric's unit: 1, 2 and 5 times each power of ten,
// from 1 up to the largest such value the histogram tracks with full precision (for a latency
// histogram in microseconds with the default 60 s range: 1 us ... 50 s, 24 boundaries). They
// depend only on the histogram's range, never on what was recorded, so a scraper sees the same
// series on every scrape. The ladder stops at max_value() because values above it are known only
// to exceed it: they count in "+Inf" alone, and every finite bucket stays a true upper bound.
std::vector<uint64_t> BucketBoundaries(uint64_t max_value) {
  std::vector<uint64_t> bounds;
  for (uint64_t decade = 1;; decade *= 10) {
    for (uint64_t step : {1, 2, 5}) {
      // Compared before multiplying, so no product overflows (and decade stays <= 10^18).
      if (decade > max_value / step) return bounds;
      bounds.push_back(decade * step);
    }
  }
}

void AppendHistogram(const std::string& name, const Sample& s, std::string* out) {
  const uint64_t units_per_second = MetricUnitsPerSecond(s.metric->prototype->unit);
  const Histogram* h = s.metric->histogram.get();
  if (h != nullptr) {
    const std::vector<uint64_t> bounds = BucketBoundaries(h->max_value());
    // Each fine bucket's whole count goes to the first boundary >= the bucket's upper bound, so a
    // boundary's cumulative count is exact in the direction Prometheus needs: it never includes
    // a value above le. The price: a fine bucket straddling a boundary (values below 256 have a
    // bucket each; above, a bucket spans at most 0.78% of its value) moves its values at or just
    // below le to the next boundary up (1000 us shares the fine bucket 1000..1003 and so counts
    // at le=0.002). Fine buckets above the last boundary count in "+Inf" only.
    std::vector<uint64_t> counts(bounds.size(), 0);
    size_t next = 0;
    h->ForEachNonEmptyBucket([&](uint64_t upper_bound, uint64_t count) {
      while (next < bounds.size() && bounds[next] < upper_bound) next++;
      if (next < bounds.size()) counts[next] += count;
    });
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); i++) {
      cumulative += counts[i];
      out->append(name);
      out->append("_bucket");
      AppendLabelsOpen(*s.entity, out);
      out->append(",le=\"");
      AppendValue(bounds[i], units_per_second, out);
      out->append("\"} ");
      AppendInt(cumulative, out);
      out->push_back('\n');
    }
  }
  const uint64_t count = h == nullptr ? 0 : h->count();
  const uint64_t sum = h == nullptr ? 0 : h->sum();
  out->append(name);
  out->append("_bucket");
  AppendLabelsOpen(*s.entity, out);
  out->append(",le=\"+Inf\"} ");
  AppendInt(count, out);
  out->push_back('\n');

  out->append(name);
  out->append("_sum");
  AppendLabelsOpen(*s.entity, out);
  out->append("} ");
  AppendValue(sum, units_per_second, out);
  out->push_back('\n');

  out->append(name);
  out->append("_count");
  AppendLabelsOpen(*s.entity, out);
  out->append("} ");
  AppendInt(count, out);
  out->push_back('\n');
}

}  // namespace

std::string PrometheusMetricName(const MetricPrototype& prototype) {
  std::string base = prototype.name;
  const bool counter = prototype.type == MetricType::kCounter;
  if (counter && EndsWith(base, "_total")) base.resize(base.size() - 6);
  if (MetricUnitsPerSecond(prototype.unit) != 0) {
    for (std::string_view suffix : kTimeSuffixes) {
      if (EndsWith(base, suffix) && base.size() > suffix.size()) {
        base.resize(base.size() - suffix.size());
        break;
      }
    }
    base += "_seconds";
  } else if (prototype.unit == MetricUnit::kBytes && !EndsWith(base, "_bytes")) {
    base += "_bytes";
  }
  if (counter) base += "_total";
  return "rrpc_" + base;
}

std::string FormatPrometheus(const RegistrySnapshot& snapshot) {
  // Prometheus wants every sample of a name in one group under one HELP and TYPE, so gather
  // the samples by name first (entities stay in snapshot order inside a group).
  std::map<std::string, std::vector<Sample>> families;
  for (const EntitySnapshot& entity : snapshot.entities) {
    for (const MetricSnapshot& metric : entity.metrics) {
      families[PrometheusMetricName(*metric.prototype)].push_back(Sample{&entity, &metric});
    }
  }

  std::string out;
  for (const auto& [name, samples] : families) {
    const MetricPrototype& first = *samples.front().metric->prototype;
    out.append("# HELP ");
    out.append(name);
    out.push_back(' ');
    AppendEscaped(first.description, false, &out);
    out.append("\n# TYPE ");
    out.append(name);
    out.push_back(' ');
    out.append(MetricTypeName(first.type));
    out.push_back('\n');
    for (const Sample& s : samples) {
      if (s.metric->prototype->type != first.type) {
        // Two prototypes map to one name with different types: the output would not parse.
        LOG_FIRST_N(WARNING, 10) << "metric " << s.metric->prototype->name << " of "
                                 << s.entity->type << " " << s.entity->id
                                 << " clashes with another metric named " << name
                                 << "; left out of the Prometheus output";
        continue;
      }
      if (first.type == MetricType::kHistogram) {
        AppendHistogram(name, s, &out);
      } else {
        AppendScalar(name, s, &out);
      }
    }
  }
  return out;
}

}  // namespace rrpc
