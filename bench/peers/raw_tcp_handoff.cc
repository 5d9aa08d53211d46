#include "bench/peers/raw_tcp_handoff.h"

#include "bench/peers/payload_pattern.h"

namespace rrpc {
namespace bench {

HandoffPool::HandoffPool(int workers, long response_bytes, bool corrupt)
    : response_bytes_(response_bytes), corrupt_(corrupt) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Run(); });
}

HandoffPool::~HandoffPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void HandoffPool::Submit(Job job) {
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void HandoffPool::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (response_bytes_ < 0 && !corrupt_) {  // an echo is the frame itself
      job.sink->SendFromWorker(job.conn, job.seq, std::move(job.frame), job.size);
      continue;
    }
    const size_t len = job.size - kFrameHeaderBytes;
    const size_t resp_len = response_bytes_ < 0 ? len : static_cast<size_t>(response_bytes_);
    std::unique_ptr<char[]> response(new char[kFrameHeaderBytes + resp_len]);
    EncodeFrameLength(static_cast<uint32_t>(resp_len), response.get());
    PayloadPattern::BuildResponse(job.frame.get() + kFrameHeaderBytes, len,
                                  response.get() + kFrameHeaderBytes, resp_len);
    if (corrupt_ && resp_len > 0) response[kFrameHeaderBytes + resp_len - 1] ^= 1;
    job.sink->SendFromWorker(job.conn, job.seq, std::move(response), kFrameHeaderBytes + resp_len);
  }
}

}  // namespace bench
}  // namespace rrpc
