#include "rrpc/util/command_line.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rrpc {

namespace {

constexpr size_t kLineWidth = 100;
constexpr std::string_view kDescriptionIndent = "      ";

// Whether `defined_in` (the __FILE__ of a flag's definition: absolute, or relative to the build
// directory) is the file `wanted` names relative to src/.
bool SameFile(std::string_view defined_in, std::string_view wanted) {
  if (defined_in == wanted) return true;
  // Or ".../<wanted>".
  if (defined_in.size() <= wanted.size()) return false;
  const size_t start = defined_in.size() - wanted.size();
  return defined_in[start - 1] == '/' && defined_in.substr(start) == wanted;
}

// The path from the repository's top folder: "src/rpc/messenger_flags.cc" from
// "/work/x/src/rpc/messenger_flags.cc" or "../../src/rpc/messenger_flags.cc", and
// "bench/rpc_bench_main.cc" from "/work/x/bench/rpc_bench_main.cc".
std::string_view DisplayPath(std::string_view path) {
  size_t from = std::string_view::npos;
  for (std::string_view top : {"/src/", "/bench/", "/examples/"}) {
    const size_t at = path.rfind(top);
    if (at != std::string_view::npos && (from == std::string_view::npos || at > from)) from = at;
  }
  return from == std::string_view::npos ? path : path.substr(from + 1);
}

// Appends `text` word-wrapped to kLineWidth, every line starting with `indent`.
void AppendWrapped(std::string_view text, std::string_view indent, std::string* out) {
  size_t column = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t space = text.find(' ', pos);
    const size_t end = space == std::string_view::npos ? text.size() : space;
    const std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (column > 0 && column + 1 + word.size() > kLineWidth) {
      out->push_back('\n');
      column = 0;
    }
    if (column == 0) {
      out->append(indent);
      column = indent.size();
    } else {
      out->push_back(' ');
      column++;
    }
    out->append(word);
    column += word.size();
  }
  if (column > 0) out->push_back('\n');
}

// `text` with its lines longer than kLineWidth wrapped; shorter lines stay as they are, so a
// caller's own layout (a list of commands) is kept.
void AppendParagraphs(std::string_view text, std::string* out) {
  while (!text.empty()) {
    const size_t eol = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, eol);
    if (line.size() > kLineWidth) {
      AppendWrapped(line, "", out);
    } else {
      out->append(line).push_back('\n');
    }
    text.remove_prefix(std::min(eol + 1, text.size()));
  }
}

// "  --payload_bytes=64 (int32)" and the flag's help below it.
void AppendFlag(const gflags::CommandLineFlagInfo& flag, std::string* out) {
  out->append("  --").append(flag.name).append("=");
  out->append(flag.default_value.empty() && flag.type == "string" ? "\"\"" : flag.default_value);
  out->append(" (").append(flag.type).append(")\n");
  AppendWrapped(flag.description, kDescriptionIndent, out);
}

}  // namespace

std::string ShortHelp(const CommandLineUsage& usage,
                      const std::vector<gflags::CommandLineFlagInfo>& flags) {
  std::string out = "Usage: " + usage.synopsis + "\n";
  AppendParagraphs(usage.about, &out);
  for (const std::string& file : usage.flag_files) {
    std::string group;
    std::string_view defined_in;
    for (const gflags::CommandLineFlagInfo& flag : flags) {
      if (!SameFile(flag.filename, file)) continue;
      defined_in = flag.filename;
      AppendFlag(flag, &group);
    }
    if (group.empty()) continue;
    out.append("\nFlags from ").append(DisplayPath(defined_in)).append(":\n").append(group);
  }
  out += "\n--helpfull lists every flag, also those of the libraries (logging: glog; gflags).\n";
  return out;
}

void ParseCommandLine(int* argc, char*** argv, const CommandLineUsage& usage) {
  gflags::SetUsageMessage("Usage: " + usage.synopsis + "\n" + usage.about);
  gflags::ParseCommandLineNonHelpFlags(argc, argv, /*remove_flags=*/true);
  std::string help;
  if (gflags::GetCommandLineOption("help", &help) && help == "true") {
    std::vector<gflags::CommandLineFlagInfo> flags;
    gflags::GetAllFlags(&flags);  // sorted by file, then by name
    const std::string text = ShortHelp(usage, flags);
    fwrite(text.data(), 1, text.size(), stdout);
    fflush(stdout);
    exit(0);
  }
  gflags::HandleCommandLineHelpFlags();
}

bool IsSensitiveFlagName(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"password", "passwd", "secret", "token", "credential"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace rrpc
