// The one timing protocol for every kernel tunelab measures: ours, the baselines (torch callables) and users'.
// Per sample: L2 flush (a write over a buffer larger than L2) -> event -> launch -> event. Warm-up first.
// Raw samples are returned in microseconds; statistics are the caller's business.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

namespace tunelab {

struct TimerOptions {
    int warmup = 10;
    int samples = 100;
    bool flush_l2 = true;
    // > 0: each sample replays a CUDA graph holding this many launches and reports the time per launch, so
    // launch overhead does not rank microsecond kernels. The flush then precedes the replay, not each launch.
    int graph_launches = 0;
};

using LaunchFn = std::function<void(CUstream)>;

// `prepare`, when set, runs on the stream after each sample's flush (or in its place with flush_l2 off) and before
// the first event, so it is never timed: what a caller wants the cache to hold, or not, when the launch starts
// (e.g. a read over a buffer larger than L2: L2 evicted without the flush's dirty lines). Not run in warm-up.
std::vector<double> time_launches(const LaunchFn& launch, CUstream stream, const TimerOptions& options,
                                  const LaunchFn& prepare = LaunchFn());

// Times the L2 flush alone, so callers can check that the flush does what it claims.
long long l2_flush_bytes();

}  // namespace tunelab
