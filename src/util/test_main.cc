// main() for every rrpc gtest binary: gtest, gflags and glog set up once.
//
// Exit status: 1 when a test failed; otherwise 77 when any test skipped (rrpc_tests() sets
// SKIP_RETURN_CODE 77, so ctest reports the binary as skipped, never as passed); otherwise 0.
// Each skipped test is listed on stdout as "rrpc-skipped: Suite.Name: reason", the line
// build-support/check-skips.py reads to hold CI to its allow-list (docs/testing.md).
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// Collects the tests that skipped, with the message GTEST_SKIP() gave.
class SkipCollector : public testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (result.skipped()) message_ = result.message();
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Skipped()) {
      skipped_.push_back(std::string(info.test_suite_name()) + "." + info.name() + ": " + message_);
    }
    message_.clear();
  }
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  std::string message_;
  std::vector<std::string> skipped_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  signal(SIGPIPE, SIG_IGN);
  auto* skips = new SkipCollector;  // Owned by gtest's listener list.
  testing::UnitTest::GetInstance()->listeners().Append(skips);
  if (RUN_ALL_TESTS() != 0) return 1;
  for (const std::string& s : skips->skipped()) {
    std::string line = s;
    for (char& c : line) {
      if (c == '\n') c = ' ';
    }
    printf("rrpc-skipped: %s\n", line.c_str());
  }
  fflush(stdout);
  return skips->skipped().empty() ? 0 : 77;
}
