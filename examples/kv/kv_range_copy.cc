#include "kv/kv_range_copy.h"

#include <utility>

#include "kv/kv_stream_pump.h"

namespace rrpc::kv {

void KvRangeCopy::Start(std::shared_ptr<rpc::Messenger> messenger, KvDb* db, KvStreamPump* pump,
                        const CopyRangeRequestPB* req, CopyRangeResponsePB* resp,
                        rpc::RpcContext* context, KvRangeSenderOptions options,
                        KvStreamStats* stats, KvOpenStreams* open_streams) {
  Result<Sockaddr> target = Sockaddr::Parse(req->target());
  if (!target.ok()) {
    return context->RespondRpcFailure(
        rpc::ErrorStatusPB::ERROR_INVALID_REQUEST,
        target.status().CloneAndPrepend("CopyRangeTo: bad target " + req->target()));
  }
  auto copy = std::make_shared<KvRangeCopy>(pump, resp, context, open_streams);
  rpc::StreamOptions sopts;
  const MonoTime deadline = context->deadline();
  if (deadline != MonoTime::Max()) {
    sopts.timeout = deadline - MonoTime::Now();
    if (sopts.timeout <= MonoDelta())
      return copy->Answer(Status::TimedOut("CopyRangeTo: no time left"));
  }
  KvServiceProxy target_proxy(std::move(messenger), *target);
  copy->load_ = target_proxy.Load(sopts);
  copy->open_id_ = open_streams->Add(copy->load_.untyped());
  if (copy->open_id_ == 0) {
    copy->load_.Cancel();
    return copy->Answer(Status::ServiceUnavailable("the kv-server is shutting down"));
  }
  KvRangeSender::Start(db, pump, copy->load_.untyped(), req->range(), std::move(options), stats,
                       [copy](const Status& s) { copy->OnSent(s); });
}

KvRangeCopy::KvRangeCopy(KvStreamPump* pump, CopyRangeResponsePB* resp, rpc::RpcContext* context,
                         KvOpenStreams* open_streams)
    : pump_(pump), resp_(resp), context_(context), open_streams_(open_streams) {}

KvRangeCopy::~KvRangeCopy() {
  if (context_ != nullptr) {
    load_.Cancel();
    Answer(Status::Aborted("CopyRangeTo: the server stopped before the copy ended"));
  }
}

void KvRangeCopy::OnSent(const Status& status) {
  if (!status.ok()) {
    load_.Cancel();
    // The stream's own status says more when the target ended it (e.g. its write failed).
    Status target = load_.status();
    return Answer(target.ok() ? status : target.CloneAndPrepend("CopyRangeTo: the target"));
  }
  load_.CloseWrites();
  // A client stream's end (the target's one response) makes it readable. The callback runs on
  // a reactor: it only submits.
  load_.OnReadable(
      [self = shared_from_this()] { self->pump_->Submit([self] { self->OnTargetAnswered(); }); });
}

void KvRangeCopy::OnTargetAnswered() {
  LoadResponsePB loaded;
  Status s = load_.Finish(&loaded);  // the stream ended: returns at once
  if (!s.ok()) return Answer(s.CloneAndPrepend("CopyRangeTo: the target"));
  resp_->set_pairs(loaded.pairs());
  resp_->set_bytes(loaded.bytes());
  Answer(Status::OK());
}

void KvRangeCopy::Answer(const Status& status) {
  rpc::RpcContext* context = context_;
  if (context == nullptr) return;
  context_ = nullptr;
  if (open_id_ != 0) open_streams_->Remove(open_id_);
  if (status.ok()) {
    context->RespondSuccess();
  } else {
    context->RespondFailure(status);
  }
}

}  // namespace rrpc::kv
