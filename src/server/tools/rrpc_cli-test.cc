// Tests of rrpc-cli: the built binary runs as a child process against an in-process messenger
// that serves the RPC tests' echo service and the reflection service (and, for `status`, a fake
// status service); the tests check its stdout, stderr and exit code.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "rpc/observe/rpcz_store.h"
#include "rpc/security/ephemeral_certs.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/server/reflection_service.h"
#include "rrpc/server/server_status.rrpc.h"
#include "server/tools/cli_commands.h"
#include "server/web/webserver.h"
#include "util/socket.h"

extern char** environ;

namespace rrpc::server {
namespace {

namespace fs = std::filesystem;

std::string CliPath() {
#ifdef RRPC_CLI_PATH
  return RRPC_CLI_PATH;
#else
  return (fs::read_symlink("/proc/self/exe").parent_path() / "rrpc-cli").string();
#endif
}

// The roots of rpc/testing/rtest.proto (src/) and of what it imports (the public include/),
// set for every test by rrpc_tests().
std::string SourceDir() { return RRPC_SOURCE_DIR; }
std::string PublicIncludeDir() { return RRPC_PUBLIC_INCLUDE_DIR; }

#ifdef KV_SERVER_PATH
std::string KvServerPath() { return KV_SERVER_PATH; }
#endif

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Starts `args[0]` with stdout and stderr in the given files; returns its pid, or -1.
pid_t Spawn(std::vector<std::string> args, const fs::path& out, const fs::path& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << args[0] << ": " << strerror(rc);
    return -1;
  }
  return pid;
}

// Waits for `pid` to exit; its exit code, or 128 + the signal that killed it.
int Reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// A fake of ServerBase's status service, so `rrpc-cli status` has something to call.
class FakeStatusService : public ServerStatusServiceIf {
 public:
  void GetStatus(const GetStatusRequestPB* req, GetStatusResponsePB* resp,
                 rpc::RpcContext* context) override {
    resp->set_version("9.9.9");
    resp->set_uptime_seconds(1.5);
    resp->set_server_name("fake");
    resp->set_healthy(true);
    resp->set_health("OK");
    context->RespondSuccess();
  }
  void GetMetrics(const GetMetricsRequestPB* req, GetMetricsResponsePB* resp,
                  rpc::RpcContext* context) override {
    resp->set_prometheus_text("# TYPE rrpc_fake_total counter\nrrpc_fake_total 3\n");
    context->RespondSuccess();
  }
};

class RrpcCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_ = fs::temp_directory_path() /
               ("rrpc-cli-test-" + std::to_string(getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
  }
  void TearDown() override {
    for (auto& server : servers_) server->Shutdown();
    fs::remove_all(scratch_);
  }

  // A messenger on 127.0.0.1 serving the echo service, plus reflection and the fake status
  // service when asked; returns "127.0.0.1:PORT".
  std::string StartServer(bool with_reflection, bool with_status = false) {
    auto built = rpc::MessengerBuilder("server").Build();
    CHECK(built.ok()) << built.status().ToString();
    std::shared_ptr<rpc::Messenger> server = std::move(built).value();
    RRPC_CHECK_OK(server->RegisterService(std::make_unique<rpc::TestEchoService>()));
    if (with_reflection) {
      RRPC_CHECK_OK(server->RegisterService(MakeReflectionService(server.get())));
    }
    if (with_status) RRPC_CHECK_OK(server->RegisterService(std::make_unique<FakeStatusService>()));
    Sockaddr bound;
    RRPC_CHECK_OK(server->Listen(Sockaddr::Loopback(0), &bound));
    servers_.push_back(server);
    return bound.ToString();
  }

  // Runs rrpc-cli with `args` and waits for it. A generous timeout: a loaded machine must not
  // turn a passing call into a failure (the CLI itself bounds every wait).
  CliRun Run(std::vector<std::string> args) {
    args.insert(args.begin(), {CliPath(), "--timeout_ms=60000"});
    const fs::path out = scratch_ / "out";
    const fs::path err = scratch_ / "err";
    CliRun run;
    pid_t pid = Spawn(std::move(args), out, err);
    if (pid < 0) return run;
    run.exit_code = Reap(pid);
    run.out = ReadFile(out);
    run.err = ReadFile(err);
    return run;
  }

  fs::path scratch_;
  std::vector<std::shared_ptr<rpc::Messenger>> servers_;
};

bool Contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

TEST_F(RrpcCliTest, SpeaksTlsAndAuthenticatesWithAMintedToken) {
  const std::string dir = scratch_.string();
  security::EphemeralCa ca("cli-test-ca");
  security::CertSpec spec;
  spec.common_name = "server";
  spec.ip_sans = {"127.0.0.1"};
  const security::CertFiles cert = ca.Issue(dir, "server", spec);
  const std::string ca_file = ca.WriteCaCertificate(dir, "ca");
  const std::string key_file = dir + "/token.key";
  std::ofstream(key_file) << "0123456789abcdef0123456789abcdef-cli\n";
  rpc::MessengerOptions options;
  options.name = "server";
  options.security.certificate_file = cert.certificate;
  options.security.private_key_file = cert.private_key;
  options.security.ca_certificate_file = ca_file;
  options.security.token_key_file = key_file;
  options.security.encryption = rpc::SecurityPolicy::kRequired;
  options.security.authentication = rpc::SecurityPolicy::kRequired;
  auto built = rpc::MessengerBuilder(options).Build();
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  std::shared_ptr<rpc::Messenger> server = std::move(built).value();
  servers_.push_back(server);
  RRPC_CHECK_OK(server->RegisterService(std::make_unique<rpc::TestEchoService>()));
  RRPC_CHECK_OK(server->RegisterService(MakeReflectionService(server.get())));
  Sockaddr bound;
  RRPC_CHECK_OK(server->Listen(Sockaddr::Loopback(0), &bound));
  const std::string addr = bound.ToString();

  CliRun minted = Run({"mint-token", key_file, "carol", "600"});
  ASSERT_EQ(0, minted.exit_code) << minted.err;
  std::ofstream(dir + "/carol.token") << minted.out;

  CliRun call =
      Run({"--rpc_ca_certificate_file=" + ca_file, "--rpc_auth_token_file=" + dir + "/carol.token",
           "call", addr, "rrpc.rtest.EchoService.Echo", "data: \"over tls\""});
  EXPECT_EQ(0, call.exit_code) << call.err;
  EXPECT_EQ("data: \"over tls\"\n", call.out);

  CliRun plain = Run({"call", addr, "rrpc.rtest.EchoService.Echo", "data: \"x\""});
  EXPECT_EQ(1, plain.exit_code) << plain.err;
  EXPECT_TRUE(Contains(plain.err, "rpc_encryption=required")) << plain.err;

  CliRun anonymous = Run({"--rpc_ca_certificate_file=" + ca_file, "call", addr,
                          "rrpc.rtest.EchoService.Echo", "data: \"x\""});
  EXPECT_EQ(1, anonymous.exit_code) << anonymous.err;
  EXPECT_TRUE(Contains(anonymous.err, "rpc_authentication=required")) << anonymous.err;
}

TEST_F(RrpcCliTest, CallsEchoAndAddFromTextFormatRequests) {
  const std::string addr = StartServer(/*with_reflection=*/true);
  CliRun echo = Run({"call", addr, "rrpc.rtest.EchoService.Echo", "data: \"hello cli\""});
  EXPECT_EQ(0, echo.exit_code) << echo.err;
  EXPECT_EQ("data: \"hello cli\"\n", echo.out);
  // The call's trace id, and nothing else, on stderr.
  EXPECT_EQ(std::string("trace_id: ").size() + 32 + 1, echo.err.size()) << echo.err;
  EXPECT_TRUE(Contains(echo.err, "trace_id: ")) << echo.err;

  CliRun add = Run({"call", addr, "rrpc.rtest.EchoService/Add", "a: 40 b: 2"});
  EXPECT_EQ(0, add.exit_code) << add.err;
  EXPECT_EQ("sum: 42\n", add.out);
}

TEST_F(RrpcCliTest, CallCarriesTheTraceparentGivenAndPrintsItsTraceId) {
  const std::string addr = StartServer(/*with_reflection=*/true);
  CliRun run = Run({"--traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "call",
                    addr, "rrpc.rtest.EchoService.Echo", "data: \"traced\""});
  EXPECT_EQ(0, run.exit_code) << run.err;
  EXPECT_EQ("trace_id: 4bf92f3577b34da6a3ce929d0e0e4736\n", run.err);
  // The server kept the call's span under that trace (the CLI's call is sampled).
  const rpc::RpczStore* rpcz = servers_.back()->rpcz_store();
  EXPECT_TRUE(rpc::WaitForCondition(
      [&] { return !rpcz->ListSpans(0x4bf92f3577b34da6ULL, 0xa3ce929d0e0e4736ULL).empty(); }));

  CliRun bad = Run(
      {"--traceparent=00-nothex-01", "call", addr, "rrpc.rtest.EchoService.Echo", "data: \"x\""});
  EXPECT_EQ(kCliExitBadInput, bad.exit_code);
  EXPECT_TRUE(Contains(bad.err, "bad --traceparent")) << bad.err;
}

// A cluster target where an address goes: the call (and the reflection lookup) go to one of its
// servers, a dead one in the list is skipped, and a bad or empty target is a clear error.
TEST_F(RrpcCliTest, CallsThroughAClusterTarget) {
  const std::string a = StartServer(/*with_reflection=*/true);
  const std::string b = StartServer(/*with_reflection=*/true);
  auto dead = Socket::CreateTcp(AF_INET);  // bound, not listening: connections are refused
  ASSERT_TRUE(dead.ok());
  ASSERT_TRUE(dead->Bind(Sockaddr::Loopback(0)).ok());
  const std::string dead_addr = dead->GetSocketAddress()->ToString();
  const std::string file = (scratch_ / "servers").string();
  std::ofstream(file) << a << "\n" << b << "\n";
  for (const std::string& target : {"list://" + dead_addr + "," + a + "," + b, "file://" + file}) {
    SCOPED_TRACE(target);
    for (int i = 0; i < 3; i++) {
      CliRun add = Run({"call", target, "rrpc.rtest.EchoService.Add", "a: 40 b: 2"});
      EXPECT_EQ(0, add.exit_code) << add.err;
      EXPECT_EQ("sum: 42\n", add.out);
    }
    CliRun list = Run({"list", target});
    EXPECT_EQ(0, list.exit_code) << list.err;
    EXPECT_TRUE(Contains(list.out, "rrpc.rtest.EchoService\n")) << list.out;
  }
  CliRun bad = Run({"call", "nope://x", "rrpc.rtest.EchoService.Echo", "data: 'x'"});
  EXPECT_EQ(kCliExitBadInput, bad.exit_code) << bad.err;
  EXPECT_TRUE(Contains(bad.err, "nope://x")) << bad.err;
  const std::string empty = (scratch_ / "empty").string();
  std::ofstream(empty) << "# no servers\n";
  CliRun none = Run({"call", "file://" + empty, "rrpc.rtest.EchoService.Echo", "data: 'x'"});
  EXPECT_EQ(kCliExitCallFailed, none.exit_code) << none.err;
  EXPECT_TRUE(Contains(none.err, "no servers")) << none.err;
}

TEST_F(RrpcCliTest, ListsServicesWithTheirMethods) {
  const std::string addr = StartServer(/*with_reflection=*/true);
  CliRun run = Run({"list", addr});
  EXPECT_EQ(0, run.exit_code) << run.err;
  EXPECT_EQ(
      "rrpc.rtest.EchoService\n"
      "  Echo(rrpc.rtest.EchoRequestPB) returns (rrpc.rtest.EchoResponsePB)\n"
      "  Add(rrpc.rtest.AddRequestPB) returns (rrpc.rtest.AddResponsePB)\n"
      "rrpc.server.ServerReflection\n"
      "  ListServices(rrpc.server.ListServicesRequestPB) returns "
      "(rrpc.server.ListServicesResponsePB)\n"
      "  GetFileDescriptors(rrpc.server.GetFileDescriptorsRequestPB) returns "
      "(rrpc.server.GetFileDescriptorsResponsePB)\n",
      run.out);
}

TEST_F(RrpcCliTest, UnknownServiceOrMethodExitsWithBadInputAndSaysWhatExists) {
  const std::string addr = StartServer(/*with_reflection=*/true);
  CliRun method = Run({"call", addr, "rrpc.rtest.EchoService.Nope", ""});
  EXPECT_EQ(kCliExitBadInput, method.exit_code);
  EXPECT_EQ("", method.out);
  EXPECT_TRUE(Contains(method.err, "service rrpc.rtest.EchoService has no method Nope"))
      << method.err;
  EXPECT_TRUE(Contains(method.err, "Echo, Add")) << method.err;

  CliRun service = Run({"call", addr, "EchoService.Echo", "data: 'x'"});
  EXPECT_EQ(kCliExitBadInput, service.exit_code);
  EXPECT_TRUE(Contains(service.err, "the server has no service EchoService")) << service.err;
  EXPECT_TRUE(Contains(service.err, "rrpc.rtest.EchoService")) << service.err;

  CliRun malformed = Run({"call", addr, "NoDotHere", ""});
  EXPECT_EQ(kCliExitBadInput, malformed.exit_code);
  EXPECT_TRUE(Contains(malformed.err, "expected SERVICE.METHOD")) << malformed.err;
}

TEST_F(RrpcCliTest, BadRequestTextExitsWithBadInputAndTheParsersMessage) {
  const std::string addr = StartServer(/*with_reflection=*/true);
  CliRun syntax = Run({"call", addr, "rrpc.rtest.EchoService.Add", "a: 1 b:"});
  EXPECT_EQ(kCliExitBadInput, syntax.exit_code);
  EXPECT_TRUE(Contains(syntax.err, "bad rrpc.rtest.AddRequestPB in text format")) << syntax.err;
  EXPECT_TRUE(Contains(syntax.err, "1:")) << "the position of the error: " << syntax.err;

  CliRun unknown_field = Run({"call", addr, "rrpc.rtest.EchoService.Add", "a: 1 c: 2"});
  EXPECT_EQ(kCliExitBadInput, unknown_field.exit_code);
  EXPECT_TRUE(Contains(unknown_field.err, "\"c\"")) << unknown_field.err;

  CliRun missing = Run({"call", addr, "rrpc.rtest.EchoService.Add", "a: 1"});
  EXPECT_EQ(kCliExitBadInput, missing.exit_code);
  EXPECT_TRUE(Contains(missing.err, "missing required fields")) << missing.err;
}

TEST_F(RrpcCliTest, ServerErrorExitsWithCallFailedAndItsMessage) {
  const std::string addr = StartServer(/*with_reflection=*/true);
  CliRun run = Run({"call", addr, "rrpc.rtest.EchoService.Echo", "data: 'x' fail_with: 'boom'"});
  EXPECT_EQ(kCliExitCallFailed, run.exit_code);
  EXPECT_EQ("", run.out);
  EXPECT_TRUE(Contains(run.err, "boom")) << run.err;
}

TEST_F(RrpcCliTest, UnreachableServerExitsWithCallFailed) {
  // A bound socket that does not listen: connecting to it is refused at once.
  auto sock = Socket::CreateTcp(AF_INET);
  ASSERT_TRUE(sock.ok());
  ASSERT_TRUE(sock->Bind(Sockaddr::Loopback(0)).ok());
  auto addr = sock->GetSocketAddress();
  ASSERT_TRUE(addr.ok());
  CliRun run = Run({"call", addr->ToString(), "rrpc.rtest.EchoService.Echo", "data: 'x'"});
  EXPECT_EQ(kCliExitCallFailed, run.exit_code);
  EXPECT_EQ("", run.out);
  EXPECT_TRUE(Contains(run.err, "error: ")) << run.err;
  EXPECT_TRUE(Contains(run.err, addr->ToString())) << run.err;
}

TEST_F(RrpcCliTest, TakesDescriptorsFromProtoFilesWhenTheServerHasNoReflection) {
  const std::string addr = StartServer(/*with_reflection=*/false);
  CliRun without = Run({"call", addr, "rrpc.rtest.EchoService.Add", "a: 1 b: 2"});
  EXPECT_EQ(kCliExitBadInput, without.exit_code);
  EXPECT_TRUE(Contains(without.err, "does not serve rrpc.server.ServerReflection")) << without.err;

  CliRun with = Run({"--proto=rpc/testing/rtest.proto",
                     "--proto_path=" + SourceDir() + ":" + PublicIncludeDir(), "call", addr,
                     "rrpc.rtest.EchoService.Add", "a: 1 b: 2"});
  EXPECT_EQ(0, with.exit_code) << with.err;
  EXPECT_EQ("sum: 3\n", with.out);

  // The file declares CalculatorService too, but this server does not serve it.
  CliRun unserved = Run({"--proto=rpc/testing/rtest.proto",
                         "--proto_path=" + SourceDir() + ":" + PublicIncludeDir(), "call", addr,
                         "rrpc.rtest.CalculatorService.Add", "a: 1 b: 2"});
  EXPECT_EQ(kCliExitBadInput, unserved.exit_code);
  EXPECT_TRUE(Contains(unserved.err, "does not serve rrpc.rtest.CalculatorService.Add"))
      << unserved.err;

  std::ofstream(scratch_ / "broken.proto") << "syntax = \"proto2\";\nmessage M { oops }\n";
  CliRun broken = Run(
      {"--proto=broken.proto", "--proto_path=" + scratch_.string(), "call", addr, "M.Call", ""});
  EXPECT_EQ(kCliExitBadInput, broken.exit_code);
  EXPECT_TRUE(Contains(broken.err, "cannot load broken.proto")) << broken.err;
  EXPECT_TRUE(Contains(broken.err, "broken.proto:2:")) << broken.err;
}

TEST_F(RrpcCliTest, StatusCallsTheStatusServiceByReflection) {
  const std::string addr = StartServer(/*with_reflection=*/true, /*with_status=*/true);
  CliRun run = Run({"status", addr});
  EXPECT_EQ(0, run.exit_code) << run.err;
  EXPECT_TRUE(Contains(run.out, "version: \"9.9.9\"\n")) << run.out;
  EXPECT_TRUE(Contains(run.out, "server_name: \"fake\"\n")) << run.out;

  const std::string bare = StartServer(/*with_reflection=*/true);
  CliRun missing = Run({"status", bare});
  EXPECT_EQ(kCliExitBadInput, missing.exit_code);
  EXPECT_TRUE(Contains(missing.err, "no service rrpc.server.ServerStatusService")) << missing.err;
}

TEST_F(RrpcCliTest, MetricsComeFromTheStatusServiceOrTheWebUi) {
  const std::string addr = StartServer(/*with_reflection=*/true, /*with_status=*/true);
  CliRun over_rpc = Run({"metrics", addr});
  EXPECT_EQ(0, over_rpc.exit_code) << over_rpc.err;
  EXPECT_EQ("# TYPE rrpc_fake_total counter\nrrpc_fake_total 3\n", over_rpc.out);

  const std::string bare = StartServer(/*with_reflection=*/true);
  CliRun without = Run({"metrics", bare});
  EXPECT_EQ(kCliExitBadInput, without.exit_code);
  EXPECT_TRUE(Contains(without.err, "--webserver")) << without.err;

  Webserver web(WebserverOptions{});
  web.RegisterPage("/metrics", [](const WebRequest&, WebResponse* resp) {
    resp->body = "# TYPE rrpc_test_total counter\nrrpc_test_total 7\n";
  });
  ASSERT_TRUE(web.Start().ok());
  CliRun with = Run({"--webserver=127.0.0.1:" + std::to_string(web.bound_port()), "metrics", addr});
  EXPECT_EQ(0, with.exit_code) << with.err;
  EXPECT_EQ("# TYPE rrpc_test_total counter\nrrpc_test_total 7\n", with.out);
  web.Stop();
}

TEST_F(RrpcCliTest, UsageErrorsExitWithBadInput) {
  EXPECT_EQ(kCliExitBadInput, Run({}).exit_code);
  CliRun unknown = Run({"frobnicate", "127.0.0.1:1"});
  EXPECT_EQ(kCliExitBadInput, unknown.exit_code);
  EXPECT_TRUE(Contains(unknown.err, "unknown command 'frobnicate'")) << unknown.err;
  EXPECT_EQ(kCliExitBadInput, Run({"call", "127.0.0.1:1"}).exit_code);
}

#ifdef KV_SERVER_PATH
// The example storage server, as an operator would use the CLI on it: status, a write and a read.
TEST_F(RrpcCliTest, DrivesTheKvServerEndToEnd) {
  const fs::path port_file = scratch_ / "port";
  pid_t server = Spawn({KvServerPath(), "--rpc_bind=127.0.0.1:0",
                        "--webserver_bind=", "--data_dir=" + (scratch_ / "data").string(),
                        "--port_file=" + port_file.string()},
                       scratch_ / "kv.out", scratch_ / "kv.err");
  ASSERT_GT(server, 0);
  // Whatever happens below, the server stops (SIGTERM drains it) and is reaped.
  struct Stopper {
    pid_t pid;
    ~Stopper() {
      kill(pid, SIGTERM);
      Reap(pid);
    }
  } stopper{server};
  ASSERT_TRUE(rpc::WaitForCondition([&] { return fs::exists(port_file); }))
      << ReadFile(scratch_ / "kv.err");
  const std::string addr = "127.0.0.1:" + std::to_string(std::stoi(ReadFile(port_file)));

  // ServerBase registers the reflection service: no .proto files needed.
  CliRun list = Run({"list", addr});
  EXPECT_EQ(0, list.exit_code) << list.err;
  EXPECT_TRUE(Contains(list.out, "rrpc.kv.KvService\n  Put(rrpc.kv.PutRequestPB)")) << list.out;
  EXPECT_TRUE(Contains(list.out, "rrpc.server.ServerStatusService\n")) << list.out;

  CliRun status = Run({"status", addr});
  EXPECT_EQ(0, status.exit_code) << status.err;
  EXPECT_TRUE(Contains(status.out, "server_name: \"kv-server\"")) << status.out;

  CliRun put = Run({"call", addr, "rrpc.kv.KvService.Put", "key: 'k1' value: 'v1'"});
  EXPECT_EQ(0, put.exit_code) << put.err;
  EXPECT_EQ("", put.out);
  CliRun get = Run({"call", addr, "rrpc.kv.KvService.Get", "key: 'k1'"});
  EXPECT_EQ(0, get.exit_code) << get.err;
  EXPECT_EQ("found: true\nvalue: \"v1\"\n", get.out);

  // Over RPC (ServerStatusService.GetMetrics): the Put above shows in its method's counter.
  CliRun metrics = Run({"metrics", addr});
  EXPECT_EQ(0, metrics.exit_code) << metrics.err;
  EXPECT_TRUE(Contains(metrics.out, "# TYPE rrpc_calls_total counter")) << metrics.out;
  EXPECT_TRUE(Contains(metrics.out, "id=\"rrpc.kv.KvService.Put\"")) << metrics.out;
}
#endif

}  // namespace
}  // namespace rrpc::server
