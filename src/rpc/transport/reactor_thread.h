// What a reactor thread tells the transports it runs, whose libraries do not see the Reactor:
// the loop it runs, and a way for state kept per reactor thread (RDMA's SRQ context) to let go
// of that loop before it goes. The Reactor calls EnterReactorThread and LeaveReactorThread on
// its own thread; everything here is per thread.
#pragma once

#include <ev.h>

#include <functional>

namespace rrpc::rpc {

// The loop this reactor thread runs; nullptr on a thread that is not a reactor's.
struct ev_loop* ReactorLoopOfThisThread();
// Reactor thread: `fn` runs on this thread when its reactor stops, after its connections have
// closed and before its loop is destroyed; in the order given. The caller keeps what `fn` uses
// alive until then.
void AtReactorStop(std::function<void()> fn);

// The Reactor, on its thread: as it starts (`loop`: the loop it runs), and once its loop has
// stopped for good (runs the AtReactorStop functions).
void EnterReactorThread(struct ev_loop* loop);
void LeaveReactorThread();

}  // namespace rrpc::rpc
