#include "rpc/observe/rpc_metrics.h"

#include <glog/logging.h>

#include <utility>

namespace rrpc::rpc {

void MethodMetrics::CountError(ErrorStatusPB::RpcErrorCodePB code) {
  switch (code) {
    case ErrorStatusPB::ERROR_APPLICATION:
      errors_application->Increment();
      return;
    case ErrorStatusPB::ERROR_INVALID_REQUEST:
      errors_invalid_request->Increment();
      return;
    case ErrorStatusPB::ERROR_TIMED_OUT:
      errors_timed_out->Increment();
      return;
    case ErrorStatusPB::ERROR_SERVER_TOO_BUSY:
      errors_too_busy->Increment();
      messenger->too_busy_rejections->Increment();
      return;
    case ErrorStatusPB::ERROR_UNAVAILABLE:
      errors_unavailable->Increment();
      return;
    default:
      errors_other->Increment();
      return;
  }
}

void ClientMethodMetrics::CallFinished(const Status& status, MonoTime sent_at, MonoTime now) {
  latency_us->Record(MethodMetrics::ElapsedMicros(sent_at, now));
  if (status.ok()) return;
  errors->Increment();
  if (status.IsTimedOut()) timeouts->Increment();
}

MessengerMetrics::MessengerMetrics(MetricRegistry* registry, const std::string& messenger_name)
    : MessengerMetrics(registry, registry->FindOrCreateEntity("messenger", messenger_name)) {}

MessengerMetrics::MessengerMetrics(MetricRegistry* registry, scoped_refptr<MetricEntity> entity)
    : connections_open(entity->FindOrCreateGauge(&METRIC_connections_open)),
      connections_accepted(entity->FindOrCreateCounter(&METRIC_connections_accepted_total)),
      connections_closed(entity->FindOrCreateCounter(&METRIC_connections_closed_total)),
      received_bytes(entity->FindOrCreateCounter(&METRIC_received_bytes_total)),
      sent_bytes(entity->FindOrCreateCounter(&METRIC_sent_bytes_total)),
      reactor_busy_time_us(entity->FindOrCreateCounter(&METRIC_reactor_busy_time_us)),
      peer_errors(entity->FindOrCreateCounter(&METRIC_peer_errors_total)),
      connections_refused(entity->FindOrCreateCounter(&METRIC_connections_refused_total)),
      connections_handed_over(entity->FindOrCreateCounter(&METRIC_connections_handed_over_total)),
      accept_fd_exhausted(entity->FindOrCreateCounter(&METRIC_accept_fd_exhausted_total)),
      inbound_memory_bytes(entity->FindOrCreateGauge(&METRIC_inbound_memory_bytes)),
      inbound_memory_peak_bytes(entity->FindOrCreateGauge(&METRIC_inbound_memory_peak_bytes)),
      reads_paused_for_memory(entity->FindOrCreateCounter(&METRIC_reads_paused_for_memory_total)),
      frames_refused(entity->FindOrCreateCounter(&METRIC_frames_refused_total)),
      service_queue_overflows(entity->FindOrCreateCounter(&METRIC_service_queue_overflows_total)),
      calls_expired_in_queue(entity->FindOrCreateCounter(&METRIC_calls_expired_in_queue_total)),
      calls_cancelled_in_queue(entity->FindOrCreateCounter(&METRIC_calls_cancelled_in_queue_total)),
      calls_cancelled_running(entity->FindOrCreateCounter(&METRIC_calls_cancelled_running_total)),
      cancel_requests(entity->FindOrCreateCounter(&METRIC_cancel_requests_total)),
      streams_open(entity->FindOrCreateGauge(&METRIC_streams_open)),
      streams_opened(entity->FindOrCreateCounter(&METRIC_streams_opened_total)),
      stream_messages_sent(entity->FindOrCreateCounter(&METRIC_stream_messages_sent_total)),
      stream_messages_received(entity->FindOrCreateCounter(&METRIC_stream_messages_received_total)),
      stream_bytes_sent(entity->FindOrCreateCounter(&METRIC_stream_bytes_sent_total)),
      stream_bytes_received(entity->FindOrCreateCounter(&METRIC_stream_bytes_received_total)),
      too_busy_rejections(entity->FindOrCreateCounter(&METRIC_too_busy_rejections_total)),
      no_such_method(entity->FindOrCreateCounter(&METRIC_no_such_method_total)),
      worker_idle_polls(entity->FindOrCreateCounter(&METRIC_worker_idle_polls_total)),
      worker_idle_poll_hits(entity->FindOrCreateCounter(&METRIC_worker_idle_poll_hits_total)),
      sync_responses_read_by_caller(
          entity->FindOrCreateCounter(&METRIC_sync_responses_read_by_caller_total)),
      compress_input_bytes(entity->FindOrCreateCounter(&METRIC_compress_input_bytes_total)),
      compress_output_bytes(entity->FindOrCreateCounter(&METRIC_compress_output_bytes_total)),
      compress_skipped(entity->FindOrCreateCounter(&METRIC_compress_skipped_total)),
      compress_time_ns(entity->FindOrCreateCounter(&METRIC_compress_time_ns)),
      decompress_input_bytes(entity->FindOrCreateCounter(&METRIC_decompress_input_bytes_total)),
      decompress_output_bytes(entity->FindOrCreateCounter(&METRIC_decompress_output_bytes_total)),
      decompress_refused(entity->FindOrCreateCounter(&METRIC_decompress_refused_total)),
      decompress_time_ns(entity->FindOrCreateCounter(&METRIC_decompress_time_ns)),
      registry_(registry),
      entity_(std::move(entity)),
      // Reads 0 until the service pool attaches its queue.
      service_queue_length_(
          entity_->FindOrCreateCallbackGauge(&METRIC_service_queue_length, nullptr)) {}

MessengerMetrics::~MessengerMetrics() { DetachServiceQueueLength(); }

void MessengerMetrics::BodyCompressed(size_t in, size_t out, bool skipped, MonoDelta elapsed) {
  compress_input_bytes->IncrementBy(static_cast<int64_t>(in));
  compress_output_bytes->IncrementBy(static_cast<int64_t>(out));
  if (skipped) compress_skipped->Increment();
  compress_time_ns->IncrementBy(elapsed.ToNanoseconds());
}

void MessengerMetrics::BodyDecompressed(size_t in, size_t out, bool ok, MonoDelta elapsed) {
  decompress_input_bytes->IncrementBy(static_cast<int64_t>(in));
  if (ok) {
    decompress_output_bytes->IncrementBy(static_cast<int64_t>(out));
  } else {
    decompress_refused->Increment();
  }
  decompress_time_ns->IncrementBy(elapsed.ToNanoseconds());
}

MethodMetrics* MessengerMetrics::ServerMethod(const std::string& service,
                                              const std::string& method) {
  const std::string id = service + "." + method;
  MutexLock l(mu_);
  std::unique_ptr<MethodMetrics>& slot = server_methods_[id];
  if (slot) return slot.get();
  scoped_refptr<MetricEntity> entity =
      registry_->FindOrCreateEntity("method", id, {{"service", service}, {"method", method}});
  slot = std::make_unique<MethodMetrics>(MethodMetrics{
      this,
      entity->FindOrCreateCounter(&METRIC_calls_total),
      entity->FindOrCreateCounter(&METRIC_errors_application_total),
      entity->FindOrCreateCounter(&METRIC_errors_invalid_request_total),
      entity->FindOrCreateCounter(&METRIC_errors_timed_out_total),
      entity->FindOrCreateCounter(&METRIC_errors_too_busy_total),
      entity->FindOrCreateCounter(&METRIC_errors_unavailable_total),
      entity->FindOrCreateCounter(&METRIC_errors_other_total),
      entity->FindOrCreateHistogram(&METRIC_queue_time_us),
      entity->FindOrCreateHistogram(&METRIC_handler_time_us),
      entity->FindOrCreateHistogram(&METRIC_total_time_us),
      entity->FindOrCreateCounter(&METRIC_request_bytes_total),
      entity->FindOrCreateCounter(&METRIC_response_bytes_total),
  });
  entities_["method:" + id] = std::move(entity);
  return slot.get();
}

ClientMethodMetrics* MessengerMetrics::ClientMethod(const std::string& service,
                                                    const std::string& method) {
  const std::string id = service + "." + method;
  MutexLock l(mu_);
  std::unique_ptr<ClientMethodMetrics>& slot = client_methods_[id];
  if (slot) return slot.get();
  scoped_refptr<MetricEntity> entity =
      registry_->FindOrCreateEntity("client", id, {{"service", service}, {"method", method}});
  slot = std::make_unique<ClientMethodMetrics>(ClientMethodMetrics{
      entity->FindOrCreateHistogram(&METRIC_client_latency_us),
      entity->FindOrCreateCounter(&METRIC_client_timeouts_total),
      entity->FindOrCreateCounter(&METRIC_client_errors_total),
      entity->FindOrCreateCounter(&METRIC_client_retries_total),
  });
  entities_["client:" + id] = std::move(entity);
  return slot.get();
}

void MessengerMetrics::AttachServiceQueueLength(std::function<int64_t()> length) {
  service_queue_length_->SetCallback(std::move(length));
}

void MessengerMetrics::DetachServiceQueueLength() {
  // The queue is gone or going: it holds nothing any more.
  service_queue_length_->DetachToConstant(0);
}

}  // namespace rrpc::rpc
