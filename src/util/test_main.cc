// main() for every rrpc gtest binary: gtest, gflags and glog set up once.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <csignal>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  signal(SIGPIPE, SIG_IGN);
  return RUN_ALL_TESTS();
}
