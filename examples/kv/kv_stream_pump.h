// KvStreamPump: the threads that run kv's stream steps: reading a key range into a stream
// (ScanStream, CopyRangeTo) and applying a Load's messages. A step reads or writes RocksDB, so it
// may wait on the disk: it runs here, never on a reactor, and it never waits for the network:
// a stream with no room (or nothing to read) registers OnWritable/OnReadable, whose callback (on
// a reactor) only submits the next step. So an open stream holds no thread while its peer is
// slow, and a few pump threads serve any number of streams.
//
// Thread-safety: Submit() from any thread (reactor callbacks included; it never blocks).
// Stop() from the owner's controlling thread.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "rrpc/util/mutex.h"
#include "rrpc/util/status.h"

namespace rrpc::kv {

class KvStreamPump {
 public:
  KvStreamPump() = default;
  ~KvStreamPump();  // Stop()
  KvStreamPump(const KvStreamPump&) = delete;
  KvStreamPump& operator=(const KvStreamPump&) = delete;

  // Starts `num_threads` threads (at least 1).
  Status Start(int num_threads);
  // Runs `step` on a pump thread, steps in the order submitted. After Stop(), `step` is
  // destroyed unrun (a stream it holds then ends: released).
  void Submit(std::function<void()> step);
  // Lets the running steps finish, drops the queued ones and joins the threads. Idempotent.
  void Stop();

 private:
  void Loop();

  Mutex mu_;
  CondVar ready_;
  std::deque<std::function<void()>> queue_ RRPC_GUARDED_BY(mu_);
  bool stopping_ RRPC_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace rrpc::kv
