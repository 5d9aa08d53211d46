// /varz: every gflag with its current value, its default, its type, its help and the file that
// defines it; flags that look like secrets have their values hidden (the UI has no
// authentication). Runs on the web server's threads.
#include <gflags/gflags.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "rrpc/util/command_line.h"
#include "server/web/web_page_areas.h"
#include "server/web/web_page_format.h"

namespace rrpc::web_page {

namespace {

constexpr const char* kRedacted = kRedactedFlagValue;

std::vector<gflags::CommandLineFlagInfo> SortedFlags() {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  std::sort(flags.begin(), flags.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& f : flags) {
    if (IsSensitiveFlagName(f.name)) {
      if (!f.current_value.empty()) f.current_value = kRedacted;
      if (!f.default_value.empty()) f.default_value = kRedacted;
    }
  }
  return flags;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string VarzJson() {
  const auto flags = SortedFlags();
  std::string out;
  JsonObject root(&out);
  AppendJsonArray(
      flags,
      [](const gflags::CommandLineFlagInfo& f, JsonObject* o) {
        o->Str("name", f.name)
            .Str("type", f.type)
            .Str("value", f.current_value)
            .Str("default", f.default_value)
            .Bool("is_default", f.is_default)
            .Str("description", f.description)
            .Str("file", BaseName(f.filename));
      },
      root.Member("flags"));
  root.Close();
  return out;
}

std::string VarzHtml(const PageEnv& env) {
  const auto flags = SortedFlags();
  size_t changed = 0;
  for (const auto& f : flags) changed += f.is_default ? 0 : 1;
  std::string content;
  const std::vector<Column> columns = {{"Name", false},        {"Value", false},
                                       {"Default", false},     {"Type", false},
                                       {"Description", false}, {"Defined in", false}};
  BeginTable("Flags", std::to_string(flags.size()) + " (" + std::to_string(changed) + " set)",
             "flags that were set are highlighted", columns, &content);
  for (const auto& f : flags) {
    content += f.is_default ? "<tr>" : "<tr class=\"changed\">";
    Cell("mono nowrap", f.name, &content);
    Cell("mono value", f.current_value, &content);
    Cell("mono muted", f.default_value, &content);
    Cell("muted", f.type, &content);
    Cell("desc", f.description, &content);
    Cell("mono muted nowrap", BaseName(f.filename), &content);
    content += "</tr>\n";
  }
  if (flags.empty()) EmptyRow(columns.size(), "No flags.", &content);
  EndTable(&content);
  return RenderPage(
      env, {"Flags", "/varz", "every command-line flag, its current value and its default"},
      content);
}

}  // namespace

void RegisterVarzPage(Webserver* web, std::shared_ptr<const PageEnv> env) {
  RegisterHtmlOrJsonPage(
      web, "/varz", [env] { return VarzHtml(*env); }, [] { return VarzJson(); });
}

}  // namespace rrpc::web_page
