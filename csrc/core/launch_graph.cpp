#include "core/launch_graph.h"

#include "core/errors.h"

namespace tunelab {
namespace {
// This thread's stream-capture mode set to relaxed while it lives, the old one restored after.
class RelaxedCaptureMode {
public:
    RelaxedCaptureMode() { check(driver().cuThreadExchangeStreamCaptureMode(&mode_), "cuThreadExchangeStreamCaptureMode"); }
    ~RelaxedCaptureMode() { driver().cuThreadExchangeStreamCaptureMode(&mode_); }
    RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
    RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

private:
    CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// cuStreamIsCapturing in the current context. The legacy default stream while a blocking stream of its context is
// captured counts as capturing: work on it would join (and break) that capture.
bool capturing(CUstream stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = driver().cuStreamIsCapturing(stream, &status);
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
    check(r, "cuStreamIsCapturing");
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}
}  // namespace

CUgraphExec capture_graph(const std::function<void(CUstream)>& record) {
    const RelaxedCaptureMode relaxed;
    const DriverApi& d = driver();
    CUstream capture = nullptr;
    check(d.cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    struct StreamGuard {
        CUstream s;
        ~StreamGuard() { driver().cuStreamDestroy(s); }
    } capture_guard{capture};
    check(d.cuStreamBeginCapture(capture, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
    CUgraph graph = nullptr;
    try {
        record(capture);
    } catch (...) {
        d.cuStreamEndCapture(capture, &graph);
        if (graph) d.cuGraphDestroy(graph);
        throw;
    }
    check(d.cuStreamEndCapture(capture, &graph), "cuStreamEndCapture");
    CUgraphExec exec = nullptr;
    const CUresult r = d.cuGraphInstantiateWithFlags(&exec, graph, 0);
    d.cuGraphDestroy(graph);  // the executable graph is independent of it
    check(r, "cuGraphInstantiateWithFlags");
    return exec;
}

void destroy_graph(CUgraphExec exec) {
    if (!exec) return;
    const RelaxedCaptureMode relaxed;
    driver().cuGraphExecDestroy(exec);
}

bool stream_is_capturing(CUstream stream, int device) {
    ensure_context(device);
    return capturing(stream);
}

LaunchGraph::LaunchGraph(std::vector<std::shared_ptr<PreparedLaunch>> launches) : launches_(std::move(launches)) {
    if (launches_.empty()) throw ConfigError("a launch graph needs at least one launch");
    for (const auto& l : launches_)
        if (!l) throw ConfigError("a launch graph's launches must not be None");
    launches_.front()->activate();  // the capture stream is made in the launches' context
    exec_ = capture_graph([this](CUstream s) {
        for (auto& l : launches_) (*l)(s);
    });
}

LaunchGraph::~LaunchGraph() { destroy_graph(exec_); }

void LaunchGraph::operator()(CUstream stream) {
    launches_.front()->activate();  // the graph's context current, as for a launch (and for the capture check)
    if (capturing(stream)) {
        for (auto& l : launches_) (*l)(stream);  // they join the caller's capture
        return;
    }
    check(driver().cuGraphLaunch(exec_, stream), "cuGraphLaunch");
}

}  // namespace tunelab
