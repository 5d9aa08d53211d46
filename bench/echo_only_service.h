// EchoOnlyService: a base for the tools' own BenchService implementations that serve Echo alone
// (overload-bench, cluster-bench): the stream methods rpc-bench serves (bench_stream_service.cc)
// end at once with NotSupported. Thread-safe as its derived class's Echo is.
#pragma once

#include "bench/bench.rrpc.h"

namespace rrpc::bench {

class EchoOnlyService : public BenchServiceIf {
 public:
  void Download(const StreamOpenPB*,
                rpc::ServerStream<StreamOpenPB, StreamChunkPB> stream) override {
    stream.Finish(Status::NotSupported("this server answers Echo only"));
  }
  void Upload(rpc::ServerStream<StreamChunkPB, StreamTotalsPB> stream) override {
    stream.Finish(Status::NotSupported("this server answers Echo only"));
  }
  void Exchange(rpc::ServerStream<StreamChunkPB, StreamChunkPB> stream) override {
    stream.Finish(Status::NotSupported("this server answers Echo only"));
  }
};

}  // namespace rrpc::bench
