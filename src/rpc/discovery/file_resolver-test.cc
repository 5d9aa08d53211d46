#include "rpc/discovery/file_resolver.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "rpc/discovery/resolver-test-util.h"

namespace rrpc::rpc {
namespace {

class FileResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/file-resolver-test.XXXXXX";
    ASSERT_NE(nullptr, mkdtemp(tmpl));
    dir_ = tmpl;
    path_ = dir_ + "/servers";
  }
  void TearDown() override {
    if (resolver_) resolver_->Stop();
    std::remove(path_.c_str());
    std::remove((path_ + ".tmp").c_str());
    rmdir(dir_.c_str());
  }

  // Writes `text` as editors do: to a temporary file, then renamed over the watched one.
  void WriteByRename(const std::string& text) {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(0, rename(tmp.c_str(), path_.c_str()));
  }
  void WriteInPlace(const std::string& text) { std::ofstream(path_, std::ios::trunc) << text; }

  void StartResolver() {
    auto r = NewResolver("file://" + path_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    resolver_ = std::move(*r);
    ASSERT_TRUE(resolver_->Start(recorder_.Listener()).ok());
  }

  std::string dir_;
  std::string path_;
  UpdateRecorder recorder_;
  std::unique_ptr<Resolver> resolver_;
};

TEST_F(FileResolverTest, ReadsHostPortLinesSkippingCommentsAndBlankLines) {
  WriteInPlace("# servers\n127.0.0.1:7001\n\n  127.0.0.2:7002  # second\n[::1]:7003\n");
  StartResolver();
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.2:7002", "[::1]:7003"}));
}

TEST_F(FileResolverTest, ReloadsWhenRenamedOverOrRewrittenInPlace) {
  WriteInPlace("127.0.0.1:7001\n");
  StartResolver();
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  WriteByRename("127.0.0.1:7001\n127.0.0.1:7002\n");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.1:7002"}));
  WriteInPlace("127.0.0.1:7003\n");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7003"}));
}

TEST_F(FileResolverTest, MissingOrMalformedFileReportsAnErrorAndRecovers) {
  WriteInPlace("127.0.0.1:7001\n");
  StartResolver();
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  ASSERT_EQ(0, unlink(path_.c_str()));
  EXPECT_TRUE(recorder_.WaitForError());
  WriteByRename("127.0.0.1:7002 127.0.0.1:7003\n");
  EXPECT_TRUE(recorder_.WaitFor([](const Result<std::vector<Sockaddr>>& u) {
    return !u.ok() && u.status().IsInvalidArgument() &&
           u.status().ToString().find("line 1") != std::string::npos;
  }));
  WriteByRename("127.0.0.1:7002\nnot-an-address\n");
  EXPECT_TRUE(recorder_.WaitFor([](const Result<std::vector<Sockaddr>>& u) {
    return !u.ok() && u.status().IsInvalidArgument() &&
           u.status().ToString().find("line 2") != std::string::npos;
  }));
  WriteByRename("127.0.0.1:7002\n");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7002"}));
}

TEST_F(FileResolverTest, FileMissingAtStartIsAnErrorUntilItAppears) {
  StartResolver();
  EXPECT_TRUE(recorder_.WaitForError());
  WriteByRename("127.0.0.1:7005\n");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7005"}));
}

TEST_F(FileResolverTest, PathThatCannotBeReadReportsAnError) {
  WriteInPlace("127.0.0.1:7001\n");
  StartResolver();
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  // A directory where the file was: open succeeds, read fails (EISDIR), as for a file gone
  // unreadable (a chmod would not stop root, which runs these tests in CI).
  ASSERT_EQ(0, unlink(path_.c_str()));
  ASSERT_TRUE(recorder_.WaitForError());
  ASSERT_EQ(0, mkdir(path_.c_str(), 0755));
  EXPECT_TRUE(recorder_.WaitFor([](const Result<std::vector<Sockaddr>>& u) {
    return !u.ok() && u.status().ToString().find("read") != std::string::npos;
  }));
  ASSERT_EQ(0, rmdir(path_.c_str()));
}

TEST_F(FileResolverTest, DirectoryRemovedAndMadeAgainIsWatchedAgain) {
  WriteInPlace("127.0.0.1:7001\n");
  StartResolver();
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  ASSERT_EQ(0, unlink(path_.c_str()));
  ASSERT_EQ(0, rmdir(dir_.c_str()));
  ASSERT_TRUE(recorder_.WaitForError());
  ASSERT_EQ(0, mkdir(dir_.c_str(), 0755));
  WriteByRename("127.0.0.1:7006\n");
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7006"}));
}

TEST(FileResolverTargetTest, RelativeOrDirectoryPathsAreRefused) {
  for (const char* bad : {"file://", "file://relative/path", "file:///tmp/"}) {
    auto r = NewResolver(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad;
  }
}

}  // namespace
}  // namespace rrpc::rpc
