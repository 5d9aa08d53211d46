// MethodKind: what a method's options allow a client to do with a call that may have reached the
// server. Generated proxies (protoc-gen-rrpc) pass it to Proxy::AsyncRequest / SyncRequest, which
// pass it on to a cluster channel (ChannelIf). A plain value; any thread.
#pragma once

namespace rrpc::rpc {

enum class MethodKind {
  // Neither option: a call is retried only when its request surely never ran (refused as too
  // busy or unavailable, or never sent).
  kPlain,
  // option (rrpc.idempotent): running it twice has the effect of running it once, so a cluster
  // channel may retry it after its request was sent and may hedge it (docs/cluster.md). A proxy
  // to one address treats it as kPlain.
  kIdempotent,
  // option (rrpc.tracked): its calls carry a request id that every retry reuses, and a server
  // with a result tracker runs each id at most once (docs/exactly-once.md). A proxy to one
  // address also retries an attempt whose outcome was lost, as RetryPolicy allows. Through a
  // cluster channel it carries a request id too; result trackers are per server, so once an
  // attempt's outcome is lost after its request may have left, the call is retried only on that
  // server (pinned; ChannelOptions::attempt_timeout bounds each attempt; a RetryPolicy on the
  // controller is refused). docs/exactly-once.md tabulates which options apply where. A method
  // marked both idempotent and tracked is refused by protoc-gen-rrpc.
  kTracked,
};

}  // namespace rrpc::rpc
