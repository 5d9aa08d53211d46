// The web UI's files, compiled into the binary so that it works with no files on disk and no
// network access: the static files the browser loads (src/server/web/assets/) and the
// templates the data pages fill in (src/server/web/templates/). The tables are generated at
// build time by src/server/web/embed.cmake; they are constant, so any thread may read them.
#pragma once

#include <cstddef>
#include <string_view>

namespace rrpc {

struct EmbeddedFile {
  const char* name;  // File name relative to its folder, e.g. "dashboard.js".
  const unsigned char* data;
  size_t size;

  std::string_view contents() const {
    return std::string_view(reinterpret_cast<const char*>(data), size);
  }
};

// Every file of assets/, sorted by name.
extern const EmbeddedFile kEmbeddedWebAssets[];
extern const size_t kNumEmbeddedWebAssets;

// Every file of templates/, sorted by name.
extern const EmbeddedFile kEmbeddedWebTemplates[];
extern const size_t kNumEmbeddedWebTemplates;

// The file called `name` among `files[0, count)`, or null.
inline const EmbeddedFile* FindEmbeddedFile(const EmbeddedFile* files, size_t count,
                                            std::string_view name) {
  for (size_t i = 0; i < count; ++i) {
    if (name == files[i].name) return &files[i];
  }
  return nullptr;
}

}  // namespace rrpc
