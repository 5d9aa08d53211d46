// The dashboard's static files (src/server/web/assets/), compiled into the binary so that the
// web UI works with no files on disk and no network access. The definitions are generated at
// build time by src/server/web/assets/embed.cmake.
#pragma once

#include <cstddef>

namespace rrpc {

struct EmbeddedFile {
  const char* name;  // File name relative to assets/, e.g. "dashboard.js".
  const unsigned char* data;
  size_t size;
};

// Every embedded file, sorted by name.
extern const EmbeddedFile kEmbeddedWebAssets[];
extern const size_t kNumEmbeddedWebAssets;

}  // namespace rrpc
