// The raw-tcp server's connection, and its --server_workers mode: the loops hand every complete
// frame to worker threads, which answer it and write the answer themselves (a mutex and condition
// variable queue, the plainest hand-off). It measures what one thread hop per call costs a TCP
// server on this machine: the hop a worker-pool RPC server makes.
#pragma once

#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "bench/peers/raw_tcp_wire.h"

namespace rrpc {
namespace bench {

// Owned by its loop; in --server_workers mode also shared with the workers answering its frames,
// so the descriptor closes with the last owner (a worker never writes to a reused descriptor).
struct Connection {
  ~Connection() {
    if (fd >= 0) close(fd);
  }
  int fd = -1;
  uint32_t events = 0;  // the interest set registered with epoll
  size_t need = 0;      // bytes a partially read frame still needs
  ByteBuffer in;
  // --server_workers mode, loop thread only: the frame being read into a buffer of its own size
  // (prefix included), and the next frame's length prefix.
  std::unique_ptr<char[]> frame;
  size_t frame_size = 0;
  size_t frame_got = 0;
  char prefix[kFrameHeaderBytes] = {};
  size_t prefix_got = 0;
  uint64_t frames_read = 0;
  // `out` is the loop's alone without workers; with workers, both sides take out_mu.
  std::mutex out_mu;
  ByteBuffer out;
  bool flush_requested = false;  // under out_mu: the loop is asked to flush the rest of `out`
  // Under out_mu, workers only. The protocol has no call ids: answers leave in request order, so
  // one finished before its predecessors waits here, by sequence number.
  uint64_t answers_sent = 0;
  std::map<uint64_t, std::pair<std::unique_ptr<char[]>, size_t>> early_answers;
};

// Where a worker sends its answer: the loop that owns the connection.
class AnswerSink {
 public:
  virtual ~AnswerSink() = default;
  // Worker thread: sends the answer to the connection's frame number `seq` (0, 1, ...), in order.
  virtual void SendFromWorker(const std::shared_ptr<Connection>& c, uint64_t seq,
                              std::unique_ptr<char[]> data, size_t len) = 0;
};

class HandoffPool {
 public:
  struct Job {
    std::shared_ptr<Connection> conn;
    AnswerSink* sink;
    uint64_t seq;                   // the frame's place in its connection's stream
    std::unique_ptr<char[]> frame;  // prefix + payload
    size_t size;
  };

  // Answers with `response_bytes` bytes (-1: an echo); `corrupt` flips each answer's last byte.
  HandoffPool(int workers, long response_bytes, bool corrupt);
  // Joins the workers; queued jobs are dropped.
  ~HandoffPool();

  void Submit(Job job);

 private:
  void Run();

  const long response_bytes_;
  const bool corrupt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;   // under mu_
  bool stopping_ = false;  // under mu_
  std::vector<std::thread> threads_;
};

}  // namespace bench
}  // namespace rrpc
