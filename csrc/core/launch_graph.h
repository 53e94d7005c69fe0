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

// Records `record(stream)` on a private stream and returns the instantiated graph; the caller destroys it with
// destroy_graph. Its own capture is in relaxed mode (unrelated CUDA calls of other threads or of `record` cannot break
// it), and this thread's calls run in relaxed mode throughout, so that they do not break a capture of the caller's
// either: instantiating a graph is "unsafe" in a global-mode capture of any thread, or a thread-local one of this
// thread, and would invalidate it (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, seen on an H200 against a torch.cuda.graph
// capture in another thread). The graph's first node depends on nothing: a replay is ordered after the work queued
// before it on its stream.
CUgraphExec capture_graph(const std::function<void(CUstream)>& record);

// cuGraphExecDestroy in relaxed mode, for the same reason (a replay still running completes first: the driver frees
// the graph then).
void destroy_graph(CUgraphExec exec);

// Whether `stream` is being captured into a CUDA graph right now (cuStreamIsCapturing; the legacy default stream also
// while a blocking stream of its context is captured). Asks in `device`'s context (ensure_context: the current one
// if it is that device's, else its primary context, which stays current, as after a launch there), so that a thread
// that has not used CUDA yet can ask and the legacy stream (handle 0) means that device's.
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
