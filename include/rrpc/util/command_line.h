// Command-line parsing for rrpc's binaries and servers built on it (installed): gflags, except that
// --help is short. gflags' own
// --help lists every flag linked into the program (glog's, gflags' and every library's), which
// buries the few a user of the binary needs. Here --help prints a usage line, what the program
// does, and only the flags defined in the files the binary names: its own first, then the rrpc
// flags it honours (e.g. rpc/messenger_flags.cc), each group under its file. The other help flags
// stay gflags': --helpfull lists every flag, --helpmatch=S those of files matching S, --version.
//
// Call from main() before any other thread starts (gflags' parsing is not thread-safe).
//
//   int main(int argc, char** argv) {
//     rrpc::ParseCommandLine(&argc, &argv,
//                            {"kv-server [flags]", "The example storage server.",
//                             {"kv/kv_server_main.cc", "server/server_base_flags.cc",
//                              "rpc/messenger_flags.cc"}});
//     ...
#pragma once

#include <gflags/gflags.h>

#include <string>
#include <vector>

namespace rrpc {

struct CommandLineUsage {
  // What follows "Usage: " on the first line, e.g. "kv-cli [flags] get KEY".
  std::string synopsis;
  // What the program does, and anything else a user needs before its flags; may span lines.
  std::string about;
  // The files whose flags --help lists, in this order, each matched against the end of the path
  // of the file a flag was defined in: an application's own ("store_server_main.cc"), rrpc's by
  // their path under its src/ ("server/server_base_flags.cc", "rpc/messenger_flags.cc").
  std::vector<std::string> flag_files;
};

// Parses the command line as gflags::ParseCommandLineFlags(argc, argv, true) does (flags are
// removed from argv; a bad flag exits with an error) and sets gflags' usage message. With --help
// it prints ShortHelp() to stdout and exits with status 0; --helpfull and gflags' other help
// flags work as usual.
void ParseCommandLine(int* argc, char*** argv, const CommandLineUsage& usage);

// Whether a flag's value must not be shown (its name mentions a password, secret, token or
// credential): /varz and the status service's flag listing hide such values.
bool IsSensitiveFlagName(const std::string& name);
// The value pages show for a sensitive flag.
inline constexpr char kRedactedFlagValue[] = "<redacted>";

// The text --help prints: "Usage: <synopsis>", `about`, then the flags among `flags` that were
// defined in usage.flag_files, grouped by file in that order, and a last line pointing to
// --helpfull.
std::string ShortHelp(const CommandLineUsage& usage,
                      const std::vector<gflags::CommandLineFlagInfo>& flags);

}  // namespace rrpc
