// KvRangeCopy: CopyRangeTo's server side: opens a Load stream to the target kv-server and sends
// this server's pairs of the range into it with a KvRangeSender, then answers the call with the
// target's counts. Flow control is end to end: the target grants the Load stream credit as it
// writes, so a slow target makes the sender wait (holding no thread, one window of messages),
// which slows this server's reading to the target's writing.
//
// The call is answered once, from a pump thread (or from Start when the target is malformed):
// the target's counts, the target's error, this server's error, or Aborted when the server
// stops first. The copy ends early when the caller's deadline passes (the Load stream carries
// that deadline).
#pragma once

#include <memory>

#include "kv/kv.rrpc.h"
#include "kv/kv_open_streams.h"
#include "kv/kv_range_sender.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"

namespace rrpc::kv {

class KvRangeCopy : public std::enable_shared_from_this<KvRangeCopy> {
 public:
  // `req`, `resp` and `context` are the call's (valid until it is answered); `messenger` makes
  // the call to the target. `db`, `pump` and `stats` outlive the copy.
  static void Start(std::shared_ptr<rpc::Messenger> messenger, KvDb* db, KvStreamPump* pump,
                    const CopyRangeRequestPB* req, CopyRangeResponsePB* resp,
                    rpc::RpcContext* context, KvRangeSenderOptions options, KvStreamStats* stats,
                    KvOpenStreams* open_streams);

  // For Start (make_shared).
  KvRangeCopy(KvStreamPump* pump, CopyRangeResponsePB* resp, rpc::RpcContext* context,
              KvOpenStreams* open_streams);
  // Answers Aborted when the copy never finished (its pump stopped).
  ~KvRangeCopy();

 private:
  using LoadStream = rpc::ClientStream<KvChunkPB, LoadResponsePB>;
  // The sender is done: half-close the Load and wait for the target's answer.
  void OnSent(const Status& status);
  // The target answered (runs on a pump thread).
  void OnTargetAnswered();
  void Answer(const Status& status);

  KvStreamPump* const pump_;
  CopyRangeResponsePB* const resp_;
  rpc::RpcContext* context_;  // null once answered
  KvOpenStreams* const open_streams_;
  uint64_t open_id_ = 0;  // load_'s id in open_streams_
  LoadStream load_;
};

}  // namespace rrpc::kv
