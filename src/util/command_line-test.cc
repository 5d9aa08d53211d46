// The short --help of rrpc's binaries: what ShortHelp lists, and ParseCommandLine run for real
// in a forked child (it exits, as a binary's main would) with its output captured from a file.
#include "rrpc/util/command_line.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

DEFINE_int32(command_line_test_knob, 7, "A flag of this test file, which --help lists.");

namespace rrpc {
namespace {

gflags::CommandLineFlagInfo Flag(const std::string& name, const std::string& file,
                                 const std::string& type = "int32",
                                 const std::string& default_value = "1") {
  gflags::CommandLineFlagInfo f;
  f.name = name;
  f.type = type;
  f.description = "Help of " + name + ".";
  f.default_value = default_value;
  f.current_value = default_value;
  f.is_default = true;
  f.has_validator_fn = false;  // copied with the struct: an uninitialized bool trips UBSAN
  f.flag_ptr = nullptr;
  f.filename = file;
  return f;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ShortHelpTest, ListsTheNamedFilesFlagsInTheirOrderAfterTheUsageLine) {
  const std::vector<gflags::CommandLineFlagInfo> flags = {
      Flag("logtostderr", "/build/glog/src/logging.cc", "bool", "false"),
      Flag("rpc_num_workers", "../../src/rpc/messenger_flags.cc"),
      Flag("mode", "/work/x/bench/rpc_bench_main.cc", "string", "throughput"),
      Flag("server_addr", "/work/x/bench/rpc_bench_main.cc", "string", ""),
      // Ends with a wanted name but is another file.
      Flag("other", "/work/x/bench/not_rpc_bench_main.cc"),
  };
  const std::string help = ShortHelp(
      {"rpc-bench [flags]", "What it does.", {"bench/rpc_bench_main.cc", "rpc/messenger_flags.cc"}},
      flags);
  EXPECT_EQ(0u, help.rfind("Usage: rpc-bench [flags]\nWhat it does.\n", 0)) << help;
  const size_t own = help.find("\nFlags from bench/rpc_bench_main.cc:\n");
  const size_t rpc = help.find("\nFlags from src/rpc/messenger_flags.cc:\n");
  ASSERT_NE(std::string::npos, own) << help;
  ASSERT_NE(std::string::npos, rpc) << help;
  EXPECT_LT(own, rpc) << help;
  EXPECT_TRUE(Contains(help, "  --mode=throughput (string)\n      Help of mode.\n")) << help;
  EXPECT_TRUE(Contains(help, "  --server_addr=\"\" (string)\n")) << help;
  EXPECT_TRUE(Contains(help, "  --rpc_num_workers=1 (int32)\n")) << help;
  EXPECT_FALSE(Contains(help, "logtostderr")) << help;
  EXPECT_FALSE(Contains(help, "--other")) << help;
  EXPECT_TRUE(Contains(help, "--helpfull")) << help;
}

TEST(ShortHelpTest, WrapsLongLinesAndKeepsShortOnes) {
  gflags::CommandLineFlagInfo f = Flag("long", "src/a.cc");
  f.description = std::string(60, 'a') + " " + std::string(60, 'b');
  const std::string about = std::string(70, 'x') + " " + std::string(70, 'y') + "\n  short line\n";
  const std::string help = ShortHelp({"a", about, {"a.cc"}}, {f});
  EXPECT_TRUE(Contains(help, "      " + std::string(60, 'a') + "\n      " + std::string(60, 'b')))
      << help;
  EXPECT_TRUE(Contains(help, "Usage: a\n" + std::string(70, 'x') + "\n" + std::string(70, 'y') +
                                 "\n  short line\n\nFlags from"))
      << help;
}

// Runs ParseCommandLine on `arg` in a forked child whose stdout goes to a file; returns that
// output and the child's exit status (gflags' help flags exit).
std::string RunHelp(const std::string& arg, int* exit_status) {
  const std::string path = testing::TempDir() + "command_line-test-" + std::to_string(getpid());
  const pid_t pid = fork();
  if (pid == 0) {
    if (freopen(path.c_str(), "w", stdout) == nullptr) _exit(100);
    std::string program = "command_line-test";
    std::string flag = arg;
    char* args[] = {program.data(), flag.data(), nullptr};
    int argc = 2;
    char** argv = args;
    ParseCommandLine(
        &argc, &argv,
        {"command_line-test [flags]", "Tests the short help.", {"util/command_line-test.cc"}});
    _exit(101);  // Not reached: every help flag exits.
  }
  int status = 0;
  EXPECT_EQ(pid, waitpid(pid, &status, 0));
  *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  unlink(path.c_str());
  return out.str();
}

TEST(ParseCommandLineTest, HelpShowsTheUsageLineAndOwnFlagsOnly) {
  int status = -1;
  const std::string help = RunHelp("--help", &status);
  EXPECT_EQ(0, status);
  EXPECT_EQ(0u, help.rfind("Usage: command_line-test [flags]\nTests the short help.\n", 0)) << help;
  EXPECT_TRUE(Contains(help, "--command_line_test_knob=7 (int32)")) << help;
  EXPECT_FALSE(Contains(help, "logtostderr")) << help;
  EXPECT_FALSE(Contains(help, "flagfile")) << help;
}

TEST(ParseCommandLineTest, HelpfullStillListsEveryFlag) {
  int status = -1;
  const std::string help = RunHelp("--helpfull", &status);
  EXPECT_TRUE(Contains(help, "command_line_test_knob")) << help;
  EXPECT_TRUE(Contains(help, "logtostderr")) << help;
  EXPECT_TRUE(Contains(help, "flagfile")) << help;
}

}  // namespace
}  // namespace rrpc

namespace rrpc {
namespace {

TEST(SensitiveFlagTest, NamesMentioningSecretsAreSensitive) {
  for (const char* name :
       {"web_password_file", "rpc_auth_token_file", "db_SECRET", "passwd", "aws_credentials"}) {
    EXPECT_TRUE(IsSensitiveFlagName(name)) << name;
  }
  for (const char* name : {"rpc_certificate_file", "rpc_num_reactors", "data_dir"}) {
    EXPECT_FALSE(IsSensitiveFlagName(name)) << name;
  }
}

}  // namespace
}  // namespace rrpc
