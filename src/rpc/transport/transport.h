// The transport seam: how a connection moves frames. A Connection (rpc/core) owns exactly one
// Transport and sees it only through this interface; the transport sees its connection only as a
// TransportHost. A transport delivers whole frames upward (a byte-stream transport cuts them with
// a FrameReader; a message transport such as RDMA receives them as messages) and writes the
// connection's queue of frames (TransferQueue) as far as it can, so TCP, TLS and RDMA share the
// frame codec, the calls and the service pool without any of them pretending to be a socket.
//
// Threads: everything runs on the reactor thread that owns the connection, except Write(), which
// a worker may call under the connection's write lock when capabilities().concurrent_write says
// so. Callbacks into the host run on the reactor thread, never from inside Write().
#pragma once

#include <ev.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rpc/transport/outbound_transfer.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"
#include "util/socket.h"

namespace rrpc {
class MetricRegistry;
}

namespace rrpc::rpc {

struct StreamTransportOptions;  // tcp_transport.h

// What a transport allows, so the connection asks instead of assuming.
struct TransportCapabilities {
  // Write() may run on another thread (holding the connection's write lock) while the reactor
  // reads: a worker then writes a lone response itself and saves a hand-off. False where reading
  // and writing share state, e.g. one TLS session.
  bool concurrent_write = false;
  // A client may send its first calls right behind its negotiation request instead of waiting for
  // the reply: true when nothing the reply can say changes how later bytes travel.
  bool calls_may_follow_hello = false;
};

// What a transport knows about the privacy and the peer of its connection, for negotiation and
// for RpcContext. Plain TCP: nothing.
struct TransportSecurity {
  // The bytes travel encrypted and integrity-protected (TLS established).
  bool encrypted = false;
  // The user named by the peer's certificate, when it presented one that verified against our
  // CA (mutual TLS); empty otherwise.
  std::string peer_user;
};

// A stream a transport hands over to the next one (TLS over the TCP socket; RDMA's bootstrap
// socket): the socket and the bytes already received from it but not consumed.
struct DetachedStream {
  Socket socket;
  std::string unread;
};

// The connection, as its transport sees it. Reactor thread only. Any callback may close the
// transport (Transport::Close()); the transport checks that before it goes on.
class TransportHost {
 public:
  // A client transport finished connecting (and any handshake of its own): frames may flow.
  virtual void OnTransportConnected() = 0;
  // `bytes` arrived from the peer (before framing); `now` is one clock read for the batch.
  virtual void OnBytesReceived(size_t bytes, MonoTime now) = 0;
  // The bytes asked for with ExpectPreamble(), as one slice (valid until the callback returns
  // or detaches the transport: copy what outlives that).
  virtual void OnPreamble(Slice preamble) = 0;
  // One complete frame: the bytes after its length prefix, sharing the transport's buffer (the
  // host may take it; by reference, saving a move and a destruction per frame).
  virtual void OnFrame(BlockSlice&& frame) = 0;
  // The transport takes bytes again (asked for with NotifyWhenWritable(true)).
  virtual void OnWritable() = 0;
  // The peer closed, or the transport failed (reset, I/O error): the connection is over.
  virtual void OnTransportFailed(const Status& reason) = 0;
  // The peer broke the framing (e.g. a frame above the maximum size): the connection is over,
  // and an operator should hear why.
  virtual void OnProtocolError(const Status& reason) = 0;

 protected:
  ~TransportHost() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // "tcp", "tls", "rdma": shown on /connections.
  virtual const char* name() const = 0;
  virtual TransportCapabilities capabilities() const = 0;
  // Reactor thread.
  virtual TransportSecurity security() const { return {}; }

  // Reactor thread, once: starts I/O on `loop`; from now on the transport calls `host`.
  virtual void Start(struct ev_loop* loop, TransportHost* host) = 0;
  // Reactor thread: the next `bytes` received go to host->OnPreamble() as one slice, before any
  // frame (the server's connection preamble). NotSupported where there is no byte stream.
  virtual Status ExpectPreamble(size_t bytes) = 0;

  // Writes from the front of `queue` as much as the transport takes now, at most `max_bytes`,
  // stopping before a cancelled transfer. Returns the bytes taken (the caller advances the
  // transfers by them): 0 when it takes nothing now (then NotifyWhenWritable()), an error when the
  // connection is broken. A transport that must keep bytes beyond the call (RDMA until the send
  // completes) copies them or holds their blocks. Reactor thread, or any thread holding the
  // connection's write lock when capabilities().concurrent_write.
  virtual Result<size_t> Write(const TransferQueue& queue, size_t max_bytes) = 0;
  // Under the connection's write lock: whether the transport keeps bytes Write() took that the
  // socket has not taken yet (TLS holds a record it must finish). The connection then has the
  // reactor watch for writability (NotifyWhenWritable) even with an empty queue.
  virtual bool HoldsUnsentBytes() const { return false; }
  // Reactor thread: whether to call host->OnWritable() once more bytes can be taken.
  virtual void NotifyWhenWritable(bool on) = 0;
  // Reactor thread: stops (true) or resumes reading, for backpressure.
  virtual void PauseReading(bool paused) = 0;

  // Reactor thread: hands the underlying byte stream to another transport and goes inert.
  // NotSupported where there is none.
  virtual Result<DetachedStream> Detach() = 0;
  // Reactor thread: stops every watcher and callback and releases what the transport holds
  // (closes its socket). Idempotent; safe from inside a host callback.
  virtual void Close() = 0;

  // ---- Reads by a synchronous caller (docs/architecture.md, "The synchronous call path"). A
  // client connection may hand the read side of its stream to the one thread that waits for the
  // connection's only call; the connection decides who reads (its read ownership), the transport
  // only obeys. The defaults say "not supported", so a wrapper (fault injection, a test's) or a
  // transport whose reads share state with its writes (TLS, RDMA) keeps every read on the reactor.
  //
  // Reactor thread: stops reading (the watcher, and any read loop now running) until
  // ResumeReads(); the buffered bytes stay. false, doing nothing, where unsupported.
  virtual bool ParkReads() { return false; }
  // Reactor thread, after ParkReads(): reads again. `read_now`: delivers what is buffered and
  // reads the socket at once (from a task; the connection may close inside); otherwise only
  // restarts the watcher (and has buffered bytes delivered in this loop iteration).
  virtual void ResumeReads(bool read_now) {}
  // A caller thread, while reads are parked and nobody else reads: true when the peer has sent
  // nothing since (no bytes, no close), so a call written now meets the stream as it was.
  virtual bool PeerQuietWhileParked() { return false; }
  // A caller thread that the connection gave the parked read side: the next complete frame,
  // waiting (a blocking recv) until `deadline`. true with `*frame`; false when the deadline
  // passed first, or one bounded wait of the transport's (at most a second) ended first: the
  // caller looks at its deadline and at who else wants the reads, and may call again (a partial
  // frame stays buffered); an error when the stream ended or failed or a frame is bad (what was
  // read stays buffered, so the reactor meets the same once it reads again). `*bytes_read`:
  // bytes received.
  virtual Result<bool> ReadFrameWhileParked(MonoTime deadline, BlockSlice* frame,
                                            size_t* bytes_read) {
    return Status::NotSupported("reads by the caller");
  }
  // Reactor thread: Close() while a caller may be inside ReadFrameWhileParked(): ends the stream
  // for it at once (shutdown) and keeps the descriptor, and the buffer it reads into, until the
  // transport is destroyed, so the caller never reads from a descriptor number reused meanwhile.
  virtual void CloseUnderCaller() { Close(); }

  // Reactor thread: bytes received and not yet delivered (a partial frame), which the
  // connection counts against its inbound memory limit. 0 where the transport cannot tell.
  virtual size_t buffered_bytes() const { return 0; }

  // Reactor thread: what /connections shows about it beyond bytes and calls (TLS version and
  // cipher, RDMA credits...), as (name, value) pairs.
  virtual void Describe(std::vector<std::pair<std::string, std::string>>* out) const {}
  // The address the connection's socket is bound to; unset (family 0) when unknown.
  virtual Sockaddr LocalAddress() const { return Sockaddr(); }
};

// An upgrade of a connection to another transport agreed in-band right after the rrpc
// negotiation (the RDMA bootstrap, docs/wire-format.md): the client offers a bootstrap message,
// the server answers one, and then both sides continue over the new transport, or both stay where
// they are (a fallback, never half-upgraded). Where the server's answer asks for it, the client
// sends a third message, its confirmation, after checking the new transport (RDMA's path probe):
// the server decides only then. One per connection; its reactor thread.
class TransportUpgrade {
 public:
  virtual ~TransportUpgrade() = default;
  // Right before Offer (client; `offer` empty) or Answer (server; the client's offer): starts the
  // work that step needs which may block its thread for long (RDMA's control-path verbs: queue
  // pair, CQ and memory registration) on a thread of the upgrade's own. false: nothing started,
  // the step may run now. true: `ready` is called once, on that other thread, when the work is
  // done (also when it failed: the step then falls back); the caller then runs the step on its
  // reactor thread. The caller may destroy the upgrade meanwhile (the connection closed, on its
  // reactor thread): the work then ends without it and `ready` still comes (or never, when the
  // upgrade's owner, e.g. its transport factory, is gone). Default: nothing to prepare.
  virtual bool Prepare(Slice offer, std::function<void()> ready) { return false; }
  // Negotiation features (RpcFeatureFlag values) this upgrade understands beyond
  // TRANSPORT_UPGRADE: a client lists them in its NegotiatePB; a server echoes in its reply those
  // the client listed too. Default: none.
  virtual std::vector<int> Features() const { return {}; }
  // The peer's NegotiatePB features, before the steps they change: a server gets the client's
  // before Prepare and Answer, a client the server's reply's before PrepareAccept and Accept.
  virtual void PeerFeatures(const std::vector<int>& features) {}
  // Client: the bootstrap message it offers.
  virtual std::string Offer() = 0;
  // Server: its answer to the client's offer (a fallback answer where it can't or won't).
  virtual std::string Answer(Slice offer) = 0;
  // Client, right before Accept(answer): as Prepare, for the work Accept needs (RDMA: the queue
  // pairs' RTR/RTS toward the server's, which on RoCE waits for the kernel to resolve the peer's
  // MAC, and the path probe's round trip). true: `ready` comes once, on the upgrade's thread, and
  // the caller then calls Accept with the same answer on its reactor thread; false: nothing
  // started, Accept may run now. The caller may destroy the upgrade meanwhile, as with Prepare.
  // Default: nothing to prepare.
  virtual bool PrepareAccept(Slice answer, std::function<void()> ready) { return false; }
  // Client: the server's answer. A fallback answer is OK (both stay); an error means the server
  // moved on but this side can't follow (e.g. a wrong nonce): the connection must close.
  virtual Status Accept(Slice answer) = 0;
  // Client, after an OK Accept: the confirmation to send the server, or empty when its answer
  // asked for none. agreed() then says whether both sides move.
  virtual std::string Confirmation() { return {}; }
  // Server, after Answer: whether it waits for the client's confirmation before deciding.
  virtual bool AwaitsConfirmation() const { return false; }
  // Server: the client's confirmation. OK (agreed() says whether both move) or an error when
  // it is malformed: the connection must close.
  virtual Status Confirm(Slice confirmation) {
    return Status::IllegalState("this upgrade takes no confirmation");
  }
  // Client: the server does not upgrade at all (its negotiation reply lacks the feature).
  virtual void PeerDeclined() = 0;
  // After Answer (or Confirm), Accept (and Confirmation) or PeerDeclined: whether both sides
  // move to the new transport.
  virtual bool agreed() const = 0;
  // When agreed(): the new transport, continuing the connection over `stream`.
  virtual Result<std::unique_ptr<Transport>> Upgrade(DetachedStream stream) = 0;
};

// Makes the transports of a messenger's connections. Owned by the messenger; called on its
// reactor threads, so implementations are thread-safe (or stateless).
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  // A transport for a connection a reactor accepted.
  virtual std::unique_ptr<Transport> NewServerTransport(Socket accepted) = 0;
  // A transport opening a connection to `remote`; its connect may finish later
  // (TransportHost::OnTransportConnected), or fail (OnTransportFailed).
  virtual Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) = 0;
  // An upgrade this connection offers (client) or accepts (server) after negotiating; nullptr
  // when the factory has none (the connection stays on its first transport).
  virtual std::unique_ptr<TransportUpgrade> NewUpgrade(bool server_side) { return nullptr; }
  // The same for a connection with `remote` (what the connection calls): a factory that keeps
  // something per peer (RDMA's dead paths) overrides it. Default: NewUpgrade(server_side).
  virtual std::unique_ptr<TransportUpgrade> NewUpgrade(bool server_side, const Sockaddr& remote) {
    return NewUpgrade(server_side);
  }
  // The same, with the address the connection's socket is bound to (Transport::LocalAddress;
  // RDMA chooses the connection's GID by it). Default: NewUpgrade(server_side, remote).
  virtual std::unique_ptr<TransportUpgrade> NewUpgrade(bool server_side, const Sockaddr& remote,
                                                       const Sockaddr& local) {
    return NewUpgrade(server_side, remote);
  }
  // The registry of the messenger using this factory (its /metrics), given once by the
  // messenger before its first connection, for a factory with metrics of its own (RDMA's) to
  // export them there. Default: none kept.
  virtual void UseMetricRegistry(MetricRegistry* registry) {}
  // The messenger's dead-peer settings for TCP sockets (the keepalive and user-timeout fields of
  // `stream`), given once by the messenger before its first connection, for a factory that makes
  // TCP sockets of its own (RDMA's: the bootstrap socket each connection keeps, and connections
  // that stay on TCP). Default: none kept.
  virtual void UseDeadPeerSettings(const StreamTransportOptions& stream) {}
};

}  // namespace rrpc::rpc
