// rpc-bench --transport=tls: both sides speak TLS on the benchmark's one port. The certificates
// are the --rpc_* security flags' when given (a server certificate and the CA that signed it);
// otherwise a throwaway CA and a certificate for 127.0.0.1 and ::1 are made at start (EC P-256,
// in a temporary directory), so an A/B run needs no setup. Main thread, before the run.
#pragma once

#include <string>

#include "bench/bench_config.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

// Makes `server` require TLS with a certificate and `config`'s client messenger and raw
// connections use TLS and verify it. Returns a line saying where the certificates came from.
Result<std::string> ConfigureBenchTls(rpc::MessengerOptions* server, BenchConfig* config);
// Client only (--server_addr): TLS toward a server whose CA the client messenger's
// ca_certificate_file names (required).
Status ConfigureBenchTlsClient(BenchConfig* config);

}  // namespace rrpc::bench
