// A fixed sequence of launches recorded once into a CUDA graph and replayed with one cuGraphLaunch: one driver call
// a replay instead of one per kernel (an op's search and select: ~2.7 us of host time against ~7.8 for the two
// launches on an H200 host, benchmarks/results/similarity_op_host_parts_hot_h200.json). The timer's CUDA-graph mode
// records through the same capture.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/driver.h"

namespace tunelab {

// Records `record(stream)` on a private stream in relaxed capture mode (unrelated CUDA calls of other threads or of
// `record` itself cannot break it) and returns the instantiated graph; the caller destroys it (cuGraphExecDestroy).
// The graph's first node depends on nothing: a replay is ordered after the work queued before it on its stream.
CUgraphExec capture_graph(const std::function<void(CUstream)>& record);

// Whether `stream` is being captured into a CUDA graph right now (cuStreamIsCapturing; the legacy default stream also
// while another stream of its context is captured in global mode). Makes a context current first, as a launch on
// `device` would (ensure_context: the current one if it is that device's, else its primary context), so that a
// thread that has not used CUDA yet can ask, and the legacy stream (handle 0) means that device's.
bool stream_is_capturing(CUstream stream, int device = -1);

class LaunchGraph {
public:
    // The launches keep their functions (and modules) loaded for as long as the graph lives.
    explicit LaunchGraph(std::vector<std::shared_ptr<PreparedLaunch>> launches);
    ~LaunchGraph();
    LaunchGraph(const LaunchGraph&) = delete;
    LaunchGraph& operator=(const LaunchGraph&) = delete;

    // One replay on `stream`. On a stream being captured (a caller's own CUDA graph) the launches are made one by
    // one instead, so that they become nodes of that graph.
    void operator()(CUstream stream);

private:
    std::vector<std::shared_ptr<PreparedLaunch>> launches_;
    CUgraphExec exec_ = nullptr;
};

}  // namespace tunelab
